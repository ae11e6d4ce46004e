"""Parameter server: workers compute gradients, push them to server shards, pull parameters.

The classic design (Li et al., "Scaling Distributed Machine Learning with the Parameter
Server", OSDI 2014), as study 1 ran it with one CPU server node and GPU workers:
- every worker holds a full replica, runs forward and backward on its own batch,
  pushes its gradients (fp32) to the servers and pulls the current parameters;
- the parameters are split evenly over ``ps_servers`` shards, each on its own server
  with its own NIC; the server applies the optimizer update on the CPU;
- ``ps-sync``: a barrier per iteration; the servers average the N pushes and apply
  one update, then every worker pulls.
- ``ps-async``: each push is applied on arrival (Hogwild-style); a worker's update is
  stale by the number of updates other workers applied between its pull and its push.
- ``ps-ssp``: stale-synchronous parallel (Ho et al., NIPS 2013): asynchronous, but a
  worker more than ``staleness_bound`` iterations ahead of the slowest waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster import Cluster
from ..errors import SimdlError
from ..memory.rowtree import add_recompute
from ..memory.timeline import ps_worker_timeline
from ..workload.workload import Workload
from .config import StrategyConfig
from .optimizer_step import host_update_bytes
from .options import PSOptions
from .plan import COMPUTE, PlanFacts, PSPlan, Task
from .registry import PredictKey, StrategySpec, register


@dataclass(frozen=True)
class PSFacts(PlanFacts):
    param_tensor_bytes: tuple[float, ...] = ()  # each fp32 parameter tensor: a message's buffers


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> PSPlan:
    if cluster.spec.ps_servers is None:
        raise SimdlError(
            f"strategy {config.name!r} needs a cluster with parameter-server nodes; "
            f"cluster {cluster.spec.name!r} has none (try --cluster a10g-ps)"
        )
    table = workload.table
    n = table.n_rows
    sizes = tuple(float(p.numel * 4) for p in table.params)  # fp32 parameter tensors
    # The pulled parameters arrive in freshly allocated receive buffers and are copied into
    # the model's own (validate/train.py: p.copy_(v) per tensor; a GPU worker copies them in
    # from the host). Read + write of every byte, one call per tensor; on host-memory
    # devices the receive buffers above the allocator's mmap threshold fault in.
    tasks_list = [
        Task("load_params", COMPUTE, "fwd", bytes=2.0 * workload.param_bytes, kernels=len(sizes), allocs=sizes),
        Task("forward", COMPUTE, "fwd", rows=(0, n), direction="fwd", deps=(0,)),
    ]

    def add(task: Task) -> int:
        tasks_list.append(task)
        return len(tasks_list) - 1

    pre = add_recompute(workload, add, (1,), 0, n)  # activation checkpointing, if on
    add(Task("backward", COMPUTE, "bwd", deps=pre, rows=(0, n), direction="bwd"))
    tasks = tuple(tasks_list)
    grads = workload.param_bytes  # fp32 gradients, one copy per push
    return PSPlan(
        strategy=config.name,
        family="ps",
        worker_tasks=tasks,
        workers=cluster.gpus,
        servers=config.ps_servers,
        push_bytes=grads,
        pull_bytes=workload.param_bytes,
        update_bytes=host_update_bytes(workload.optimizer, workload.param_bytes),
        synchronous=config.name == "ps-sync",
        staleness_bound=config.staleness_bound if config.name == "ps-ssp" else None,
        facts=PSFacts(comm_buffer_bytes=grads, param_tensor_bytes=sizes),
    )


def _evaluate(workload, cluster, plan, rows, rates):
    from ..costs.ps import ps_timing

    return ps_timing(workload, cluster, plan, rows, rates)


def _echo(config, plan) -> dict:
    out = {"ps_servers": config.ps_servers, "ps_placement": config.ps_placement}
    if plan.staleness_bound is not None:
        out["staleness_bound"] = config.staleness_bound
    return out


SPEC = register(
    StrategySpec(
        family="ps",
        names=("ps-sync", "ps-async", "ps-ssp"),
        options=PSOptions,
        build_plan=build_plan,
        memory_timeline=ps_worker_timeline,
        predict_keys={
            "ps_servers": PredictKey("ps_servers", default_reason="one server, as study 1 ran it"),
            "staleness_bound": PredictKey(
                "staleness_bound", names=("ps-ssp",), default_reason="assumed SSP bound of 3 iterations"
            ),
            # its reason, when not given, comes from the cluster (simdl.cluster.ps_placement.resolve_placement)
            "ps_placement": PredictKey("ps_placement"),
        },
        # Simplest first: a barrier, then bounded staleness, then none.
        labels={"ps-sync": ("ps-sync", {}), "ps-ssp": ("ps-ssp", {}), "ps-async": ("ps-async", {})},
        label=lambda config: f"ps-ssp(s={config.staleness_bound})" if config.name == "ps-ssp" else config.name,
        # Stale modes change what is trained (study 1 saw lower accuracy with asynchronous
        # updates), so recommend tries them only when the caller allows it.
        variants=lambda v: (("ps-sync",) + (("ps-ssp", "ps-async") if v.allow_stale else ())) if v.ps_servers else (),
        echo=_echo,
        stale=lambda name: name != "ps-sync",
        role="PS worker",
        client_server=True,
        evaluate=_evaluate,
    )
)
