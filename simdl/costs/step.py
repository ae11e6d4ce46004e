"""What both engines compute the same way from a plan: input time, bytes sent, the step's split."""

from __future__ import annotations

from ..cluster import Cluster
from ..collectives import bus_bytes_factor
from ..collectives.backends import get_backend
from ..strategies.plan import PSPlan, SpmdPlan
from ..workload.workload import Workload


def data_time(workload: Workload, cluster: Cluster, loader_workers: int) -> float:
    """Seconds a rank's DataLoader needs to produce one batch with ``loader_workers`` processes."""
    per_sample = cluster.spec.host.dataloader_sample.value
    return workload.batch_size * per_sample / max(loader_workers, 1)


def step_split(
    kinds: dict[str, float],
    compute: float,
    iteration: float,
    *,
    interference: float = 0.0,
    blocking_wait: float = 0.0,
    input_stall: float = 0.0,
) -> dict[str, float]:
    """Where a step's seconds go (``Result.step_split_s``); the values add up to the step.

    ``kinds``: the plan's compute-stream seconds by kind (:func:`simdl.analytic.costs.compute_split`),
    scaled to the engine's compute-stream busy time ``compute`` (the simulator's includes
    jitter and stragglers); ``interference`` and ``blocking_wait`` the SPMD step's added
    seconds; ``input_stall`` the loader's; ``exposed_comm`` what is left: the compute stream
    idle, waiting for communication (a PS worker's push, update and pull).
    """
    total = sum(kinds.values())
    scale = compute / total if total > 0 else 0.0
    out = {k: v * scale for k, v in kinds.items()}
    out["interference"] = interference
    out["blocking_wait"] = blocking_wait
    out["exposed_comm"] = max(iteration - input_stall - compute - interference - blocking_wait, 0.0)
    out["input_stall"] = input_stall
    return out


def bytes_sent(plan: SpmdPlan | PSPlan, cluster: Cluster) -> float:
    """Bytes each GPU sends per iteration: its collectives' payloads times their bus factor
    (a ring all-reduce sends 2(n-1)/n of its buffer) as the cluster's backend runs them
    (gloo's reduce-scatter is an all-reduce: simdl.collectives.backends), or a PS worker's
    pushed gradients (the pulled parameters are received). Both engines report this."""
    if isinstance(plan, PSPlan):
        return plan.push_bytes
    backend = get_backend(cluster.spec.collective_backend)
    return sum(
        bus_bytes_factor(backend.wire_collective(t.collective), plan.groups[t.group].size) * t.comm_bytes
        for t in plan.tasks
        if t.collective
    )
