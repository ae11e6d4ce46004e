"""What a validation run measures, and how (the measured side of every comparison).

* Step time: ``time.perf_counter`` around each training step (data fetch included, as
  simdl's step includes the loader), after ``warmup`` steps; the median and the spread
  (p10, p90) of the steady-state steps. On GPU the step ends with a synchronize.
* Peak memory per rank (allocator bytes): on CPU the PyTorch profiler with
  ``profile_memory=True`` records every allocation and free of the CPU allocator. The
  profiler is started *before* the model is built, so the live bytes of its allocation
  events are the live tensor bytes of the process (parameters, gradients, optimizer
  state, DDP buckets, FSDP buffers, activations, batches). Allocations are paired with
  their frees by address (:mod:`simdl.memory.measured`): under gloo some frees happen on
  a worker thread the profiler does not follow and are never reported, and a plain
  running sum of the events drifts upwards by those buffers, step after step. The peak
  is the maximum of the live bytes during each of ``MEMORY_STEPS`` consecutive
  steady-state steps; the largest is reported (the CPU analogue of
  ``torch.cuda.max_memory_allocated`` over those steps, which is what simdl's
  ``peak_tensor_bytes`` predicts) and the per-step peaks are kept, to show how steady it
  is. On CUDA, ``torch.cuda.max_memory_allocated`` is used directly.
* Compute busy fraction: the union of the intervals of ``aten::`` ops on the training
  thread during the profiled step, over the step's wall time (communication ops
  ``c10d::*`` / ``gloo:*`` and waits excluded): the CPU analogue of the compute stream's
  busy fraction that simdl predicts as ``gpu_utilization``.
* Page faults: the process's minor page faults (``ru_minflt``) during each step, in
  bytes (x the page size): memory the step touched for the first time since the C
  allocator got it from the kernel. On a CPU host, glibc maps large buffers fresh and
  trims freed memory at the top of its heap, so a step that allocates the same buffers
  again pays for faulting them in again (FSDP2's flat collective buffers; simdl prices
  faults above the mmap threshold, ``host.page_fault_ns_per_byte``). The median over the
  steady-state steps per rank; recorded as calibration's strategy stage does
  (calibration/strategies.py).
* Bytes communicated: every collective the backend ran in the profiled step (the
  profiler's ``gloo:*`` / ``nccl:*`` records, with tensor sizes; DDP's reducer and FSDP2
  both end there); the payload is the collective's full buffer, and the bytes each rank
  sends are derived from it with the ring factors of
  :func:`simdl.collectives.bus_bytes_factor` (named as derived in the report).
  Parameter-server bytes are the tensors each worker pushes and pulls, counted exactly.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

# The union of intervals, as the engines measure a stream's busy time.
from simdl.analytic.schedule import busy_time

# Where the profiled step's busy time went, by group: the groups calibration's strategy stage
# measures too.
from simdl.calibrate.step_groups import busy_groups, last_range, thread_spans

# One set of summary rules for each run and for the report's pooled repeats.
from simdl.report.metrics import percentile, staleness_summary, step_stats  # noqa: F401

DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
    "short int": 2,
}

# Backend op (the profiler's record of the work gloo / NCCL actually ran, with tensor
# shapes; the c10d:: dispatcher ops do not record TensorList shapes) -> (collective,
# how many times the recorded tensor the full buffer is: all_gather records the input shard,
# "world" = the size of the group it ran over, :func:`group_sizes`).
# gloo has no reduce-scatter of its own: c10d's gloo backend runs FSDP's
# reduce_scatter_tensor as an all_reduce of the full buffer (seen as gloo:all_reduce).
_COLLECTIVES = {
    "all_reduce": ("all_reduce", 1),
    "allreduce": ("all_reduce", 1),
    "all_gather": ("all_gather", "world"),
    "allgather": ("all_gather", "world"),
    "_allgather_base": ("all_gather", "world"),
    "reduce_scatter": ("reduce_scatter", 1),
    "broadcast": ("broadcast", 1),
}


def _backend_collective(name: str):
    for prefix in ("gloo:", "nccl:"):
        if name.startswith(prefix):
            return _COLLECTIVES.get(name[len(prefix) :])
    return None


# The c10d calls (on the training thread) that issue a backend collective, and how the size of
# the group they ran over follows from their recorded tensors: (output, input) numels for the
# flat all-gather and reduce-scatter; an all-reduce's TensorList records no shapes.
_C10D_GROUP = {
    "c10d::_allgather_base_": lambda out, inp: out // inp,
    "c10d::allgather_into_tensor_coalesced_": lambda out, inp: out // inp,
    "c10d::_reduce_scatter_base_": lambda out, inp: inp // out,
    "c10d::reduce_scatter_tensor_coalesced_": lambda out, inp: inp // out,
    "c10d::allreduce_": None,  # the world, or HSDP's replicate group (group_sizes)
    "c10d::broadcast_": None,  # DDP's buffer broadcast: the world
}


def group_sizes(calls: list[Any], backend: list[Any], world: int) -> list[int]:
    """The group size of each backend collective (``backend``, in start order).

    Each is paired with the c10d call that issued it (``calls``, in start order): on CPU,
    FSDP2's calls block until the collective is done, and DDP's run in issue order on its one
    process group, so the n-th backend collective belongs to the n-th call. An all-gather's or
    reduce-scatter's group follows from its tensors (the all-gather of a 2 x 2 HSDP mesh
    gathers 2 shards, not ``world``). An all-reduce records no shapes: it runs over the world,
    except beside reduce-scatters over a smaller shard group, where it is FSDP2's HSDP
    all-reduce over the replicate group, world / shard group ranks
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, foreach_reduce). Without a
    pairing (the counts differ) every collective is taken to span ``world``."""
    if len(calls) != len(backend):
        return [world] * len(backend)
    sizes: list[int | None] = []
    for c in calls:
        rule = _C10D_GROUP.get(c.name())
        shapes = c.shapes()
        if rule is None or len(shapes) < 2 or not shapes[0] or not shapes[1] or isinstance(shapes[0][0], list):
            sizes.append(None)
            continue
        n = rule(_numel(shapes[0]), max(_numel(shapes[1]), 1))
        sizes.append(n if 1 <= n <= world else None)
    shard = [n for c, n in zip(calls, sizes) if n is not None and "reduce_scatter" in c.name()]
    rest = world // min(shard) if shard and min(shard) < world else world
    return [n if n is not None else rest if c.name() == "c10d::allreduce_" else world for c, n in zip(calls, sizes)]


MEASURED_STEP = "validate::measured_step"
# Further steady-state steps profiled for their memory peak only (not timed).
MEMORY_STEP = "validate::memory_step"
MEMORY_STEPS = 3


class StepTimer:
    """Wall time and minor page faults (bytes) of each step; ``sync`` is called before
    reading the clock (CUDA)."""

    def __init__(self, sync=None) -> None:
        self.times: list[float] = []
        self.fault_bytes: list[float] = []
        self._sync = sync or (lambda: None)
        self._t0 = 0.0
        self._f0 = 0

    def start(self) -> None:
        self._sync()
        self._f0 = minor_faults()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self._sync()
        dt = time.perf_counter() - self._t0
        self.times.append(dt)
        self.fault_bytes.append(float((minor_faults() - self._f0) * PAGE_BYTES))
        return dt


def minor_faults() -> int:
    """Minor page faults of this process so far (``ru_minflt``; Linux counts one per page
    touched for the first time, 0 where the platform does not count them)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def _page_bytes() -> int:
    import resource

    return resource.getpagesize()


PAGE_BYTES = _page_bytes()


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _tensor_bytes(shape: Any, dtype: str) -> float:
    if not isinstance(shape, (list, tuple)) or not shape:
        return 0.0
    if isinstance(shape[0], (list, tuple)):  # a list of tensors
        return sum(_tensor_bytes(s, dtype) for s in shape)
    return float(_numel(shape) * DTYPE_BYTES.get(dtype, 4))


def analyse_profile(
    kineto_events: list[Any], world: int, allocs: list[Any] | None = None, timeline_points: int = 400
) -> dict[str, Any]:
    """Peak allocator bytes, busy fraction, collective bytes and a memory timeline of the
    profiled step (marked by a ``validate::measured_step`` record_function; further
    ``validate::memory_step`` ranges count for the memory peak only).

    ``allocs``: the profile's allocations paired with their frees
    (:func:`simdl.memory.measured.allocations`); without them no memory is reported.
    """
    from simdl.collectives import bus_bytes_factor
    from simdl.memory.measured import live_curve, peak_between

    events = list(kineto_events)
    t0, t1, main_thread = last_range(events, MEASURED_STEP)

    # Live bytes: allocations paired with their frees, since the profiler started (before
    # the model was built).
    mem_t, live = live_curve(allocs or [])
    at_start, peak = peak_between(mem_t, live, t0, t1)
    steps = [peak] + [
        peak_between(mem_t, live, e.start_ns(), e.start_ns() + e.duration_ns())[1]
        for e in sorted((e for e in events if e.name() == MEMORY_STEP), key=lambda e: e.start_ns())
    ]
    k0, k1 = np.searchsorted(mem_t, t0, side="left"), np.searchsorted(mem_t, t1, side="right")
    curve = [(0.0, at_start)] + [((t - t0) / 1e9, float(b)) for t, b in zip(mem_t[k0:k1], live[k0:k1])]
    curve.append(((t1 - t0) / 1e9, float(live[k1 - 1]) if k1 > 0 else at_start))

    # Busy: union of aten op intervals on the training thread inside the step.
    tops, opt_ranges = thread_spans(events, t0, t1, main_thread)  # aten ops and c10d calls
    comm_payload, comm_sent, n_coll = 0.0, 0.0, 0
    in_step = sorted((e for e in events if t0 <= e.start_ns() <= t1), key=lambda e: e.start_ns())
    backend = [e for e in in_step if _backend_collective(e.name()) is not None]
    calls = [e for e in in_step if e.name() in _C10D_GROUP]
    for e, n in zip(backend, group_sizes(calls, backend, world)):
        kind, times = _backend_collective(e.name())
        shapes, dtypes = e.shapes(), e.dtypes()
        if shapes:
            nbytes = _tensor_bytes(shapes[0], dtypes[0] if dtypes else "float")
            nbytes *= n if times == "world" else 1
            comm_payload += nbytes
            comm_sent += bus_bytes_factor(kind, n) * nbytes
            n_coll += 1
    busy = busy_time([(s, e_) for s, e_, name in tops if not name.startswith("c10d::")])
    step_ns = max(t1 - t0, 1)
    return {
        "peak_allocated_bytes": max(steps),
        "peak_allocated_bytes_steps": steps,
        "allocated_at_step_start_bytes": at_start,
        "busy_fraction": busy / step_ns,
        "busy_by_group_s": {k: round(v, 6) for k, v in busy_groups(tops, opt_ranges).items()},
        "profiled_range_s": step_ns / 1e9,
        "comm_payload_bytes_per_step": comm_payload,
        "comm_sent_bytes_per_step": comm_sent,
        "collectives_per_step": n_coll,
        "memory_timeline": _thin(curve, timeline_points),
    }


def _thin(curve: list[tuple[float, float]], n: int) -> list[list[float]]:
    """At most ``n`` points, keeping the maximum of each stretch (the peak survives)."""
    if len(curve) <= n:
        return [[round(t, 6), b] for t, b in curve]
    out = []
    size = len(curve) / n
    for i in range(n):
        chunk = curve[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)]
        t, b = max(chunk, key=lambda p: p[1])
        out.append([round(t, 6), b])
    return out


def peak_rss_bytes() -> float:
    """The process's peak resident set (ru_maxrss, kB on Linux): process-total memory."""
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0
