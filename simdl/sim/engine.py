"""The simulator: play a plan on a SimPy timeline over the topology, return a Result.

``simulate(workload, cluster, plan, ...)`` is the simulated twin of
:func:`simdl.analytic.engine.evaluate`: same inputs, same :class:`~simdl.result.Result`
(``engine="sim"``), every field computed from the timeline:

* iteration time in steady state: ``iterations`` are played, the first ``warmup`` are
  excluded (the data loader's first batch, empty queues), the rest averaged;
* utilisation two ways (compute-stream busy / any kernel busy), communication busy time and
  its exposed (not overlapped by compute) part, from the union of task intervals;
* peak memory from allocation events (:mod:`simdl.memory.timeline`, placed at simulated times);
* bytes each GPU sends (payload leaving its GPU links) and, in :class:`SimRun`, per-link
  bytes and utilisation, per-rank peaks, the staleness histogram and the event list.

Cost: linear in ranks x tasks. Rank classes are resolved by arithmetic
(:mod:`simdl.sim.ranks`: O(classes x tasks x iterations)), the timeline holds one event per
collective instance and flow change (:mod:`simdl.sim.network`: each recomputation is
linear in the (flow, link) pairs of the components it touches), the records are grouped
by class in one pass, and building the flows of a collective is linear in its ranks.
At 16,384 heterogeneous ranks a ResNet-50 DDP step on dgx-a100 takes about 10 CPU
seconds and under 1 GiB (``benchmarks/bench_scale.py``).

``simulate(..., return_run=True)`` returns the :class:`SimRun` (its ``.result`` is the Result);
``simdl trace`` and ``simdl plot`` use it.

Engine options (``predict(..., engine="sim", **options)``): ``iterations``, ``warmup``,
``straggler`` (``"rank=0,factor=1.5"`` or a list), ``jitter`` (``"lognormal:0.1"``), ``seed``,
``free_comm`` (links of infinite bandwidth and zero latency: a what-if and a test hook),
``contention`` (default True; False runs every flow at the rate it would get alone -- the
analytic model's assumption -- to isolate what link sharing costs).
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy

from ..errors import SimdlError
from ..result import Result, Staleness
from ..strategies.plan import COMPUTE, PSPlan, SpmdPlan
from .memcurves import MemoryCurve  # noqa: F401  (SimRun.memory's values)

DEFAULT_ITERATIONS = 3
DEFAULT_WARMUP = 1
# Asynchronous PS modes need more iterations for the workers to settle into their rotation,
# and for the mean staleness to average over the drawn step-to-step spread (about 60 ms for
# the exp2 models on cpu-local-x4).
DEFAULT_ITERATIONS_ASYNC = 40
DEFAULT_WARMUP_ASYNC = 8


@dataclass
class SimRun:
    """Everything the timeline shows; ``result`` is the Result both engines return."""

    result: Result
    plan: Any
    cluster: Any
    records: list  # TaskRecord (class/worker, iteration, task, start, end, stream, name, phase, is_comm)
    classes: list[tuple[int, ...]]  # rank sets one record stream stands for
    window: tuple[float, float]  # steady-state window (s)
    link_names: list[str]
    link_kinds: list[str]
    link_capacity: np.ndarray
    link_bytes_per_iteration: np.ndarray
    link_utilization: np.ndarray  # mean fraction of capacity used over the window
    network: Any  # the Network; ``link_segments`` rebuilds per-link busy intervals from it
    peak_memory_by_rank: dict[int, float]  # tensor peak per rank
    memory: dict[int, Any]  # class -> MemoryCurve
    staleness_histogram: dict[int, int] = field(default_factory=dict)
    recomputes: int = 0

    @property
    def link_segments(self) -> dict[int, list]:
        """link -> [[start, end, utilisation], ...] over the whole run."""
        return self.network.segments

    def busiest_links(self, k: int = 10) -> list[tuple[str, float, float]]:
        order = np.argsort(-self.link_utilization, kind="stable")[:k]
        return [(self.link_names[i], float(self.link_utilization[i]), float(self.link_bytes_per_iteration[i]))
                for i in order if self.link_utilization[i] > 0]


def simulate(workload, cluster, plan: SpmdPlan | PSPlan, *, algorithm: str = "auto", loader_workers: int = 4,
             config: dict | None = None, notes: tuple[str, ...] = (), iterations: int | None = None,
             warmup: int | None = None, straggler=None, jitter=None, seed: int = 0, free_comm: bool = False,
             contention: bool = True, return_run: bool = False, **unknown_options):
    """Simulate ``plan`` and return a :class:`Result` (or the :class:`SimRun` with ``return_run``)."""
    with _without_cyclic_gc():
        return _simulate(workload, cluster, plan, algorithm=algorithm, loader_workers=loader_workers, config=config,
                         notes=notes, iterations=iterations, warmup=warmup, straggler=straggler, jitter=jitter,
                         seed=seed, free_comm=free_comm, contention=contention, return_run=return_run,
                         **unknown_options)


def _simulate(workload, cluster, plan, *, algorithm, loader_workers, config, notes, iterations, warmup, straggler,
              jitter, seed, free_comm, contention, return_run, **unknown_options):
    if unknown_options:
        raise SimdlError(f"unknown simulator option(s) {', '.join(sorted(unknown_options))}; accepted: "
                         "iterations, warmup, straggler, jitter, seed, free_comm, contention")
    from ..costs.step import step_split
    from ..costs.tasks import (CommCosts, blocking_wait_time, compute_split, device_rates, row_times,
                               spmd_or_ps_rates)
    from ..cluster.topology import build_topology
    from .collectives import Collectives, Router
    from .network import Network
    from .stragglers import build as build_hetero

    is_ps = isinstance(plan, PSPlan)
    async_ps = is_ps and not plan.synchronous
    if iterations is None:
        iterations = DEFAULT_ITERATIONS_ASYNC if async_ps else DEFAULT_ITERATIONS
    if warmup is None:
        warmup = min(DEFAULT_WARMUP_ASYNC if async_ps else DEFAULT_WARMUP, iterations - 1)
    for name, v, lo in (("iterations", iterations, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise SimdlError(f"--{name} {v!r} must be an integer >= {lo}")
    if warmup >= iterations:
        raise SimdlError(f"--warmup {warmup} must be less than --iterations {iterations}")
    cj = cluster.spec.efficiency.compute_jitter
    default = None
    if is_ps and cj is not None and cj.value > 0:
        default = (cj.value, f"the profile's efficiency.compute_jitter ({cj.kind}: {cj.source})")
    hetero = build_hetero(straggler, jitter, seed, default=default)
    hetero.check_ranks(plan.world_size)

    rates = spmd_or_ps_rates(device_rates(cluster, workload.precision), plan, workload.table)
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

    if is_ps:
        from functools import lru_cache

        from ..costs.ps import ps_snapshot_time, ps_update_time
        from ..hosts import host_for
        from .ps import run_ps

        durations = [_compute_time(t, rows, rates) for t in plan.worker_tasks]
        # One value per aggregation count, asked for at every applied update.
        update_time = lru_cache(maxsize=None)(lambda k: ps_update_time(cluster, plan, k))
        cores = None
        if host_for(cluster).shares_cores() and cluster.nodes == 1:
            # The workers and the server are processes of one host and share its cores
            # (simdl.sim.cores).
            from .cores import SharedCores

            k = int(cluster.spec.host.cpu_cores.value)
            cores = SharedCores(env, k, min(1.0, k / plan.workers))
        run = run_ps(env, net, router, plan, cluster, durations, hetero, iterations, loader_workers,
                     batch_time, update_time, free_comm, on_iteration_end, ps_snapshot_time(cluster, plan),
                     cores=cores)
        classes = [(w,) for w in range(plan.workers)]
        ends = run.iteration_end
    else:
        from ..costs.schedule import task_durations
        from .ranks import CollectiveHub, run_spmd

        durations = task_durations(plan, rows, rates, comm)
        classes = hetero.classes(plan.world_size)
        colls = Collectives(router, cluster, comm, algorithm)
        hub = CollectiveHub(env, net, colls, plan, classes, free_comm)
        run = run_spmd(env, plan, durations, hub, classes, hetero, iterations, loader_workers, batch_time,
                       on_iteration_end)
        ends = run.iteration_end
    env.run()
    if not is_ps:
        run.close()
    for c, e in enumerate(ends):
        if len(e) != iterations:
            raise SimdlError(f"simulation deadlocked: rank class {c} finished {len(e)} of {iterations} iterations")

    measured = iterations - warmup
    t_start = max(e[warmup - 1] for e in ends) if warmup > 0 else 0.0
    t_end = max(e[-1] for e in ends)
    # Per class: own steady-state window, busy times per iteration.
    weights = [len(c) for c in classes]
    comp, commb, anyb, periods = [], [], [], []
    by_class = _records_by_class(run.records, len(classes))
    busy = [_class_busy(by_class[c], e, warmup, measured, is_ps, run, c) for c, e in enumerate(ends)]
    for c, e in enumerate(ends):
        w0 = e[warmup - 1] if warmup > 0 else 0.0
        periods.append((e[-1] - w0) / measured)
    comp, commb, anyb = (list(x) for x in zip(*busy))
    wsum = sum(weights)

    def mean(xs):
        return sum(x * k for x, k in zip(xs, weights)) / wsum

    iteration = mean(periods) if is_ps else (t_end - t_start) / measured
    if is_ps:
        # Workers and server on one host's cores (cpu-local: validate runs them as processes
        # of one machine): the timeline shares the cores between the computes and the
        # server's work (simdl.sim.cores) but leaves out the CPU the transfers take, so the
        # step is floored at the cores' operational bound, as the analytic engine's
        # (simdl.costs.ps.ps_host_floor). Without it VGG16 async on cpu-xeon-emr-x4
        # is predicted 3.45 s against 4.09 s measured (-16 %, lab/records/xeon-emr-x4.jsonl.xz).
        from ..costs.ps import ps_host_floor

        host_floor = ps_host_floor(cluster, plan, sum(durations))
        if host_floor > iteration:
            notes = tuple(notes) + (
                f"shared host: the workers' and the server's CPU on {cluster.spec.host.cpu_cores.value:g} cores "
                f"floor the step at {host_floor:.4g} s (the timeline's {iteration:.4g} s leaves out the CPU "
                f"the transfers take; its staleness is the timeline's)",)
            iteration = host_floor
    compute, comm_busy, any_busy = mean(comp), mean(commb), mean(anyb)
    interference = cluster.spec.efficiency.comm_compute_interference
    added = {}
    if not is_ps and interference is not None and interference.value > 0.0:
        # The profile's fitted compute/communication interference (simdl calibrate; on CPU gloo's
        # threads take the cores the compute needs): the links model no core contention, so
        # the same correction as the analytic engine's is applied to the simulated overlap.
        added["interference"] = interference.value * max(compute + comm_busy - any_busy, 0.0)
    if not is_ps:
        # Blocking collectives wait for peers still computing (the analytic engine's term).
        added["blocking_wait"] = blocking_wait_time(cluster, plan, compute)
    iteration += sum(added.values())

    # Links over the steady-state window.
    s0, s1 = snapshots[warmup - 1] if warmup > 0 else None, snapshots[-1]
    bytes_w = s1.bytes - (s0.bytes if s0 else 0.0)
    load_w = s1.load_s - (s0.load_s if s0 else 0.0)
    span = (ends[0][-1] - (ends[0][warmup - 1] if warmup > 0 else 0.0)) or 1.0
    link_bytes = bytes_w / measured
    link_util = load_w / span
    # Payload bytes, as the analytic engine reports them. The links carry more where a call is
    # priced below the bus bandwidth (simdl.sim.collectives: bytes scaled to keep its time);
    # link_bytes_per_iteration keeps that traffic.
    from ..costs.step import bytes_sent

    sent_per_gpu = bytes_sent(plan, cluster)

    # Memory: the allocation events of simdl.memory's timeline. The caching allocator sees
    # them in program order (memory is allocated when the CPU issues an op, not when the
    # device runs it), so the peak is the timeline's peak whatever the timing; the simulated
    # task times place the events in time for the memory-over-time curve.
    from ..memory.model import estimate_memory, timeline_for
    from .memcurves import memory_curves

    est = estimate_memory(workload, plan, cluster)
    tasks = plan.worker_tasks if is_ps else plan.tasks
    # Every rank holds the memory model's peak (the allocator sees program order, whatever
    # the timing); the curves in time are only for the SimRun (simdl plot --memory).
    peak_by_rank = {r: est.peak_tensor_bytes for members in classes for r in members}
    mem = (memory_curves(timeline_for(workload, plan, cluster), tasks, by_class, iterations - 1, rows)
           if return_run else {})
    peak_tensor = est.peak_tensor_bytes
    breakdown = dict(est.breakdown)
    other = est.peak_bytes - est.peak_tensor_bytes
    capacity = cluster.spec.gpu.memory_bytes.value  # as the analytic model (memory.model) counts it

    # Staleness.
    hist: dict[int, int] = {}
    staleness = Staleness()
    if is_ps and not plan.synchronous:
        samples = [s for s, it in zip(run.staleness, run.staleness_it) if it >= warmup] or run.staleness
        if samples:
            arr = np.array(samples, dtype=float)
            hist = dict(sorted(Counter(int(x) for x in samples).items()))
            staleness = Staleness(mean=float(arr.mean()), p50=float(np.percentile(arr, 50)),
                                  p99=float(np.percentile(arr, 99)), max=float(arr.max()))
            pulls = [d for *_, d in run.pulls]  # every pull, as validate/train.py counts them
            if pulls:
                staleness = replace(staleness, held_pulls=sum(d > 0 for d in pulls) / len(pulls),
                                    held_wait_s=float(np.mean(pulls)))

    notes = tuple(notes)
    waited = [_busy(iv, t_start, t_end) / measured for iv in run.data_wait]
    if max(waited, default=0.0) > 1e-3 * iteration:
        notes += (f"input pipeline bound: compute waited up to {max(waited):.4g} s per iteration for data",)
    if hetero.factors or hetero.jittered:
        notes += (f"heterogeneity: {len(hetero.factors)} straggler rank(s), jitter {hetero.jitter}"
                  f"{':' + format(hetero.jitter_param, 'g') if hetero.jittered else ''}"
                  f"{' per worker and step' if hetero.per_step else ''}, seed {hetero.seed}"
                  + (f"; from {hetero.source}" if hetero.source else ""),)
    notes += (f"simulated {iterations} iterations ({warmup} warm-up); {len(classes)} rank class(es)",)
    samples_per_iteration = workload.batch_size * workload.grad_accumulation * plan.data_parallel
    iters = math.ceil(workload.train_samples / samples_per_iteration)
    epoch = iters * iteration
    cfg = dict(config or {})
    cfg.update(sim_iterations=iterations, sim_warmup=warmup, seed=seed)
    if hetero.factors:
        cfg["straggler"] = [f"rank={r},factor={f:g}" for r, f in hetero.factors]
    if hetero.jittered:
        cfg["jitter"] = f"{hetero.jitter}:{hetero.jitter_param:g}" + (" per step (profile)" if hetero.per_step else "")
    result = Result(
        engine="sim",
        iteration_time_s=iteration,
        epoch_time_s=epoch,
        total_time_s=epoch * workload.epochs,
        throughput_samples_per_s=samples_per_iteration / iteration if iteration > 0 else 0.0,
        iterations_per_epoch=iters,
        peak_memory_bytes=peak_tensor + other,
        peak_tensor_bytes=peak_tensor,
        memory_breakdown_bytes=breakdown,
        memory_capacity_bytes=capacity,
        fits_in_memory=est.fits,
        gpu_utilization=min(compute / iteration, 1.0) if iteration > 0 else 0.0,
        gpu_utilization_any_kernel=min(any_busy / iteration, 1.0) if iteration > 0 else 0.0,
        compute_time_s=compute,
        comm_time_s=comm_busy,
        exposed_comm_time_s=max(iteration - compute, 0.0) if is_ps else max(any_busy - compute, 0.0),
        comm_bytes_per_iteration=sent_per_gpu,
        staleness=staleness,
        step_split_s=step_split(compute_split(plan.worker_tasks if is_ps else plan.tasks, rows, durations), compute,
                                iteration, **added),
        config=cfg,
        notes=notes + tuple(getattr(plan, "notes", ())) + est.notes,
        max_memory_allocated_bytes=est.max_allocated_bytes,
        max_memory_reserved_bytes=est.max_reserved_bytes,
        device_memory_bytes=est.device_parts,
    )
    if not return_run:
        return result
    return SimRun(result=result, plan=plan, cluster=cluster, records=run.records, classes=classes,
                  window=(t_start, t_end), link_names=router.names, link_kinds=router.kinds,
                  link_capacity=router.capacity, link_bytes_per_iteration=link_bytes,
                  link_utilization=link_util, network=net,
                  peak_memory_by_rank=peak_by_rank, memory=mem, staleness_histogram=hist,
                  recomputes=net.recomputes)


@contextmanager
def _without_cyclic_gc():
    """Pause Python's cyclic garbage collector for a run: at 16,384 ranks the topology graph,
    the routes and the records are millions of objects, and every full collection walks all
    of them again (a third of the run's time, growing faster than the ranks). The records
    hold no cycles; what cycles SimPy leaves are collected after the run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _class_busy(recs, ends, warmup: int, measured: int, is_ps: bool, run, c: int) -> tuple[float, float, float]:
    """Compute-stream, communication and any-kernel busy seconds per iteration of one class
    over its steady-state window."""
    w0 = ends[warmup - 1] if warmup > 0 else 0.0
    w1 = ends[-1]
    comp_iv = [(r.start, r.end) for r in recs if not r.is_comm and r.stream == COMPUTE]
    comm_iv = [(r.start, r.end) for r in recs if r.is_comm]
    if is_ps:
        comm_iv = [(s, t) for (w, _, s, t, _) in run.transfers if w == c]
    return (_busy(comp_iv, w0, w1) / measured, _busy(comm_iv, w0, w1) / measured,
            _busy(comp_iv + ([] if is_ps else comm_iv), w0, w1) / measured)


def _records_by_class(records, n: int) -> list[list]:
    """The records of each class/worker, in one pass."""
    out: list[list] = [[] for _ in range(n)]
    for r in records:
        out[r.cls].append(r)
    return out


def _compute_time(task, rows, rates) -> float:
    from ..costs.tasks import compute_task_time

    return compute_task_time(task, rows, rates)


def _busy(intervals, lo: float, hi: float) -> float:
    from ..costs.schedule import busy_time

    clipped = [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]
    return busy_time(clipped)
