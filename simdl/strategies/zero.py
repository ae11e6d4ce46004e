"""DeepSpeed ZeRO stages 0-3 (``zero0`` .. ``zero3``), as DeepSpeed 0.16.5 runs them.

A stage is a strategy of its own: what it keeps, where it reduces and when are DeepSpeed's,
not FSDP's (deepspeed/runtime/engine.py, runtime/zero/stage_1_and_2.py, runtime/zero/stage3.py,
runtime/fp16/fused_optimizer.py, runtime/bf16_optimizer.py; microsoft/DeepSpeed 0.16.5):

  zero0  no partitioning. engine.allreduce_gradients after backward: buffered_allreduce_fallback
         flattens the gradients in buckets of MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements
         (engine.py) and all-reduces each. fp16 wraps the optimizer in FP16_Optimizer (a full
         fp32 master copy, fp32 flat gradients at the step); bf16 in BF16_Optimizer (a full fp32
         gradient accumulation buffer, an fp32 master *partition*, a bf16 all-gather after the step).
  zero1  optimizer state and fp32 master partitioned. Gradients are reduced after backward
         (reduce_gradients) in ipg buckets of ``reduce_bucket_size`` elements, one all-reduce per
         bucket (use_multi_rank_bucket_allreduce=True), unless overlap_comm installs the hooks.
  zero2  gradients partitioned too: backward hooks copy each gradient into the ipg bucket and
         reduce a full bucket inside backward (reduction_stream with overlap_comm, else the
         compute stream); the rank keeps only its partition (grads_in_partition).
  zero3  parameters partitioned too: each module's parameters are all-gathered before its
         forward and again before its backward (prefetching ``stage3_prefetch_bucket_size``
         elements ahead), except those of at most ``stage3_param_persistence_threshold``
         elements, kept whole; gradients reduce-scattered per ipg bucket on
         reduce_and_partition_stream.

After the step stages 1-2 (and bf16 stage 0) all-gather the updated 16-bit (or fp32) flat
parameters (runtime/utils.py all_gather_dp_groups: one all_gather_into_tensor per group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ..errors import SimdlError
from .options import check_fields
from .plan import PlanFacts
from .registry import PredictKey, StrategySpec, register
from .zero_config_keys import ZERO_READ

Offload = Literal["none", "cpu"]

# deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig, 0.16.5): reduce_bucket_size and
# allgather_bucket_size = Field(pp_int(5e8)); stage3_prefetch_bucket_size 5e7;
# stage3_param_persistence_threshold 1e5; stage3_max_live_parameters 1e9; contiguous_gradients
# True; overlap_comm None, set by overlap_comm_valid to (stage == 3). 0.19.8 (the version
# validate/ runs) has the same defaults, and engine.py the same MEMORY_OPT_ALLREDUCE_SIZE.
REDUCE_BUCKET_ELEMENTS = int(5e8)
ALLGATHER_BUCKET_ELEMENTS = int(5e8)
PREFETCH_BUCKET_ELEMENTS = int(5e7)
PERSISTENCE_THRESHOLD_ELEMENTS = int(1e5)
MAX_LIVE_PARAMETERS = int(1e9)
# deepspeed/runtime/engine.py: MEMORY_OPT_ALLREDUCE_SIZE = 500000000, the bucket of
# buffered_allreduce_fallback (stage 0), independent of reduce_bucket_size.
STAGE0_ALLREDUCE_ELEMENTS = 500_000_000
# The reduce and allgather buckets of the ZeRO steps `simdl calibrate` runs
# (calibration/zero_steps.py) and predicts: 5e7 elements, 200 MB of fp32 per bucket on each CPU
# rank instead of DeepSpeed's 2 GB (validate/deepspeed_cpu.py measures with the same size).
CALIBRATION_BUCKET_ELEMENTS = 50_000_000


@dataclass(frozen=True)
class ZeROOptions:
    """The zero_optimization block of a ds_config.json (DeepSpeedZeroConfig), plus
    gradient_clipping (runtime/constants.py GRADIENT_CLIPPING_DEFAULT = 0.)."""

    reduce_bucket_size: int = REDUCE_BUCKET_ELEMENTS
    """Elements reduced at a time; the ipg bucket holds this many elements (stage_1_and_2.py backward)."""
    allgather_bucket_size: int = ALLGATHER_BUCKET_ELEMENTS
    """Elements all-gathered at a time after the step; unused where all_gather_into_tensor exists."""
    overlap_comm: Optional[bool] = None
    """Reduce on a side stream during backward; None = DeepSpeed's default, True for stage 3 only."""
    contiguous_gradients: bool = True
    """Copy gradients into the ipg bucket (and the partition buffer) as they are produced."""
    stage3_prefetch_bucket_size: int = PREFETCH_BUCKET_ELEMENTS
    """Stage 3: parameter elements gathered ahead of the module that needs them."""
    stage3_param_persistence_threshold: int = PERSISTENCE_THRESHOLD_ELEMENTS
    """Stage 3: parameters of at most this many elements are kept whole on every rank."""
    stage3_max_live_parameters: int = MAX_LIVE_PARAMETERS
    """Stage 3: gathered parameter elements allowed alive at once."""
    offload_optimizer: Offload = "none"
    """offload_optimizer.device: ``cpu`` keeps the fp32 master, its gradients and the optimizer
    state in host memory and steps there (stages 1-3; nvme is not modelled)."""
    offload_param: Offload = "none"
    """offload_param.device (stage 3 only): ``cpu`` keeps the parameter partition in host memory."""
    gradient_clipping: float = 0.0
    """Clip the global gradient norm to this (0: no clipping, DeepSpeed's default)."""
    fused_adam: bool = False
    """The ds_config names an Adam/AdamW optimizer: DeepSpeed builds FusedAdam on the GPU
    (engine.py _configure_basic_optimizer) unless torch_adam is set or the optimizer is offloaded."""

    def __post_init__(self) -> None:
        check_fields(self)
        for name in (
            "reduce_bucket_size",
            "allgather_bucket_size",
            "stage3_prefetch_bucket_size",
            "stage3_param_persistence_threshold",
            "stage3_max_live_parameters",
        ):
            if getattr(self, name) < 0:  # DeepSpeedZeroConfig: Field(..., ge=0)
                raise SimdlError(f"{name} {getattr(self, name)!r} must be an integer >= 0 (elements)")
        if self.reduce_bucket_size == 0:
            raise SimdlError("reduce_bucket_size 0 must be >= 1 element (DeepSpeed would never fill the bucket)")
        if self.gradient_clipping < 0:
            raise SimdlError(f"gradient_clipping {self.gradient_clipping!r} must be >= 0")

    def overlap(self, stage: int) -> bool:
        """overlap_comm as DeepSpeed resolves it (config.py overlap_comm_valid)."""
        return self.overlap_comm if self.overlap_comm is not None else stage == 3


@dataclass(frozen=True)
class Buffer:
    """One buffer DeepSpeed allocates on a rank: its name, memory category, bytes and when it lives.

    life: ``model`` (from initialisation on), ``backward`` (from backward's start to the
    epilogue), ``first_reduce`` (from the first bucket's reduce to the end of the step),
    ``reduce_each`` (while each bucket is reduced), ``reduce`` (stage 0's one flattened bucket after
    backward), ``step`` (during the optimizer step only), ``host`` (host memory, not the GPU).
    """

    name: str
    category: str
    bytes: float
    life: str


@dataclass(frozen=True)
class ZeROFacts(PlanFacts):
    stage: int = 0
    world: int = 1  # data-parallel ranks the partitions are spread over
    elem_bytes: int = 4  # bytes per element of the model's parameters and gradients (fp32 / 16-bit)
    loss_scaling: bool = False  # fp16: dynamic loss scale with an overflow check per step
    fused_adam: bool = False  # the step is DeepSpeed's FusedAdam kernel (no foreach scratch)
    overlap_comm: bool = False
    contiguous_gradients: bool = True
    buckets: int = 0  # gradient reduction buckets
    bucket_elements: tuple[int, ...] = ()  # elements of each bucket, in reduction order
    bucket_ready_rows: tuple[int, ...] = ()  # table row after whose backward each bucket is reduced
    fetch_modules: int = 0  # stage 3: modules whose parameters are gathered
    persistent_elements: int = 0  # stage 3: elements of the parameters kept whole
    persistence_threshold: int = 0  # stage 3: stage3_param_persistence_threshold
    prefetch_elements: int = 0  # stage 3: stage3_prefetch_bucket_size
    max_live_elements: int = 0  # stage 3: stage3_max_live_parameters
    buffers: tuple[Buffer, ...] = ()  # every buffer DeepSpeed allocates, per rank
    host_bytes: float = 0.0  # host memory of the offloaded optimizer, per rank
    pcie_bytes: float = 0.0  # bytes each rank moves over PCIe per step (offload)


def stage_of(name: str) -> int:
    return int(name[-1])


def _timeline(workload, plan, options):
    from .zero_memory import zero_timeline

    return zero_timeline(workload, plan, options)


def _build(workload, cluster, config):
    from .zero_plan import build_plan

    return build_plan(workload, cluster, config)


def _echo(config, plan) -> dict:
    f = plan.facts
    out = {
        "zero_stage": f.stage,
        "reduce_bucket_size": config.reduce_bucket_size,
        "overlap_comm": f.overlap_comm,
        "contiguous_gradients": f.contiguous_gradients,
        "zero_buckets": f.buckets,
        "offload_optimizer": config.offload_optimizer,
        "gradient_clipping": config.gradient_clipping,
        "loss_scaling": f.loss_scaling,
        "buffers_bytes": {b.name: b.bytes for b in f.buffers if b.life != "host"},
    }
    if f.stage == 3:
        out.update(
            stage3_prefetch_bucket_size=config.stage3_prefetch_bucket_size,
            stage3_param_persistence_threshold=config.stage3_param_persistence_threshold,
            stage3_fetch_modules=f.fetch_modules,
            stage3_persistent_elements=f.persistent_elements,
            offload_param=config.offload_param,
        )
    if f.host_bytes:
        out.update(
            host_memory_bytes=f.host_bytes,
            pcie_bytes_per_iteration=f.pcie_bytes,
            host_buffers_bytes={b.name: b.bytes for b in f.buffers if b.life == "host"},
        )
    return out


# The stage's keywords: the zero_optimization keys simdl reads (the stage itself is the
# strategy's name), the top-level gradient_clipping, and whether the step is FusedAdam.
_OWN = tuple(k for k in ZERO_READ if k != "stage") + ("gradient_clipping", "fused_adam")
_NAMES = ("zero0", "zero1", "zero2", "zero3")
_REASON = "DeepSpeed's default (deepspeed/runtime/zero/config.py, the same in 0.16.5 and 0.19.8)"

SPEC = register(
    StrategySpec(
        family="zero",
        names=_NAMES,
        options=ZeROOptions,
        build_plan=_build,
        memory_timeline=_timeline,
        predict_keys={
            **{k: PredictKey(k, names=_NAMES) for k in _OWN},
            "reduce_bucket_size": PredictKey("reduce_bucket_size", names=_NAMES, default_reason=_REASON + ": 5e8"),
            "overlap_comm": PredictKey(
                "overlap_comm", names=_NAMES, default_reason=_REASON + ": overlap_comm_valid sets it to (stage == 3)"
            ),
            "stage3_prefetch_bucket_size": PredictKey(
                "stage3_prefetch_bucket_size", names=("zero3",), default_reason=_REASON + ": 5e7"
            ),
            "stage3_param_persistence_threshold": PredictKey(
                "stage3_param_persistence_threshold", names=("zero3",), default_reason=_REASON + ": 1e5"
            ),
            "stage3_max_live_parameters": PredictKey("stage3_max_live_parameters", names=("zero3",)),
            "offload_optimizer": PredictKey("offload_optimizer", names=("zero1", "zero2", "zero3")),
            "offload_param": PredictKey("offload_param", names=("zero3",)),
        },
        labels={n: (n, {}) for n in _NAMES},
        # Not among recommend's default candidates (they stay PyTorch's own wrappers); named, as
        # recommend(strategies=["zero1", ...]) or --strategy zero1,..., every stage is ranked.
        variants=lambda v: (),
        echo=_echo,
        # Every stage runs its collectives on the one data-parallel process group that
        # deepspeed.initialize uses (deepspeed/runtime/engine.py, the default dp group).
        communicators=lambda plan: 1,
        calibration_step=lambda options: {"reduce_bucket_size": CALIBRATION_BUCKET_ELEMENTS},
    )
)
