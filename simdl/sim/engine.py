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
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SimdlError
from ..result import Result
from ..strategies.plan import PSPlan, SpmdPlan
from .memcurves import MemoryCurve  # noqa: F401  (SimRun.memory's values)
from .options import SIM_OPTIONS
from .play import play
from .steady import link_window, run_notes, staleness_of, steady_state

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
        return [
            (self.link_names[i], float(self.link_utilization[i]), float(self.link_bytes_per_iteration[i]))
            for i in order
            if self.link_utilization[i] > 0
        ]


def simulate(
    workload,
    cluster,
    plan: SpmdPlan | PSPlan,
    *,
    algorithm: str = "auto",
    loader_workers: int = 4,
    config: dict | None = None,
    notes: tuple[str, ...] = (),
    iterations: int | None = None,
    warmup: int | None = None,
    straggler=None,
    jitter=None,
    seed: int = 0,
    free_comm: bool = False,
    contention: bool = True,
    return_run: bool = False,
    allocator=None,
    **unknown_options,
):
    """Simulate ``plan`` and return a :class:`Result` (or the :class:`SimRun` with ``return_run``)."""
    with _without_cyclic_gc():
        return _simulate(
            workload,
            cluster,
            plan,
            algorithm=algorithm,
            loader_workers=loader_workers,
            config=config,
            notes=notes,
            iterations=iterations,
            warmup=warmup,
            straggler=straggler,
            jitter=jitter,
            seed=seed,
            free_comm=free_comm,
            contention=contention,
            return_run=return_run,
            allocator=allocator,
            **unknown_options,
        )


def _simulate(
    workload,
    cluster,
    plan,
    *,
    algorithm,
    loader_workers,
    config,
    notes,
    iterations,
    warmup,
    straggler,
    jitter,
    seed,
    free_comm,
    contention,
    return_run,
    allocator=None,
    **unknown_options,
):
    """One run in phases: settings, the timeline played (simdl.sim.play), its steady state
    measured (simdl.sim.steady), the memory model's figures, the result."""
    iterations, warmup = _iteration_settings(plan, iterations, warmup, unknown_options)
    hetero = _heterogeneity(cluster, plan, straggler, jitter, seed)
    played = play(
        workload,
        cluster,
        plan,
        hetero,
        algorithm=algorithm,
        loader_workers=loader_workers,
        iterations=iterations,
        free_comm=free_comm,
        contention=contention,
    )
    steady = steady_state(played, plan, cluster, warmup, iterations, notes)
    link_bytes, link_util = link_window(played, warmup, iterations - warmup)
    # Memory: the allocation events of simdl.memory's timeline. The caching allocator sees
    # them in program order (memory is allocated when the CPU issues an op, not when the
    # device runs it), so the peak is the timeline's peak whatever the timing; the simulated
    # task times place the events in time for the memory-over-time curve.
    from ..memory.model import estimate_memory

    est = estimate_memory(workload, plan, cluster, allocator=allocator)
    staleness, hist = staleness_of(plan, played.run, warmup)
    notes = run_notes(steady, played, hetero, iterations, warmup)
    cfg = _echo_config(config, iterations, warmup, seed, hetero)
    result = _result(workload, cluster, plan, played, steady, est, staleness, notes, cfg)
    if not return_run:
        return result
    from ..memory.model import timeline_for
    from .memcurves import memory_curves

    tasks = plan.worker_tasks if isinstance(plan, PSPlan) else plan.tasks
    # Every rank holds the memory model's peak (the allocator sees program order, whatever
    # the timing); the curves in time are only for the SimRun (simdl plot --memory).
    peak_by_rank = {r: est.peak_tensor_bytes for members in played.classes for r in members}
    mem = memory_curves(timeline_for(workload, plan, cluster), tasks, steady.by_class, iterations - 1, played.rows)
    router, net = played.router, played.net
    return SimRun(
        result=result,
        plan=plan,
        cluster=cluster,
        records=played.run.records,
        classes=played.classes,
        window=(steady.t_start, steady.t_end),
        link_names=router.names,
        link_kinds=router.kinds,
        link_capacity=router.capacity,
        link_bytes_per_iteration=link_bytes,
        link_utilization=link_util,
        network=net,
        peak_memory_by_rank=peak_by_rank,
        memory=mem,
        staleness_histogram=hist,
        recomputes=net.recomputes,
    )


def _iteration_settings(plan, iterations: int | None, warmup: int | None, unknown_options: dict) -> tuple[int, int]:
    """(iterations, warmup), checked; asynchronous PS modes default to more of both."""
    if unknown_options:
        raise SimdlError(
            f"unknown simulator option(s) {', '.join(sorted(unknown_options))}; accepted: " + ", ".join(SIM_OPTIONS)
        )
    async_ps = isinstance(plan, PSPlan) and not plan.synchronous
    if iterations is None:
        iterations = DEFAULT_ITERATIONS_ASYNC if async_ps else DEFAULT_ITERATIONS
    if warmup is None:
        warmup = min(DEFAULT_WARMUP_ASYNC if async_ps else DEFAULT_WARMUP, iterations - 1)
    for name, v, lo in (("iterations", iterations, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise SimdlError(f"--{name} {v!r} must be an integer >= {lo}")
    if warmup >= iterations:
        raise SimdlError(f"--warmup {warmup} must be less than --iterations {iterations}")
    return iterations, warmup


def _heterogeneity(cluster, plan, straggler, jitter, seed: int):
    """The ranks' speed factors and jitter (simdl.sim.stragglers); a PS run without a jitter
    given draws the profile's measured compute jitter."""
    from .stragglers import build as build_hetero

    cj = cluster.spec.efficiency.compute_jitter
    default = None
    if isinstance(plan, PSPlan) and cj is not None and cj.value > 0:
        default = (cj.value, f"the profile's efficiency.compute_jitter ({cj.kind}: {cj.source})")
    hetero = build_hetero(straggler, jitter, seed, default=default)
    hetero.check_ranks(plan.world_size)
    return hetero


def _echo_config(config: dict | None, iterations: int, warmup: int, seed: int, hetero) -> dict:
    """The caller's config with the simulator's settings."""
    cfg = dict(config or {})
    cfg.update(sim_iterations=iterations, sim_warmup=warmup, seed=seed)
    if hetero.factors:
        cfg["straggler"] = [f"rank={r},factor={f:g}" for r, f in hetero.factors]
    if hetero.jittered:
        cfg["jitter"] = f"{hetero.jitter}:{hetero.jitter_param:g}" + (" per step (profile)" if hetero.per_step else "")
    return cfg


def _result(workload, cluster, plan, played, steady, est, staleness, notes: tuple[str, ...], cfg: dict) -> Result:
    """The Result both engines return, from the steady state and the memory model."""
    from ..costs.step import bytes_sent, step_split
    from ..costs.tasks import compute_split

    is_ps = isinstance(plan, PSPlan)
    iteration, compute, any_busy = steady.iteration, steady.compute, steady.any_busy
    samples_per_iteration = workload.batch_size * workload.grad_accumulation * plan.data_parallel
    iters = math.ceil(workload.train_samples / samples_per_iteration)
    epoch = iters * iteration
    tasks = plan.worker_tasks if is_ps else plan.tasks
    return Result(
        engine="sim",
        iteration_time_s=iteration,
        epoch_time_s=epoch,
        total_time_s=epoch * workload.epochs,
        throughput_samples_per_s=samples_per_iteration / iteration if iteration > 0 else 0.0,
        iterations_per_epoch=iters,
        peak_memory_bytes=est.peak_tensor_bytes + (est.peak_bytes - est.peak_tensor_bytes),
        peak_tensor_bytes=est.peak_tensor_bytes,
        memory_breakdown_bytes=dict(est.breakdown),
        memory_capacity_bytes=cluster.spec.gpu.memory_bytes.value,  # as the analytic model (memory.model) counts it
        fits_in_memory=est.fits,
        gpu_utilization=min(compute / iteration, 1.0) if iteration > 0 else 0.0,
        gpu_utilization_any_kernel=min(any_busy / iteration, 1.0) if iteration > 0 else 0.0,
        compute_time_s=compute,
        comm_time_s=steady.comm_busy,
        exposed_comm_time_s=max(iteration - compute, 0.0) if is_ps else max(any_busy - compute, 0.0),
        # Payload bytes, as the analytic engine reports them. The links carry more where a call is
        # priced below the bus bandwidth (simdl.sim.collectives: bytes scaled to keep its time);
        # link_bytes_per_iteration keeps that traffic.
        comm_bytes_per_iteration=bytes_sent(plan, cluster),
        staleness=staleness,
        step_split_s=step_split(
            compute_split(tasks, played.rows, played.durations), compute, iteration, **steady.added
        ),
        config=cfg,
        notes=notes + tuple(getattr(plan, "notes", ())) + est.notes,
        max_memory_allocated_bytes=est.max_allocated_bytes,
        max_memory_reserved_bytes=est.max_reserved_bytes,
        device_memory_bytes=est.device_parts,
    )


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
