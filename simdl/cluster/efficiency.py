"""The ``efficiency`` section of a cluster file: fractions of peak that real kernels and
collectives reach, fixed overheads, and the calibrated in-step factors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..collectives.regimes import RegimeModel
from ..provenance import Sourced, read
from ..workload.op_classes import MEMORY_CLASSES
from .device import PRECISIONS
from .readers import FrozenMap, _bounded, _check_keys, _fraction, _nonneg, _positive, _put
from .regime_tables import _parse_regimes, _parse_subgroup_regimes, regimes_to_dict

# The collectives FSDP2 issues synchronously (simdl.strategies.fsdp.collectives_block).
BLOCKING_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
_EFF_KEYS = ("matmul", "memory_bandwidth", "kernel_launch_us", "collective_bandwidth_intra",
             "collective_bandwidth_inter", "collective_latency_intra_us", "collective_latency_inter_us",
             "collective_overhead_us", "comm_compute_interference",
             *(f"collective_bandwidth_factor_{c}" for c in ("all_gather", "reduce_scatter", "broadcast", "send_recv")),
             *(f"matmul_{p}" for p in PRECISIONS), "matmul_call_overhead_us", "collective_regimes_intra",
             "collective_regimes_subgroups",
             "stream_bandwidth", "stream_call_overhead_us", "copy_bandwidth", "copy_in_step_factor",
             "collective_load_factor", "collective_load_factor_all_reduce", "collective_load_half_size_MiB",
             "collective_load_overhead_us", "fsdp_unit_overhead_us", "compute_jitter",
             *(f"collective_blocking_factor_{c}" for c in BLOCKING_COLLECTIVES), "collective_blocking_wait",
             *(f"memory_bandwidth_{c}" for c in MEMORY_CLASSES), "compute_memory_overlap",
             *(f"call_overhead_{c}_us" for c in MEMORY_CLASSES), "conv_weight_grad_bandwidth")


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak that real kernels and collectives reach, and fixed overheads (s)."""

    matmul: Sourced
    memory_bandwidth: Sourced
    kernel_launch: Sourced  # s per kernel
    collective_bandwidth_intra: Sourced  # bus bandwidth / intra link bandwidth
    collective_latency_intra: Sourced  # s per ring step inside a node
    collective_bandwidth_inter: Sourced | None = None  # bus bandwidth / NIC bandwidth per node
    collective_latency_inter: Sourced | None = None  # s per ring step when the ring crosses nodes
    collective_overhead: Sourced | None = None  # s fixed per collective call (a 0-byte collective)
    # Seconds added per second that compute and communication run concurrently (0 = free
    # overlap, the engine's default; 1 = they serialise; > 1 = each slows the other down, as
    # gloo's threads and the compute do on the same CPU cores). Fitted by `simdl calibrate`.
    comm_compute_interference: Sourced | None = None
    # Optional per-collective bus bandwidth relative to all_reduce's (default 1): gloo's
    # all_gather / reduce_scatter run at a fraction of its all_reduce. collective -> Sourced.
    collective_bandwidth_factors: FrozenMap = field(default_factory=FrozenMap)
    # Optional matmul efficiency per peak precision (key ``matmul_<fp32|tf32|bf16|fp16>``);
    # ``matmul`` applies to the precisions not given. precision -> Sourced fraction.
    matmul_by_precision: FrozenMap = field(default_factory=FrozenMap)
    # Optional fixed seconds per matmul/convolution call (forward, and each backward gradient),
    # added to kernel_launch: large for oneDNN on CPU. Fitted by `simdl calibrate`.
    matmul_call_overhead: Sourced | None = None
    # Optional piecewise alpha-beta costs of collectives inside a node (calibrated gloo:
    # bandwidth changes with message size). Where a collective has a curve it replaces
    # bandwidth x factor, latency and overhead above (simdl.collectives.regimes).
    collective_regimes_intra: RegimeModel | None = None
    # Optional regime curves of groups smaller than a node, by group size (int -> RegimeModel):
    # measured with every such group of the node calling at once, as FSDP2's hybrid shard
    # and replicate groups do (calibration/collectives.py, scopes sub<d>). Where a size has
    # a curve for a collective it replaces collective_regimes_intra's for that group size:
    # on a CPU host the concurrent groups share cores and memory, and gloo's all-gather
    # copies the whole output whatever the group, so a 2-rank group costs more than the
    # node's curve scaled by the ring's factors says (benchmarks/gloo_group_size_cpu.py).
    collective_regimes_subgroups: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of the memory bandwidth that large streaming tensor ops reach (the
    # optimizer step, FSDP's copy-in/copy-out, DDP's bucket copies): they move whole
    # parameter-sized tensors, unlike the activation traffic of a table row that
    # ``memory_bandwidth`` describes. Default: ``memory_bandwidth``. Fitted by `simdl calibrate`.
    stream_bandwidth: Sourced | None = None
    # Optional seconds per call of such an op (per tensor: PyTorch's CPU optimizer loops over
    # tensors one at a time). Default: ``kernel_launch_us``.
    stream_call_overhead: Sourced | None = None
    # Optional fraction of the memory bandwidth a copy between two large buffers reaches
    # (FSDP copy-in/out, DDP bucket copies), bytes counted as read + written. On CPUs the
    # destination's lines are read before they are written (write-allocate), so copies
    # reach less than in-place updates. Default: ``stream_bandwidth``.
    copy_bandwidth: Sourced | None = None
    # Optional, for ranks whose copies share the cores and memory with the rest of the step
    # (CPU): how many times its time on the idle machine (copy_bandwidth, page faults of
    # fresh buffers) a strategy's buffer copy (FSDP2 packing and unpacking its collective
    # buffers, DDP filling its buckets) takes inside a training step. A profiled ViT-B/32
    # FSDP step on an Intel Xeon (cpu-local's host) ran the 28 MB chunk_cat of each unit's gradients at
    # 0.67 GB/s, against 4-7.5 ms alone. Fitted by `simdl calibrate` from the profiled
    # strategy steps (simdl.calibrate.in_step.CopyFit) and printed; written into a profile only
    # where simdl.calibrate.profile.COPY_FACTOR_FROM_PROFILED_STEPS says (one factor did not
    # carry over between models on the EPYC); a profile may set it by hand. Absent = 1.
    copy_in_step_factor: Sourced | None = None
    # Optional, for ranks that compute and communicate on the same host cores (CPU, gloo): a
    # collective inside a training step is slower than the same call on the idle machine the
    # collective costs were measured on (its threads share the cores with the compute and
    # wait for the peers' threads to be scheduled). Its latency and bandwidth terms are
    # scaled by ``collective_load_factor`` (>= 1) and ``collective_load_overhead_us`` is added
    # per call. Fitted by `simdl calibrate` from strategy steps; absent = 1 and 0.
    collective_load_factor: Sourced | None = None
    collective_load_overhead: Sourced | None = None
    # Optional factor for all_reduce alone (default: ``collective_load_factor``): on the
    # idle machine gloo's all_reduce reaches 2-3x the bus bandwidth of its reduce_scatter
    # and all_gather (cpu-local's collective fits: 1.57 against 0.49 and 0.87 GB/s), and
    # inside a training step it loses most of that lead (profiled FSDP2 steps of cpu-local's
    # calibration: an in-step all-reduce of a unit took about as long as the reduce-scatter of the same
    # bytes). Fitted by `simdl calibrate` with the other factor.
    collective_load_factor_all_reduce: Sourced | None = None
    # Optional message size (bytes; key ``collective_load_half_size_MiB``) at which the slowdown
    # is half its small-message value: the factors above then apply to small messages, and a
    # message of S bytes is slowed by 1 + (factor - 1) / (1 + S / half_size). Measured strategy
    # steps (cpu-local's calibration): a single 403 MB all-reduce in a step runs at nearly its
    # idle speed, while 1-67 MB ones take 2-3x theirs. Absent: every size gets the full factor.
    collective_load_half_size: Sourced | None = None
    # Optional, for collectives that hold the training thread (FSDP2 on CPU: gloo's work is
    # waited for on the host; simdl.strategies.fsdp.collectives_block). Measured directly:
    # `simdl calibrate` logs every FSDP collective call of its strategy steps
    # (simdl.calibrate.in_step). ``collective_blocking_factors``: per collective, how many
    # times its idle time a call's transfer takes in a step (keys
    # ``collective_blocking_factor_<collective>``); it replaces the load factors above
    # (fitted to whole steps, which also carry the work around the calls) for such calls,
    # and ``collective_load_overhead_us`` is still added per call.
    # ``collective_blocking_wait``: the time ranks spend in the calls waiting for a peer that
    # is still computing, as a fraction of the step's compute (ranks drift apart while they
    # compute and meet at every call; logged waits in calibration were 5-16 % of the local step
    # on every model, and no steadier per call).
    collective_blocking_factors: FrozenMap = field(default_factory=FrozenMap)
    collective_blocking_wait: Sourced | None = None
    # Optional host time (s; key ``fsdp_unit_overhead_us``) FSDP2 spends per unit per step
    # outside its collectives and the copies the plan prices: its forward and backward hooks
    # (pre-forward unshard, pre-backward, post-backward reduce) are Python on the training
    # thread. The calls logged in the strategy steps (calibration on an AMD EPYC, 2 ranks)
    # left 150-250 ms per convnext_tiny / efficientnet_v2_s step outside the calls and the
    # local step, about as much with one collective per unit (NO_SHARD) as with three
    # (FULL_SHARD): a cost per unit, not per call. Fitted by `simdl calibrate` with the other
    # step parameters; absent = 0 (every GPU preset: there the hooks run ahead of the kernels).
    fsdp_unit_overhead: Sourced | None = None
    # Optional spread of a rank's compute time from one step to the next: the robust standard
    # deviation (1.4826 x median absolute deviation) of log(step time) of ranks training on
    # their own, all at once, so the OS scheduling of the shared cores is in it
    # (simdl.calibrate.jitter). The SimPy engine draws each parameter-server
    # worker's compute per step from a mean-one lognormal of this sigma unless --jitter says
    # otherwise: the workers drift apart, which sets where pulls and pushes meet at the
    # server (staleness) and when an SSP bound binds. Measured by `simdl calibrate`.
    compute_jitter: Sourced | None = None
    # Optional fraction of the memory bandwidth per memory-bound op class (key
    # ``memory_bandwidth_<class>``, simdl.workload.op_classes.MEMORY_CLASSES): a row of that
    # class streams its bytes at this rate instead of ``memory_bandwidth``'s. Not capped at 1
    # (a small tensor that stays in cache beats the datasheet's DRAM figure). class -> Sourced.
    memory_bandwidth_by_class: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of a row's shorter part (FLOPs or bytes time) hidden under its longer
    # part: 1 = the roofline's max (the default; a GPU's warps overlap arithmetic with memory
    # traffic), 0 = their sum (one CPU core runs a small op's arithmetic and its loads in one
    # instruction stream). Fitted by `simdl calibrate` (0 on the 2-core development VMs).
    compute_memory_overlap: Sourced | None = None
    # Optional fixed cost (s; key ``call_overhead_<class>_us``) per call of a memory-bound
    # class's row, on top of its kernels' launches: a CPU batch norm in training mode has a
    # fixed part whatever its size (statistics set-up, parallel regions; fitted 69 us on the
    # Zen 3 EPYC at 2 ranks, 122 us at 4). Fitted by `simdl calibrate` only for the classes
    # simdl.calibrate.fit.CALL_OVERHEAD_CLASSES names (none by default); absent = 0.
    call_overhead_by_class: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of the memory bandwidth at which a convolution's backward accumulates
    # its weight gradient, once per sample (a CPU's backward-weights kernel reduces over the
    # batch image by image into a filter-sized buffer): each conv row's backward costs batch x
    # weight bytes at this rate on top of its roofline time. Fitted by `simdl calibrate` (CPU);
    # absent on GPUs (their kernels tile the batch), where the term is 0.
    conv_weight_grad_bandwidth: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in (("matmul", "matmul"), ("memory_bandwidth", "memory_bandwidth"),
                          ("kernel_launch", "kernel_launch_us"),
                          ("collective_bandwidth_intra", "collective_bandwidth_intra"),
                          ("collective_bandwidth_inter", "collective_bandwidth_inter"),
                          ("collective_latency_intra", "collective_latency_intra_us"),
                          ("collective_latency_inter", "collective_latency_inter_us"),
                          ("collective_overhead", "collective_overhead_us"),
                          ("comm_compute_interference", "comm_compute_interference")):
            _put(out, key, getattr(self, attr))
        for c, v in self.collective_bandwidth_factors.items():
            _put(out, f"collective_bandwidth_factor_{c}", v)
        for p, v in self.matmul_by_precision.items():
            _put(out, f"matmul_{p}", v)
        _put(out, "matmul_call_overhead_us", self.matmul_call_overhead)
        _put(out, "stream_bandwidth", self.stream_bandwidth)
        _put(out, "stream_call_overhead_us", self.stream_call_overhead)
        _put(out, "copy_bandwidth", self.copy_bandwidth)
        _put(out, "copy_in_step_factor", self.copy_in_step_factor)
        _put(out, "collective_load_factor", self.collective_load_factor)
        _put(out, "collective_load_factor_all_reduce", self.collective_load_factor_all_reduce)
        _put(out, "collective_load_half_size_MiB", self.collective_load_half_size)
        _put(out, "collective_load_overhead_us", self.collective_load_overhead)
        _put(out, "fsdp_unit_overhead_us", self.fsdp_unit_overhead)
        _put(out, "compute_jitter", self.compute_jitter)
        for c, v in self.collective_blocking_factors.items():
            _put(out, f"collective_blocking_factor_{c}", v)
        _put(out, "collective_blocking_wait", self.collective_blocking_wait)
        for c, v in self.memory_bandwidth_by_class.items():
            _put(out, f"memory_bandwidth_{c}", v)
        _put(out, "compute_memory_overlap", self.compute_memory_overlap)
        for c, v in self.call_overhead_by_class.items():
            _put(out, f"call_overhead_{c}_us", v)
        _put(out, "conv_weight_grad_bandwidth", self.conv_weight_grad_bandwidth)
        if self.collective_regimes_intra is not None:
            out["collective_regimes_intra"] = regimes_to_dict(self.collective_regimes_intra)
        if self.collective_regimes_subgroups:
            out["collective_regimes_subgroups"] = {str(d): regimes_to_dict(m)
                                                   for d, m in sorted(self.collective_regimes_subgroups.items())}
        return out



def _parse_efficiency(raw: Mapping[str, Any], where: str, multi_node: bool) -> Efficiency:
    _check_keys(raw, _EFF_KEYS, where)
    eff = Efficiency(
        matmul=_fraction(raw, "matmul", where),
        memory_bandwidth=_fraction(raw, "memory_bandwidth", where),
        kernel_launch=_nonneg(raw, "kernel_launch_us", where),
        collective_bandwidth_intra=_fraction(raw, "collective_bandwidth_intra", where),
        collective_latency_intra=_nonneg(raw, "collective_latency_intra_us", where),
        collective_bandwidth_inter=_fraction(raw, "collective_bandwidth_inter", where, required=multi_node),
        collective_latency_inter=_nonneg(raw, "collective_latency_inter_us", where, required=multi_node),
        collective_overhead=_nonneg(raw, "collective_overhead_us", where, required=False),
        comm_compute_interference=_interference(raw, where),
        collective_bandwidth_factors=FrozenMap({
            k[len("collective_bandwidth_factor_"):]: read(raw, k, where=where, strictly_positive=True)
            for k in raw if k.startswith("collective_bandwidth_factor_")}),
        matmul_by_precision=FrozenMap({p: _fraction(raw, f"matmul_{p}", where)
                                       for p in PRECISIONS if f"matmul_{p}" in raw}),
        matmul_call_overhead=_nonneg(raw, "matmul_call_overhead_us", where, required=False),
        # Fractions of the memory bandwidth, but not capped at 1: a measured kernel may beat the
        # GPU file's figure (a datasheet, or a one-off copy benchmark).
        stream_bandwidth=_positive(raw, "stream_bandwidth", where, required=False),
        stream_call_overhead=_nonneg(raw, "stream_call_overhead_us", where, required=False),
        copy_bandwidth=_positive(raw, "copy_bandwidth", where, required=False),
        copy_in_step_factor=_bounded(raw, "copy_in_step_factor", where, 0.5, 50.0,
                                     "how many times its idle time a buffer copy takes inside a training step"),
        collective_load_factor=_load_factor(raw, where),
        collective_load_factor_all_reduce=_load_factor(raw, where, "collective_load_factor_all_reduce"),
        collective_load_half_size=_positive(raw, "collective_load_half_size_MiB", where, required=False),
        collective_load_overhead=_nonneg(raw, "collective_load_overhead_us", where, required=False),
        fsdp_unit_overhead=_nonneg(raw, "fsdp_unit_overhead_us", where, required=False),
        collective_blocking_factors=FrozenMap({
            c: _bounded(raw, f"collective_blocking_factor_{c}", where, 0.5, 10.0,
                        "how many times its idle time a blocking collective's transfer takes in a step")
            for c in BLOCKING_COLLECTIVES if f"collective_blocking_factor_{c}" in raw}),
        collective_blocking_wait=_bounded(raw, "collective_blocking_wait", where, 0.0, 1.0,
                                          "time waiting for peers in blocking calls per second of compute"),
        compute_jitter=_bounded(raw, "compute_jitter", where, 0.0, 2.0,
                                "the spread of log(step time), a standard deviation"),
        memory_bandwidth_by_class=FrozenMap({c: _positive(raw, f"memory_bandwidth_{c}", where)
                                             for c in MEMORY_CLASSES if f"memory_bandwidth_{c}" in raw}),
        compute_memory_overlap=_bounded(raw, "compute_memory_overlap", where, 0.0, 1.0,
                                        "the fraction of a row's shorter part hidden under its longer part"),
        call_overhead_by_class=FrozenMap({c: _nonneg(raw, f"call_overhead_{c}_us", where)
                                          for c in MEMORY_CLASSES if f"call_overhead_{c}_us" in raw}),
        conv_weight_grad_bandwidth=_positive(raw, "conv_weight_grad_bandwidth", where, required=False),
        # null: none (a preset that ``extends`` a calibrated one can drop its regimes this way).
        collective_regimes_intra=(_parse_regimes(raw["collective_regimes_intra"], f"{where}: collective_regimes_intra")
                                  if raw.get("collective_regimes_intra") is not None else None),
        collective_regimes_subgroups=_parse_subgroup_regimes(raw.get("collective_regimes_subgroups"),
                                                             f"{where}: collective_regimes_subgroups"),
    )
    return eff



def _load_factor(raw: Mapping[str, Any], where: str, key: str = "collective_load_factor") -> Sourced | None:
    return _bounded(raw, key, where, 1.0, 10.0,
                    "how many times slower a collective runs inside a training step")


def _interference(raw: Mapping[str, Any], where: str) -> Sourced | None:
    return _bounded(raw, "comm_compute_interference", where, 0.0, 20.0,
                    "seconds added per second of concurrent compute and communication")
