"""The ``efficiency`` section of a cluster file, declared once (:mod:`.declare`): fractions of
peak that real kernels and collectives reach, fixed overheads, and the calibrated in-step
factors. Each knob's description says what it is, its default and where its value comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..collectives.regimes import RegimeModel
from ..provenance import Sourced
from ..workload.op_classes import MEMORY_CLASSES
from .declare import FRACTION, NONNEG, POSITIVE, Custom, bounded, dump, knob, parse
from .device import PRECISIONS
from .readers import FrozenMap
from .regime_tables import (
    REGIMES_SCHEMA,
    SUBGROUP_REGIMES_SCHEMA,
    parse_regimes_or_none,
    parse_subgroup_regimes,
    regimes_to_dict,
    subgroup_regimes_to_dict,
)

# The collectives FSDP2 issues synchronously (simdl.strategies.fsdp.collectives_block).
BLOCKING_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
# Collectives whose bus bandwidth may be given relative to all_reduce's.
FACTOR_COLLECTIVES = ("all_gather", "reduce_scatter", "broadcast", "send_recv")


def _multi_node(ctx: Mapping[str, Any]) -> bool:
    return bool(ctx.get("multi_node"))


_LOAD = bounded(1.0, 10.0, "how many times slower a collective runs inside a training step")
_CALIBRATED = "Fitted by `simdl calibrate`."


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak that real kernels and collectives reach, and fixed overheads (s)."""

    matmul: Sourced = knob(
        "matmul", FRACTION, "fraction of the dense peak matmuls and convolutions reach", required=True
    )
    memory_bandwidth: Sourced = knob(
        "memory_bandwidth",
        FRACTION,
        """fraction of the memory bandwidth the
                                     memory-bound rows reach""",
        required=True,
    )
    kernel_launch: Sourced = knob("kernel_launch_us", NONNEG, "fixed time per kernel", required=True)
    collective_bandwidth_intra: Sourced = knob(
        "collective_bandwidth_intra",
        FRACTION,
        """bus bandwidth of a
                                               collective inside a node / the intra-node link bandwidth""",
        required=True,
    )
    collective_latency_intra: Sourced = knob(
        "collective_latency_intra_us", NONNEG, "per ring step inside a node", required=True
    )
    collective_bandwidth_inter: Sourced | None = knob(
        "collective_bandwidth_inter",
        FRACTION,
        """bus bandwidth /
        NIC bandwidth per node; required by a preset with an inter_node section""",
        required=_multi_node,
    )
    collective_latency_inter: Sourced | None = knob(
        "collective_latency_inter_us",
        NONNEG,
        """per ring step when
        the ring crosses nodes; required by a preset with an inter_node section""",
        required=_multi_node,
    )
    collective_overhead: Sourced | None = knob(
        "collective_overhead_us",
        NONNEG,
        """fixed per collective call
                                               (a 0-byte collective)""",
    )
    comm_compute_interference: Sourced | None = knob(
        "comm_compute_interference",
        bounded(0.0, 20.0, "seconds added per second of concurrent compute and communication"),
        f"""seconds added per
        second that compute and communication run concurrently: 0 = free overlap (the default), 1 = they
        serialise, > 1 = each slows the other down, as gloo's threads and the compute do on the same CPU
        cores. {_CALIBRATED}""",
    )
    collective_bandwidth_factors: FrozenMap = knob(
        "collective_bandwidth_factor_{}",
        POSITIVE,
        """bus bandwidth of
        this collective relative to all_reduce's (default 1): gloo's all_gather and reduce_scatter run at a
        fraction of its all_reduce""",
        each=FACTOR_COLLECTIVES,
    )
    matmul_by_precision: FrozenMap = knob(
        "matmul_{}",
        FRACTION,
        """matmul efficiency of this peak precision;
                                          matmul applies to the precisions not given""",
        each=PRECISIONS,
    )
    matmul_call_overhead: Sourced | None = knob(
        "matmul_call_overhead_us",
        NONNEG,
        f"""fixed time per
        matmul/convolution call (forward, and each backward gradient) added to kernel_launch: large for oneDNN
        on CPU. {_CALIBRATED}""",
    )
    collective_regimes_intra: RegimeModel | None = knob(
        "collective_regimes_intra",
        Custom(parse_regimes_or_none, lambda v, owner: regimes_to_dict(v), REGIMES_SCHEMA),
        """piecewise alpha-beta costs of collectives inside a node
        (calibrated gloo: bandwidth changes with message size); where a collective has a curve it replaces
        bandwidth x factor, latency and overhead (simdl.collectives.regimes); null: none (a preset that
        extends a calibrated one can drop its regimes this way)""",
    )
    collective_regimes_subgroups: FrozenMap = knob(
        "collective_regimes_subgroups",
        Custom(parse_subgroup_regimes, lambda v, owner: subgroup_regimes_to_dict(v), SUBGROUP_REGIMES_SCHEMA),
        """regime curves of groups smaller than a node, by group size, measured with every such group of the
        node calling at once, as FSDP2's hybrid shard and replicate groups do (calibration/collectives.py,
        scopes sub<d>); a size's curve replaces collective_regimes_intra's for that group size: on a CPU host
        the concurrent groups share cores and memory, and gloo's all-gather copies the whole output whatever
        the group (benchmarks/gloo_group_size_cpu.py)""",
        default=FrozenMap(),
        dump_default=False,
    )
    stream_bandwidth: Sourced | None = knob(
        "stream_bandwidth",
        POSITIVE,
        f"""fraction of the memory bandwidth
        that large streaming tensor ops reach (the optimizer step, FSDP's copy-in/copy-out, DDP's bucket
        copies), not capped at 1: a measured kernel may beat the device file's figure. Default:
        memory_bandwidth. {_CALIBRATED}""",
    )
    stream_call_overhead: Sourced | None = knob(
        "stream_call_overhead_us",
        NONNEG,
        """time per call of such an op
        (per tensor: PyTorch's CPU optimizer loops over tensors one at a time). Default: kernel_launch_us""",
    )
    copy_bandwidth: Sourced | None = knob(
        "copy_bandwidth",
        POSITIVE,
        """fraction of the memory bandwidth a copy
        between two large buffers reaches (FSDP copy-in/out, DDP bucket copies), bytes counted as read +
        written; on CPUs the destination's lines are read before they are written (write-allocate). Default:
        stream_bandwidth""",
    )
    copy_in_step_factor: Sourced | None = knob(
        "copy_in_step_factor",
        bounded(0.5, 50.0, "how many times its idle time a buffer copy takes inside a training step"),
        """CPU ranks whose
        copies share the cores and memory with the rest of the step: how many times its idle time a strategy's
        buffer copy takes inside a step (a profiled ViT-B/32 FSDP step on cpu-local's Xeon ran each unit's 28 MB
        chunk_cat at 0.67 GB/s, against 4-7.5 ms alone). Fitted by `simdl calibrate` from the profiled strategy
        steps (simdl.calibrate.in_step.CopyFit), written into a profile only where
        simdl.calibrate.profile.COPY_FACTOR_FROM_PROFILED_STEPS says. Absent = 1""",
    )
    collective_load_factor: Sourced | None = knob(
        "collective_load_factor",
        _LOAD,
        f"""ranks that compute and
        communicate on the same host cores (CPU, gloo): a collective inside a step is slower than on the idle
        machine its costs were measured on; its latency and bandwidth terms are scaled by this factor.
        {_CALIBRATED} Absent = 1""",
    )
    collective_load_overhead: Sourced | None = knob(
        "collective_load_overhead_us",
        NONNEG,
        f"""added per collective
        call inside a step, with collective_load_factor. {_CALIBRATED} Absent = 0""",
    )
    collective_load_factor_all_reduce: Sourced | None = knob(
        "collective_load_factor_all_reduce",
        _LOAD,
        f"""the
        factor for all_reduce alone (default: collective_load_factor): idle, gloo's all_reduce reaches 2-3x the
        bus bandwidth of its reduce_scatter and all_gather (cpu-local: 1.57 against 0.49 and 0.87 GB/s); in a
        step it loses most of that lead. {_CALIBRATED}""",
    )
    collective_load_half_size: Sourced | None = knob(
        "collective_load_half_size_MiB",
        POSITIVE,
        """message size
        at which the slowdown is half its small-message value: a message of S bytes is slowed by
        1 + (factor - 1) / (1 + S / half_size) (cpu-local's calibration: one 403 MB all-reduce in a step ran near
        its idle speed, 1-67 MB ones at 2-3x). Absent: every size gets the full factor""",
    )
    collective_blocking_factors: FrozenMap = knob(
        "collective_blocking_factor_{}",
        bounded(0.5, 10.0, "how many times its idle time a blocking collective's transfer takes in a step"),
        """collectives
        that hold the training thread (FSDP2 on CPU; simdl.strategies.fsdp.collectives_block): how many times its
        idle time a call's transfer takes in a step, measured from the calls `simdl calibrate` logs
        (simdl.calibrate.in_step); replaces the load factors for such calls""",
        each=BLOCKING_COLLECTIVES,
    )
    collective_blocking_wait: Sourced | None = knob(
        "collective_blocking_wait",
        bounded(0.0, 1.0, "time waiting for peers in blocking calls per second of compute"),
        """time ranks spend in
        blocking calls waiting for a peer still computing, per second of the step's compute (logged waits in
        calibration: 5-16 % of the local step on every model)""",
    )
    compute_jitter: Sourced | None = knob(
        "compute_jitter",
        bounded(0.0, 2.0, "the spread of log(step time), a standard deviation"),
        """robust standard deviation (1.4826 x
        median absolute deviation) of log(step time) of ranks training on their own, all at once
        (simdl.calibrate.jitter); the SimPy engine draws each parameter-server worker's compute per step from a
        mean-one lognormal of this sigma unless --jitter says otherwise. Measured by `simdl calibrate`""",
    )
    memory_bandwidth_by_class: FrozenMap = knob(
        "memory_bandwidth_{}",
        POSITIVE,
        """fraction of the memory
        bandwidth a row of this memory-bound op class (simdl.workload.op_classes.MEMORY_CLASSES) streams at
        instead of memory_bandwidth's; not capped at 1 (a small tensor that stays in cache beats the DRAM
        figure)""",
        each=MEMORY_CLASSES,
    )
    compute_memory_overlap: Sourced | None = knob(
        "compute_memory_overlap",
        bounded(0.0, 1.0, "the fraction of a row's shorter part hidden under its longer part"),
        f"""fraction of a row's
        shorter part (FLOPs or bytes time) hidden under its longer part: 1 = the roofline's max (the default), 0
        = their sum (one CPU core runs a small op's arithmetic and loads in one instruction stream).
        {_CALIBRATED}""",
    )
    call_overhead_by_class: FrozenMap = knob(
        "call_overhead_{}_us",
        NONNEG,
        """fixed cost per call of this
        memory-bound class's row on top of its kernels' launches (a CPU batch norm in training mode has a fixed
        part whatever its size); fitted only for simdl.calibrate.fit.CALL_OVERHEAD_CLASSES. Absent = 0""",
        each=MEMORY_CLASSES,
    )
    conv_weight_grad_bandwidth: Sourced | None = knob(
        "conv_weight_grad_bandwidth",
        POSITIVE,
        f"""fraction of the
        memory bandwidth at which a convolution's backward accumulates its weight gradient once per sample (a
        CPU's backward-weights kernel reduces over the batch image by image): batch x weight bytes per conv row
        on top of its roofline time. {_CALIBRATED} Absent on GPUs (their kernels tile the batch): 0""",
    )

    # Keys a file may give here that are read into another section (schema only; the loader
    # moves them before this section is parsed: simdl.cluster.strategy_sections).
    MOVED_KEYS = {
        "fsdp_unit_overhead_us": (NONNEG.schema("fsdp_unit_overhead_us"), "read as strategies.fsdp.unit_overhead_us")
    }

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


def _parse_efficiency(raw: Mapping[str, Any], where: str, multi_node: bool) -> Efficiency:
    return parse(Efficiency, raw, where, {"multi_node": multi_node})
