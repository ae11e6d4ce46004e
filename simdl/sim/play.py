"""Play a plan on a SimPy timeline: the costs, the topology and network, the rank or worker
processes, run to the end. What the timeline recorded is measured by :mod:`simdl.sim.steady`.

The SPMD ranks are resolved by rank class (:mod:`simdl.sim.ranks`), the parameter server's
workers and shards are processes (:mod:`simdl.sim.ps`); both share the network
(:mod:`simdl.sim.network`) and the router over the cluster's topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import simpy

from ..errors import SimdlError
from ..strategies.plan import PSPlan


@dataclass
class Played:
    """A finished timeline: its run (records, iteration ends), the rank classes (one per PS
    worker), the compute durations per task, the costs the durations came from, the router,
    the network and its link statistics at each iteration end of the first class."""

    run: Any  # simdl.sim.ranks.SpmdRun or simdl.sim.ps.PSRun
    classes: list[tuple[int, ...]]
    durations: list[float]
    rows: Any
    router: Any
    net: Any
    snapshots: list

    @property
    def ends(self) -> list[list[float]]:
        """Per class/worker, the end of each iteration."""
        return self.run.iteration_end


def play(
    workload,
    cluster,
    plan,
    hetero,
    *,
    algorithm: str,
    loader_workers: int,
    iterations: int,
    free_comm: bool,
    contention: bool,
) -> Played:
    """Build the timeline of ``iterations`` iterations of ``plan`` and run it to the end."""
    from ..cluster.topology import build_topology
    from ..costs.comm import CommCosts
    from ..costs.rates import device_rates
    from ..costs.tasks import row_times, spmd_or_ps_rates
    from .collectives import Router
    from .network import Network

    rates = spmd_or_ps_rates(device_rates(cluster, workload.precision, workload.memory_format), plan, workload.table)
    rows = row_times(workload.table, workload.batch_size, rates)
    comm = CommCosts.for_plan(cluster, plan, algorithm)
    graph = build_topology(cluster)
    router = Router(graph, cluster)
    env = simpy.Environment()
    net = Network(env, router.capacity, router.names, contention=contention)
    per_sample = cluster.spec.host.dataloader_sample.value
    batch_time = workload.batch_size * per_sample
    snapshots: list = []

    def on_iteration_end(c: int) -> None:
        if c == 0:  # link statistics at every iteration end of the first class/worker
            snapshots.append(net.stats())

    is_ps = isinstance(plan, PSPlan)
    start = _start_ps if is_ps else _start_spmd
    run, classes, durations = start(
        env,
        net,
        router,
        plan,
        cluster,
        hetero,
        rows,
        rates,
        comm,
        algorithm,
        iterations,
        loader_workers,
        batch_time,
        free_comm,
        on_iteration_end,
    )
    env.run()
    if not is_ps:
        run.close()
    for c, e in enumerate(run.iteration_end):
        if len(e) != iterations:
            raise SimdlError(f"simulation deadlocked: rank class {c} finished {len(e)} of {iterations} iterations")
    return Played(run=run, classes=classes, durations=durations, rows=rows, router=router, net=net, snapshots=snapshots)


def _start_ps(
    env,
    net,
    router,
    plan,
    cluster,
    hetero,
    rows,
    rates,
    comm,
    algorithm: str,
    iterations: int,
    loader_workers: int,
    batch_time: float,
    free_comm: bool,
    on_iteration_end: Callable[[int], None],
):
    """The workers' and shards' processes (simdl.sim.ps), the server's costs from
    simdl.costs.ps; (run, one class per worker, compute durations)."""
    from functools import lru_cache

    from ..costs.ps import ps_snapshot_time, ps_update_time
    from ..costs.tasks import compute_task_time
    from ..hosts import host_for
    from .ps import run_ps

    durations = [compute_task_time(t, rows, rates) for t in plan.worker_tasks]
    # One value per aggregation count, asked for at every applied update.
    update_time = lru_cache(maxsize=None)(lambda k: ps_update_time(cluster, plan, k))
    cores = None
    if host_for(cluster).shares_cores() and cluster.nodes == 1:
        # The workers and the server are processes of one host and share its cores
        # (simdl.sim.cores).
        from .cores import SharedCores

        k = int(cluster.spec.host.cpu_cores.value)
        cores = SharedCores(env, k, min(1.0, k / plan.workers))
    run = run_ps(
        env,
        net,
        router,
        plan,
        cluster,
        durations,
        hetero,
        iterations,
        loader_workers,
        batch_time,
        update_time,
        free_comm,
        on_iteration_end,
        ps_snapshot_time(cluster, plan),
        cores=cores,
    )
    return run, [(w,) for w in range(plan.workers)], durations


def _start_spmd(
    env,
    net,
    router,
    plan,
    cluster,
    hetero,
    rows,
    rates,
    comm,
    algorithm: str,
    iterations: int,
    loader_workers: int,
    batch_time: float,
    free_comm: bool,
    on_iteration_end: Callable[[int], None],
):
    """The rank classes of an SPMD plan (simdl.sim.ranks) and their collectives; (run,
    classes, task durations from simdl.costs.schedule)."""
    from ..costs.schedule import task_durations
    from .collectives import Collectives
    from .ranks import CollectiveHub, run_spmd

    durations = task_durations(plan, rows, rates, comm)
    classes = hetero.classes(plan.world_size)
    colls = Collectives(router, cluster, comm, algorithm)
    hub = CollectiveHub(env, net, colls, plan, classes, free_comm)
    run = run_spmd(env, plan, durations, hub, classes, hetero, iterations, loader_workers, batch_time, on_iteration_end)
    return run, classes, durations
