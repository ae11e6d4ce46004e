"""Cost of compute on a cluster, row by row and task by task: the numbers both engines share.

Compute is a per-row roofline (Williams, Waterman & Patterson, CACM 2009): a row takes
the longer of its FLOPs over the achievable FLOP/s and its bytes over the achievable
memory bandwidth, plus a fixed overhead per kernel launched. A calibrated profile may add
the part of the shorter time that does not overlap the longer one (CPUs) and give each
memory-bound op class its own bandwidth. The achievable rates are :mod:`simdl.costs.rates`'s.

Communication is priced by :class:`simdl.costs.comm.CommCosts` (the alpha-beta costs of
:mod:`simdl.collectives.cost`); it and the rates are re-exported here for the callers that
take every cost from this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

# Re-exported: callers (calibration, engines, tests) take the glibc constant from here.
from ..cluster.allocator import GLIBC_MMAP_THRESHOLD_MAX, mmap_threshold  # noqa: F401
from ..strategies.plan import PSPlan
from ..workload.table import WorkloadTable

# Re-exported: the callers of simdl.costs.tasks (and its alias simdl.analytic.costs) take these from here.
from .comm import CommCosts, blocking_wait_time  # noqa: F401
from .rates import MIXED_PRECISION_ACTIVATION_FACTOR, PEAK_KEY, Rates, device_rates, host_rates  # noqa: F401

# Assumed: a backward kernel reads the saved input and the output gradient and writes
# the input gradient (and the weight gradient), about twice the forward's traffic.
# Calibration fits the memory-bandwidth efficiency that absorbs the error of this factor.
BACKWARD_BYTES_FACTOR = 2.0


@dataclass(frozen=True, eq=False)
class RowTimes:
    """Per-row forward and backward seconds and their prefix sums (for O(1) segment sums)."""

    fwd: np.ndarray
    bwd: np.ndarray
    fwd_cum: np.ndarray
    bwd_cum: np.ndarray
    # Prefix sums of the part of each row's time the device waits for the host (GPU eager
    # steps, simdl.costs.gpu_rows.fed_by_host); None: no host stream.
    wait_cum: Any = None
    # Prefix sums of the part of that wait the framework's host work causes
    # (simdl.costs.gpu_framework); None: no framework host work priced.
    framework_cum: Any = None
    # Python lists of the prefix sums above, by direction (fwd, bwd), set from them.
    _cum: dict[str, list[float]] = field(init=False, repr=False)
    _wait: dict[str, list[float]] = field(init=False, repr=False)
    _framework: dict[str, list[float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Python lists of the prefix sums: a plan sums ~100 segments per prediction, and
        # indexing a list is several times cheaper than a numpy scalar (same float values).
        object.__setattr__(self, "_cum", {"fwd": self.fwd_cum.tolist(), "bwd": self.bwd_cum.tolist()})
        object.__setattr__(self, "_wait", {k: v.tolist() for k, v in (self.wait_cum or {}).items()})
        object.__setattr__(self, "_framework", {k: v.tolist() for k, v in (self.framework_cum or {}).items()})

    def segment(self, start: int, stop: int, direction: str) -> float:
        cum = self._cum["fwd" if direction == "fwd" else "bwd"]
        return cum[stop] - cum[start]

    def wait(self, start: int, stop: int, direction: str) -> float:
        """Seconds of the segment the device spends waiting for the host (0 without a host stream)."""
        if self.wait_cum is None:
            return 0.0
        cum = self._wait["fwd" if direction == "fwd" else "bwd"]
        return cum[stop] - cum[start]

    def framework_wait(self, start: int, stop: int, direction: str) -> float:
        """Seconds of :meth:`wait` that the framework's host work causes (DDP/FSDP on a GPU)."""
        if self.framework_cum is None:
            return 0.0
        cum = self._framework["fwd" if direction == "fwd" else "bwd"]
        return cum[stop] - cum[start]


@lru_cache(maxsize=4096)
def row_times(table: WorkloadTable, batch: int, rates: Rates) -> RowTimes:
    measured = rates.measured.find(table) if rates.measured is not None else None
    if measured is not None:
        fwd, bwd = measured.at(batch)
        return _row_times(fwd * rates.measured_scale, bwd * rates.measured_scale)
    if rates.kernels is not None:
        return _kernel_row_times(table, batch, rates)
    a = rates.activation_factor
    fwd_flops = table.column("fwd_flops", batch)
    bwd_flops = table.column("bwd_input_flops", batch) + table.column("bwd_weight_flops", batch)
    # Activation traffic scales with precision; weight traffic (the fixed part) does not.
    fwd_bytes = (table.per_sample["read_bytes"] + table.per_sample["write_bytes"]) * batch * a + (
        table.fixed["read_bytes"] + table.fixed["write_bytes"]
    )
    bandwidth = np.full(table.n_rows, rates.memory_bandwidth)
    for cls, bw in rates.class_memory_bandwidth:
        bandwidth[table.op_classes == cls] = bw
    fwd = _roofline(fwd_flops / rates.flops, fwd_bytes / bandwidth, rates.compute_memory_overlap)
    fwd += table.fixed["fwd_kernels"] * rates.kernel_overhead
    bwd = _roofline(
        bwd_flops / rates.flops, BACKWARD_BYTES_FACTOR * fwd_bytes / bandwidth, rates.compute_memory_overlap
    )
    bwd += table.fixed["bwd_kernels"] * rates.kernel_overhead
    if rates.matmul_call_overhead:
        # One call per row with forward FLOPs; one per backward gradient (input, weight) computed.
        fwd += (fwd_flops > 0) * rates.matmul_call_overhead
        bwd += (
            (table.column("bwd_input_flops", batch) > 0).astype(float) + (table.column("bwd_weight_flops", batch) > 0)
        ) * rates.matmul_call_overhead
    for cls, s in rates.class_call_overhead:
        calls = (table.op_classes == cls) * s
        fwd += calls
        bwd += calls
    if rates.conv_weight_grad_bandwidth:
        # A CPU convolution's backward accumulates the weight gradient image by image (oneDNN's
        # backward-weights reduces over the batch into a filter-sized buffer): a cost of
        # batch x weight bytes that dominates at small spatial sizes (measured in calibration on
        # a Zen 3 EPYC: a 3x3 conv on a 1x1 output ran its backward at 2.6 GFLOP/s against 30
        # at 16x16; the held-out errors with and without the term are
        # simdl.calibrate.fit.CONV_WEIGHT_GRAD's; a forward term of the same form fits to no
        # cost, so there is none). The fixed read
        # bytes of a conv row are its weights (and bias).
        weights = (table.op_classes == "conv") * table.fixed["read_bytes"] * batch
        bwd += weights / rates.conv_weight_grad_bandwidth
    return _row_times(fwd, bwd)


def _kernel_row_times(table: WorkloadTable, batch: int, rates: Rates) -> "RowTimes":
    """Rows on a GPU by the kernel model, the device fed by the eager host stream
    (simdl.costs.gpu_rows); backward rows are issued in reverse order."""
    from ..costs.gpu_rows import fed_by_host, host_row_times, kernel_row_times

    kf, kb = kernel_row_times(
        table, batch, rates.kernels, rates.precision, rates.activation_factor, rates.memory_format
    )
    hf, hb = host_row_times(table, rates.kernels)
    fwd, wait_f = fed_by_host(kf, hf)
    bwd_r, wait_b_r = fed_by_host(kb[::-1], hb[::-1])
    if not rates.framework_host:
        return _row_times(fwd, bwd_r[::-1].copy(), wait_f, wait_b_r[::-1].copy())
    # The framework's host work delays the rows after it; the extra wait it causes is kept
    # apart (step_split_s "host") from the wait for the model's own ops ("host_bound").
    xf, xb = (np.asarray(x) for x in rates.framework_host)
    fwd2, wait_f2 = fed_by_host(kf, hf + xf)
    bwd2_r, wait_b2_r = fed_by_host(kb[::-1], (hb + xb)[::-1])
    wait_b, wait_b2 = wait_b_r[::-1], wait_b2_r[::-1]
    return _row_times(
        fwd2, bwd2_r[::-1].copy(), wait_f2, wait_b2.copy(), framework=(wait_f2 - wait_f, wait_b2 - wait_b)
    )


def _roofline(flops_time: np.ndarray, bytes_time: np.ndarray, overlap: float) -> np.ndarray:
    """The longer of the two times plus the part of the shorter one not hidden under it."""
    longer = np.maximum(flops_time, bytes_time)
    if overlap >= 1.0:
        return longer
    return longer + (1.0 - overlap) * np.minimum(flops_time, bytes_time)


def _row_times(fwd: np.ndarray, bwd: np.ndarray, wait_fwd=None, wait_bwd=None, framework=None) -> RowTimes:
    zero = np.zeros(1)

    def cum(pair):
        return {"fwd": np.concatenate([zero, np.cumsum(pair[0])]), "bwd": np.concatenate([zero, np.cumsum(pair[1])])}

    wait = cum((wait_fwd, wait_bwd)) if wait_fwd is not None else None
    fw = cum(framework) if framework is not None else None
    return RowTimes(fwd, bwd, np.concatenate([zero, np.cumsum(fwd)]), np.concatenate([zero, np.cumsum(bwd)]), wait, fw)


def memory_bound_time(nbytes: float, kernels: int, rates: Rates, fresh_bytes: float = 0.0, copy: bool = False) -> float:
    """A task given only by bytes streamed and calls made (optimizer, copies), plus the page
    faults of ``fresh_bytes`` it allocates in buffers above the mmap threshold (host devices).
    ``copy``: the bytes move between two buffers (copy bandwidth) rather than in place; on a
    GPU with a kernel model they are copy kernels at its streaming rate (simdl.costs.gpu_framework)."""
    if copy and rates.kernels is not None:
        from ..costs.gpu_framework import copy_kernels_time

        return copy_kernels_time(rates.kernels, nbytes, kernels) + fresh_bytes * rates.page_fault_per_byte
    bw = rates.stream_bandwidth or rates.memory_bandwidth
    if copy and rates.copy_bandwidth:
        bw = rates.copy_bandwidth
    call = rates.kernel_overhead if rates.stream_call_overhead is None else rates.stream_call_overhead
    t = nbytes / bw + kernels * call + fresh_bytes * rates.page_fault_per_byte
    return t * rates.copy_factor if copy else t


def compute_task_time(task, rows: "RowTimes", rates: Rates) -> float:
    """Seconds of a compute-stream task: its table rows plus its streamed bytes, calls and
    fresh buffers (mapped above the mmap threshold, or trimmed from the heap and faulted in
    again: ``task.refaults``), the one formula both engines use."""
    d = rows.segment(task.rows[0], task.rows[1], task.direction) if task.rows else 0.0
    if task.bytes or task.kernels or task.allocs or task.refaults:
        # The optimizer step updates tensors in place; every other memory-bound task of a plan
        # copies between buffers (FSDP copy-in/out, DDP bucket copies).
        fresh = fresh_mapped_bytes(task.allocs, rates) + task.refaults  # priced at page_fault_per_byte (0 on GPUs)
        d += memory_bound_time(task.bytes, task.kernels, rates, fresh, copy=task.phase != "opt")
    return d + task.host_s


# Kinds of compute-stream time a result splits itself into (Result.step_split_s), named as
# the groups validate/measure.py splits a profiled step into (busy_by_group_s), so that a
# prediction's split can be checked and not only its sum: ``compute`` the workload's rows,
# ``copies`` buffer copies (FSDP copy-in/out, DDP bucket copies; page faults of their fresh
# buffers included), ``optimizer`` the optimizer step, ``host`` framework time outside any op
# (FSDP2's per-unit hooks), ``host_bound`` the time a GPU's rows wait for the eager host to
# issue their ops (simdl.costs.gpu_rows; 0 elsewhere).
SPLIT_KINDS = ("compute", "copies", "optimizer", "host", "host_bound")


def compute_split(tasks, rows: "RowTimes", durations) -> dict[str, float]:
    """Seconds of ``tasks``' compute-stream work by :data:`SPLIT_KINDS`, from the durations
    the engine priced them at (:func:`compute_task_time`, one per task; collectives skipped):
    a task's rows are ``compute``, its host time ``host``, the rest of its duration (bytes,
    calls, page faults) ``optimizer`` or ``copies`` by its phase. The values add up to the
    compute tasks' durations."""
    rows_only, mixed, host = _split_index(tasks)
    out = dict.fromkeys(SPLIT_KINDS, 0.0)
    out["host"] = host
    # Rows-only tasks (most of a plan): their durations less their host time are compute.
    out["compute"] = sum(durations[i] for i in rows_only) - host
    for i, seg, key, host_s in mixed:
        r = rows.segment(*seg) if seg else 0.0
        out["compute"] += r + host_s  # host_s is in ``host`` already
        out[key] += durations[i] - r - host_s
    if rows.wait_cum is not None:
        segments = [(t.rows[0], t.rows[1], t.direction) for t in tasks if not t.collective and t.rows]
        waited = sum(rows.wait(*s) for s in segments)
        framework = sum(rows.framework_wait(*s) for s in segments)
        out["compute"] -= waited
        out["host_bound"] = waited - framework
        out["host"] += framework
    return out


# Which tasks of a plan are rows only, and which also stream bytes: fixed per plan, so kept
# for the plans a sweep repeats (plans are memoised; walking every task's fields on each
# prediction made the split 7 % of a memoised prediction's time, timed on a 2-core Xeon VM).
_SPLIT_INDEX: dict[int, tuple] = {}


def _split_index(tasks) -> tuple[list[int], list[tuple], float]:
    key = id(tasks)
    hit = _SPLIT_INDEX.get(key)
    if hit is not None and hit[0] is tasks:
        return hit[1]
    rows_only, mixed, host = [], [], 0.0
    for i, t in enumerate(tasks):
        if t.collective:
            continue
        host += t.host_s
        if not (t.bytes or t.kernels or t.allocs or t.refaults):
            rows_only.append(i)
        else:
            seg = (t.rows[0], t.rows[1], t.direction) if t.rows else None
            mixed.append((i, seg, "optimizer" if t.phase == "opt" else "copies", t.host_s))
    index = (rows_only, mixed, host)
    if len(_SPLIT_INDEX) > 4096:
        _SPLIT_INDEX.clear()
    _SPLIT_INDEX[key] = (tasks, index)  # the reference keeps the id from being reused
    return index


def spmd_or_ps_rates(rates: Rates, plan, table: WorkloadTable | None = None) -> Rates:
    """The rates a plan's tasks run at. copy_in_step_factor was fitted on DDP/FSDP steps,
    whose copies run beside the backend's threads and FSDP2's fresh buffers; a parameter-server
    worker copies the pulled parameters with no collective running, and its copies keep their
    idle-machine cost (its calibration has no profiled step). On a GPU with a kernel model,
    the plan's framework work joins the eager host stream (simdl.costs.gpu_framework; needs
    the plan's ``table``)."""
    if isinstance(plan, PSPlan) and rates.copy_factor != 1.0:
        return dataclasses.replace(rates, copy_factor=1.0)
    if rates.kernels is not None and table is not None and not isinstance(plan, PSPlan):
        from ..costs.gpu_framework import framework_host_rows

        extra = framework_host_rows(plan, table, rates.kernels)
        if extra[0]:
            return dataclasses.replace(rates, framework_host=extra)
    return rates


def fresh_mapped_bytes(sizes, rates: Rates) -> float:
    """Bytes of the buffers in ``sizes`` that the allocator maps fresh (above its threshold)."""
    if not rates.page_fault_per_byte:
        return 0.0
    return mapped_bytes(sizes, rates.mmap_threshold)


def mapped_bytes(sizes, threshold: float) -> float:
    """Bytes of the buffers in ``sizes`` above the allocator's mmap ``threshold``."""
    return float(sum(s for s in sizes if s > threshold))
