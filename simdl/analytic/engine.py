"""The analytic engine: plan -> result in closed form, in well under a millisecond.

SPMD plans are evaluated with the stream recurrence of :mod:`simdl.costs.schedule`; a
strategy whose registry entry has an ``evaluate`` hook (the parameter server's closed
form, simdl.costs.ps) is evaluated by it instead.
"""

from __future__ import annotations

import math
from contextvars import ContextVar

from ..cluster import Cluster
from ..cluster.linkfree import LinkFreeMemo, link_free_key
from ..costs.ps import (  # noqa: F401
    async_staleness,
    ps_aggregate_bytes,
    ps_host_floor,
    ps_snapshot_time,
    ps_transfer_extras,
    ps_transfer_times,
    ps_update_time,
    shared_host_bound,
)
from ..costs.schedule import schedule, stream_busy, task_durations
from ..costs.step import bytes_sent, data_time, step_split  # noqa: F401 -- also read from here
from ..costs.tasks import CommCosts, Rates, blocking_wait_time, compute_split, device_rates, row_times, spmd_or_ps_rates
from ..memory.model import estimate_memory
from ..result import Result, Staleness
from ..strategies import registry
from ..strategies.plan import PSPlan, SpmdPlan
from ..workload.workload import Workload

#: When set to a list, :func:`evaluate` appends ``(workload, cluster, plan, rows, rates, algorithm,
#: loader_workers, config, notes)`` of each call in that context (thread, task): how
#: simdl.explore.vector learns a grid point's inputs from one ordinary prediction.
CAPTURE: ContextVar[list | None] = ContextVar("simdl_analytic_capture", default=None)


def evaluate(
    workload: Workload,
    cluster: Cluster,
    plan: SpmdPlan | PSPlan,
    *,
    algorithm: str = "auto",
    loader_workers: int = 4,
    config: dict | None = None,
    notes: tuple[str, ...] = (),
    allocator=None,
) -> Result:
    rates = spmd_or_ps_rates(device_rates(cluster, workload.precision, workload.memory_format), plan, workload.table)
    rows = row_times(workload.table, workload.batch_size, rates)
    sink = CAPTURE.get()
    if sink is not None:
        sink.append((workload, cluster, plan, rows, rates, algorithm, loader_workers, config, notes))
    hook = registry.of_plan(plan).evaluate
    if hook is not None:
        timing = hook(workload, cluster, plan, rows, rates)
    else:
        assert isinstance(plan, SpmdPlan), "a parameter-server plan brings its own evaluate hook"
        timing = _spmd_timing(workload, cluster, plan, rows, rates, algorithm)
    # Allocator options other than the defaults (simdl.memory.allocconf) change the estimate.
    memory = None if allocator is None else _memory(workload, plan, cluster, allocator)
    return result_of(
        workload, cluster, plan, timing, loader_workers=loader_workers, config=config, notes=notes, memory=memory
    )


def result_of(
    workload: Workload,
    cluster: Cluster,
    plan: SpmdPlan | PSPlan,
    timing: tuple,
    *,
    loader_workers: int = 4,
    config: dict | None = None,
    notes: tuple[str, ...] = (),
    memory=None,
) -> Result:
    """The Result of a plan whose step timing is known: ``timing`` is (iteration, compute-stream
    busy, communication busy, any-kernel busy, bytes sent, staleness, compute split by kind,
    added seconds) as :func:`_spmd_timing` and the strategies' ``evaluate`` hooks give it.
    ``memory``: the rank's memory estimate where the caller has it (:func:`memory_of` of a
    cluster that differs from this one only in links)."""
    iteration, compute, comm, any_busy, comm_bytes, staleness, kinds, added = timing
    # Communication the compute stream waited for (measured before any loader stall).
    exposed = max(iteration - compute, 0.0) if comm > 0 else 0.0
    # The loader prefetches in parallel with the GPU; it stalls the step only when slower.
    loader = data_time(workload, cluster, loader_workers) * workload.grad_accumulation
    stall = 0.0
    if loader > iteration:
        notes = notes + (f"input pipeline bound: the loader needs {loader:.4g} s per step",)
        stall = loader - iteration
        iteration = loader
    split = step_split(kinds, compute, iteration, input_stall=stall, **added)
    samples_per_iteration = workload.batch_size * workload.grad_accumulation * plan.data_parallel
    iterations = math.ceil(workload.train_samples / samples_per_iteration)
    epoch = iterations * iteration
    mem = memory if memory is not None else _memory(workload, plan, cluster)
    return Result(
        engine="analytic",
        iteration_time_s=iteration,
        epoch_time_s=epoch,
        total_time_s=epoch * workload.epochs,
        throughput_samples_per_s=samples_per_iteration / iteration if iteration > 0 else 0.0,
        iterations_per_epoch=iterations,
        peak_memory_bytes=mem.peak_bytes,
        peak_tensor_bytes=mem.peak_tensor_bytes,
        memory_breakdown_bytes=dict(mem.breakdown),  # a memoised estimate's dict is not shared
        memory_capacity_bytes=mem.capacity_bytes,
        fits_in_memory=mem.fits,
        gpu_utilization=min(compute / iteration, 1.0) if iteration > 0 else 0.0,
        gpu_utilization_any_kernel=min(any_busy / iteration, 1.0) if iteration > 0 else 0.0,
        compute_time_s=compute,
        comm_time_s=comm,
        exposed_comm_time_s=exposed,
        comm_bytes_per_iteration=comm_bytes,
        staleness=staleness,
        step_split_s=split,
        config=config or {},
        notes=notes + getattr(plan, "notes", ()) + mem.notes,
        max_memory_allocated_bytes=mem.max_allocated_bytes,
        max_memory_reserved_bytes=mem.max_reserved_bytes,
        device_memory_bytes=mem.device_parts,
    )


def _estimate(workload: Workload, plan, cluster: Cluster, allocator=None):
    return estimate_memory(workload, plan, cluster, allocator=allocator)


_memo = LinkFreeMemo(_estimate)


def memory_of(workload: Workload, plan, cluster: Cluster, allocator=None):
    """The rank's memory estimate as :func:`evaluate` uses it (memoised, shared by clusters
    that differ only in links)."""
    return _memory(workload, plan, cluster, allocator)


def _memory(workload: Workload, plan, cluster: Cluster, allocator=None):
    """The rank's memory, shared by clusters that differ only in links (simdl.cluster.linkfree;
    ``estimate_memory`` ignores its ``act_factor``). The plan is keyed by identity and kept
    alive in the key, so its id cannot be reused; plans built for link-only variants are one
    object (simdl.strategies.build_plan)."""
    # The allocator options (a frozen AllocatorConfig, None: defaults) are part of the key.
    return _memo(
        (workload, id(plan), link_free_key(cluster), _Kept(plan), allocator), workload, plan, cluster, allocator
    )


class _Kept:
    """Holds an object in a key without taking part in its hash or equality."""

    __slots__ = ("obj",)

    def __init__(self, obj) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other) -> bool:
        return isinstance(other, _Kept)


def _spmd_timing(workload, cluster, plan: SpmdPlan, rows, rates: Rates, algorithm: str):
    comm_costs = CommCosts.for_plan(cluster, plan, algorithm)
    durations = task_durations(plan, rows, rates, comm_costs)
    sched = schedule(plan, durations)
    compute, comm, any_busy = stream_busy(plan, sched)
    makespan = sched.makespan
    interference = cluster.spec.efficiency.comm_compute_interference
    slowdown = 0.0
    if interference is not None and interference.value > 0.0:
        # Interference (a calibrated factor): the time compute and communication run side by side is not
        # free; the profile's factor says how many seconds each such second adds (on CPU,
        # gloo's threads take the cores the compute needs). Concurrent = compute + comm - union.
        concurrent = max(compute + comm - any_busy, 0.0)
        slowdown = interference.value * concurrent
    wait = blocking_wait_time(cluster, plan, compute)
    added = {"interference": slowdown, "blocking_wait": wait}
    kinds = compute_split(plan.tasks, rows, durations)
    return makespan + slowdown + wait, compute, comm, any_busy, bytes_sent(plan, cluster), Staleness(), kinds, added
