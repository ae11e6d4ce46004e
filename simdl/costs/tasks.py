"""Cost of compute and communication on a cluster: the numbers both engines share.

Compute is a per-row roofline (Williams, Waterman & Patterson, CACM 2009): a row takes
the longer of its FLOPs over the achievable FLOP/s and its bytes over the achievable
memory bandwidth, plus a fixed overhead per kernel launched. A calibrated profile may add
the part of the shorter time that does not overlap the longer one (CPUs) and give each
memory-bound op class its own bandwidth. Achievable = peak times an
efficiency, both from the cluster profile (datasheet peaks, efficiencies from
measurements or calibration; the profile says which).

Communication uses the alpha-beta costs of :mod:`simdl.collectives.cost` with the
bottleneck bandwidth of the group's ring, scaled by the profile's collective efficiency.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..cluster import Cluster
# Re-exported: callers (calibration, engines, tests) take the glibc constant from here.
from ..cluster.allocator import GLIBC_MMAP_THRESHOLD_MAX, mmap_threshold  # noqa: F401
from ..collectives import collective_time
from ..hosts import host_for
from ..strategies.plan import PSPlan
from ..workload.table import WorkloadTable

# Which peak a precision uses for matmul/convolution rows.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16-amp": "fp16"}

# Assumed: under autocast (bf16 / fp16-amp) activations are stored in 16 bits, so
# activation traffic and saved activations are about half of the fp32 table's. A few
# ops autocast keeps in fp32 (softmax, losses, norms' statistics) make this a lower bound.
MIXED_PRECISION_ACTIVATION_FACTOR = 0.5

# Assumed: a backward kernel reads the saved input and the output gradient and writes
# the input gradient (and the weight gradient), about twice the forward's traffic.
# Calibration fits the memory-bandwidth efficiency that absorbs the error of this factor.
BACKWARD_BYTES_FACTOR = 2.0


@dataclass(frozen=True)
class Rates:
    """Achievable rates of one device for one precision, in SI units."""

    flops: float  # FLOP/s for matmul/convolution/attention
    memory_bandwidth: float  # bytes/s
    kernel_overhead: float  # s per kernel launch
    activation_factor: float  # bytes scale for activations under mixed precision
    # s of fixed setup per matmul/convolution call (a row's forward call, and each of its
    # backward input- and weight-gradient calls), on top of kernel_overhead: oneDNN on CPU
    # pays ~0.1 ms per convolution call (fitted by simdl calibrate); 0 unless the profile says.
    matmul_call_overhead: float = 0.0
    # Bytes/s of the memory-bound op classes that have their own rate, as ((class, rate), ...)
    # (hashable: rates key the row-time cache); other rows use memory_bandwidth.
    class_memory_bandwidth: tuple = ()
    # Fraction of a row's shorter part (FLOPs or bytes time) hidden under its longer part:
    # 1 = the roofline's max, 0 = their sum (Efficiency.compute_memory_overlap).
    compute_memory_overlap: float = 1.0
    # s of fixed cost per call of a memory-bound class's row, on top of its kernels' launches,
    # as ((class, s), ...) (Efficiency.call_overhead_by_class; off in calibrated profiles).
    class_call_overhead: tuple = ()
    # Bytes/s at which a convolution's backward accumulates its weight gradient, once per
    # sample (Efficiency.conv_weight_grad_bandwidth); 0: no such term (the roofline).
    conv_weight_grad_bandwidth: float = 0.0
    # Streaming ops on whole parameter-sized tensors (optimizer, FSDP/DDP copies): bytes/s
    # and s per call (0: memory_bandwidth and kernel_overhead, the roofline's rates).
    stream_bandwidth: float = 0.0
    stream_call_overhead: float | None = None
    copy_bandwidth: float = 0.0
    # How many times its idle time a buffer copy takes inside a step (Efficiency.copy_in_step_factor).
    copy_factor: float = 1.0
    # Host devices: s per byte of page faults on a buffer above the C allocator's mmap
    # threshold (mapped fresh at each allocation), and that threshold (bytes).
    page_fault_per_byte: float = 0.0
    mmap_threshold: float = float("inf")
    # Measured row times of profiled models (simdl.analytic.measured), and the factor from
    # the device share they were measured at to this prediction's share.
    measured: Any = None
    measured_scale: float = 1.0
    # The GPU's fitted kernel model (simdl.costs.gpu_profile.KernelProfile) and the
    # precision it prices at; None: the roofline above.
    kernels: Any = None
    precision: str = "fp32"
    # Host seconds per row that the plan's framework work (DDP hooks and launches, FSDP's
    # per-unit steps) adds to the eager host stream, as (forward, backward) tuples of one value
    # per row (simdl.costs.gpu_framework); empty: none.
    framework_host: tuple = ()


@lru_cache(maxsize=1024)
def device_rates(cluster: Cluster, precision: str) -> Rates:
    # per_rank_*: ranks sharing one device (the cpu-local preset) each get their share.
    eff = cluster.spec.efficiency
    peak = PEAK_KEY[precision]
    # A profile may give the matmul efficiency per peak (matmul_tf32, matmul_fp16, ...): the
    # fraction of peak reached differs by precision (fits to published figures, simdl.calibrate.published:
    # A100 TF32 0.24, AMP 0.43).
    matmul = eff.matmul_by_precision.get(peak, eff.matmul)
    return Rates(
        flops=cluster.per_rank_peak_flops(peak) * matmul.value,
        memory_bandwidth=cluster.per_rank_memory_bandwidth * eff.memory_bandwidth.value,
        kernel_overhead=eff.kernel_launch.value,
        activation_factor=MIXED_PRECISION_ACTIVATION_FACTOR if precision in ("bf16", "fp16-amp") else 1.0,
        matmul_call_overhead=eff.matmul_call_overhead.value if eff.matmul_call_overhead else 0.0,
        class_memory_bandwidth=tuple((c, cluster.per_rank_memory_bandwidth * v.value)
                                     for c, v in eff.memory_bandwidth_by_class.items()),
        compute_memory_overlap=eff.compute_memory_overlap.value if eff.compute_memory_overlap else 1.0,
        class_call_overhead=tuple((c, v.value) for c, v in eff.call_overhead_by_class.items()),
        conv_weight_grad_bandwidth=(cluster.per_rank_memory_bandwidth * eff.conv_weight_grad_bandwidth.value
                                    if eff.conv_weight_grad_bandwidth else 0.0),
        stream_bandwidth=(cluster.per_rank_memory_bandwidth * eff.stream_bandwidth.value
                          if eff.stream_bandwidth else 0.0),
        stream_call_overhead=eff.stream_call_overhead.value if eff.stream_call_overhead else None,
        copy_bandwidth=(cluster.per_rank_memory_bandwidth * eff.copy_bandwidth.value if eff.copy_bandwidth else 0.0),
        copy_factor=eff.copy_in_step_factor.value if eff.copy_in_step_factor else 1.0,
        **host_rates(cluster),
        **_measured(cluster, precision),
        **_kernels(cluster, precision),
    )


def _kernels(cluster: Cluster, precision: str) -> dict:
    """The GPU kernel model, where the device is a GPU whose file has a ``kernels:`` block."""
    k = cluster.spec.gpu.kernels
    if k is None or cluster.spec.gpu.is_cpu:
        return {}
    return {"kernels": k, "precision": precision}


def host_rates(cluster: Cluster) -> dict:
    """The host's page-fault cost (s per byte) and mmap threshold (bytes), as ``Rates``
    fields; empty when the host pays none (GPU memory: PyTorch's caching allocator)."""
    threshold = host_for(cluster).mapped_threshold()
    if threshold is None:
        return {}
    return {"page_fault_per_byte": cluster.spec.host.page_fault_per_byte.value, "mmap_threshold": threshold}


def _measured(cluster: Cluster, precision: str) -> dict:
    """The cluster's compute profile, if any, for the precision it was measured in."""
    path = cluster.spec.compute_profile
    if not path:
        return {}
    from .measured import load_compute_profile

    prof = load_compute_profile(path)
    if prof.precision != precision:
        return {}
    # Measured with ranks_sharing_device ranks on one device; this prediction's ranks each
    # get cluster.device_share of it (1 on devices that are not shared).
    measured_share = 1.0 / prof.ranks_sharing_device if cluster.spec.shared_device else 1.0
    return {"measured": prof, "measured_scale": measured_share / cluster.device_share}


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

    def __post_init__(self) -> None:
        # Python lists of the prefix sums: a plan sums ~100 segments per prediction, and
        # indexing a list is several times cheaper than a numpy scalar (same float values).
        object.__setattr__(self, "_cum", {"fwd": self.fwd_cum.tolist(), "bwd": self.bwd_cum.tolist()})
        if self.wait_cum is not None:
            object.__setattr__(self, "_wait", {k: v.tolist() for k, v in self.wait_cum.items()})
        if self.framework_cum is not None:
            object.__setattr__(self, "_framework", {k: v.tolist() for k, v in self.framework_cum.items()})

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
    bwd = _roofline(bwd_flops / rates.flops, BACKWARD_BYTES_FACTOR * fwd_bytes / bandwidth,
                    rates.compute_memory_overlap)
    bwd += table.fixed["bwd_kernels"] * rates.kernel_overhead
    if rates.matmul_call_overhead:
        # One call per row with forward FLOPs; one per backward gradient (input, weight) computed.
        fwd += (fwd_flops > 0) * rates.matmul_call_overhead
        bwd += ((table.column("bwd_input_flops", batch) > 0).astype(float)
                + (table.column("bwd_weight_flops", batch) > 0)) * rates.matmul_call_overhead
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

    kf, kb = kernel_row_times(table, batch, rates.kernels, rates.precision, rates.activation_factor)
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
    return _row_times(fwd2, bwd2_r[::-1].copy(), wait_f2, wait_b2.copy(),
                      framework=(wait_f2 - wait_f, wait_b2 - wait_b))


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


def memory_bound_time(nbytes: float, kernels: int, rates: Rates, fresh_bytes: float = 0.0,
                      copy: bool = False) -> float:
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
        row_tasks = [t for t in tasks if not t.collective and t.rows]
        waited = sum(rows.wait(*t.rows, t.direction) for t in row_tasks)
        framework = sum(rows.framework_wait(*t.rows, t.direction) for t in row_tasks)
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


class CommCosts:
    """Collective durations for a cluster allocation, memoised per (op, bytes, group).

    Bandwidth is the group's bus bandwidth (raw ring bottleneck x the profile's collective
    efficiency, :meth:`Cluster.group_bus_bandwidth`), alpha the per-step latency, plus a
    fixed cost per call (:attr:`Cluster.collective_overhead`). A profile with regime curves
    (``efficiency.collective_regimes_intra``, :mod:`simdl.collectives.regimes`) replaces all
    three, per call, for the collectives it covers inside a node: that collective's
    overhead, and the alpha and bandwidth of the regime its message size falls in, always
    with the ring form (the scaling assumption the curves are fitted with). A group smaller
    than a node is priced by the profile's curve of that group size where it has one
    (``efficiency.collective_regimes_subgroups``, measured with the node's groups calling at
    once), else by the node's curve scaled by the ring's factors.

    ``blocking``: the plan's collectives hold the training thread (FSDP2 on CPU,
    ``plan.facts.blocking_collectives``). A collective the profile has a
    ``collective_blocking_factor_<collective>`` for is then priced by it instead of the load
    factors.
    """

    def __init__(self, cluster: Cluster, algorithm: str = "auto", blocking: bool = False):
        self.cluster = cluster
        self.algorithm = algorithm
        self._overhead = cluster.collective_overhead
        eff = cluster.spec.efficiency
        # Optional per-collective bandwidth factors of the profile (calibrated gloo: its
        # all_gather/reduce_scatter are slower than its all_reduce); 1 when absent.
        self._factor = {c: f.value for c, f in eff.collective_bandwidth_factors.items()}
        self._regimes = eff.collective_regimes_intra
        self._subgroups = eff.collective_regimes_subgroups
        # Where the host maps large buffers fresh (its page-fault cost is priced), the regime
        # curves step at its mmap threshold for collectives with a whole-message temporary
        # (simdl.collectives.regimes, "The allocator's step"); None on GPU memory.
        self._temp_threshold = host_rates(cluster).get("mmap_threshold")
        self._load_factor = eff.collective_load_factor.value if eff.collective_load_factor else 1.0
        ar = eff.collective_load_factor_all_reduce
        self._load_factor_all_reduce = ar.value if ar else self._load_factor
        half = eff.collective_load_half_size
        self._load_half_size = half.value if half else float("inf")
        self._load_overhead = eff.collective_load_overhead.value if eff.collective_load_overhead else 0.0
        self._blocking = ({c: f.value for c, f in eff.collective_blocking_factors.items()} if blocking else {})
        self._cache: dict[tuple, float] = {}
        self._parts: dict[tuple, tuple] = {}

    @classmethod
    def for_plan(cls, cluster: Cluster, plan, algorithm: str = "auto") -> "CommCosts":
        """The costs a plan's collectives run at: blocking where the plan says they hold the
        training thread."""
        return cls(cluster, algorithm, blocking=plan.facts.blocking_collectives)

    def bandwidth(self, scope: str) -> float:
        return self.cluster.group_bus_bandwidth(scope)

    def alpha(self, scope: str) -> float:
        return self.cluster.group_latency(scope)

    def curve(self, collective: str, scope: str, size: int | None = None):
        """(the regime model, its curve) that prices ``collective`` over ``size`` ranks of
        ``scope``, or None. Curves are measured between the ranks of one node: they apply to
        'intra', and to 'world' on a single node. A group smaller than a node takes the curve
        measured at its size, if the profile has one."""
        if not (scope == "intra" or (scope == "world" and self.cluster.nodes == 1)):
            return None
        if size is not None and size < self.cluster.gpus_per_node:
            model = self._subgroups.get(size)
            c = model.curve(collective) if model is not None else None
            if c is not None:
                return model, c
        if self._regimes is None:
            return None
        c = self._regimes.curve(collective)
        return (self._regimes, c) if c is not None else None

    def parts(self, collective: str, nbytes: float, size: int, scope: str) -> tuple[float, float, float, str]:
        """(overhead s, alpha s per step, bus bandwidth bytes/s, algorithm 'ring'|'tree') of one
        call: what :meth:`time` evaluates, and what the simulator's flows are built from."""
        key = (collective, nbytes, size, scope)
        p = self._parts.get(key)
        if p is None:
            found = self.curve(collective, scope, size)
            if found is not None:
                model, curve = found
                scale = self.cluster.group_bandwidth(scope) / model.link_bandwidth
                o, alpha, bw = curve.parts(nbytes, size, scale, self._temp_threshold)
                p = (o, alpha, bw, "ring")
            else:
                bw = self.bandwidth(scope) * self._factor.get(collective, 1.0)
                alpha = self.alpha(scope)
                algo = self.algorithm
                if algo == "auto":
                    ring = collective_time(collective, nbytes, size, bw, alpha, "ring")
                    tree = collective_time(collective, nbytes, size, bw, alpha, "tree")
                    algo = "tree" if tree < ring else "ring"
                p = (self._overhead, alpha, bw, algo)
            g = self._blocking.get(collective)
            if g is not None:
                # A call that holds the training thread, priced as measured in steps
                # (simdl.calibrate.in_step): its transfer at g x the idle time, plus the fitted
                # delay per call. The wait for peers is the engines' (blocking_wait_time).
                o, alpha, bw, algo = p
                p = (o + self._load_overhead, alpha * g, bw / g, algo)
                self._parts[key] = p
                return p
            f = self._load_factor_all_reduce if collective == "all_reduce" else self._load_factor
            f = 1.0 + (f - 1.0) / (1.0 + nbytes / self._load_half_size)
            if f != 1.0 or self._load_overhead:
                # Host ranks (CPU, gloo): a collective of a training step runs while the same
                # cores compute and waits for the peers' threads to be scheduled, so it takes
                # longer than on the idle machine the curves were measured on: the profile's
                # fitted factor on its latency and bandwidth terms (all_reduce's own, if the
                # profile has one; smaller for large messages, if it has a half size), plus a
                # delay per call.
                o, alpha, bw, algo = p
                p = (o + self._load_overhead, alpha * f, bw / f, algo)
            self._parts[key] = p
        return p

    def time(self, collective: str, nbytes: float, size: int, scope: str) -> float:
        key = (collective, nbytes, size, scope)
        t = self._cache.get(key)
        if t is None:
            o, alpha, bw, algo = self.parts(collective, nbytes, size, scope)
            t = collective_time(collective, nbytes, size, bw, alpha, algo)
            if t > 0:
                t += o
            self._cache[key] = t
        return t


def blocking_wait_time(cluster: Cluster, plan, compute: float) -> float:
    """Seconds a step's blocking collectives spend waiting for peers still computing: the
    profile's ``collective_blocking_wait`` (per second of compute) x the step's compute, for
    a plan whose collectives hold the training thread; 0 otherwise."""
    w = cluster.spec.efficiency.collective_blocking_wait
    if w is None or not plan.facts.blocking_collectives:
        return 0.0
    return w.value * compute
