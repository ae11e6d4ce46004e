"""Read a DeepSpeed ds_config.json into a ZeRO strategy, its options and the workload's settings.

The keys and their defaults are DeepSpeed 0.16.5's: deepspeed/runtime/zero/config.py
(DeepSpeedZeroConfig: stage 0, reduce_bucket_size / allgather_bucket_size 5e8, overlap_comm
None -> stage == 3, contiguous_gradients True, stage3_prefetch_bucket_size 5e7,
stage3_param_persistence_threshold 1e5, stage3_max_live_parameters 1e9),
runtime/zero/offload_config.py (offload_* device "none"), runtime/constants.py (fp16 / bf16
``enabled`` False, train_micro_batch_size_per_gpu and gradient_accumulation_steps None,
gradient_clipping 0.). ``"auto"`` (the Hugging Face integration's placeholder) counts as not
given. A key DeepSpeed documents but simdl does not model is listed in the notes; a key
DeepSpeed does not know gets a warning naming it; a value of the wrong type or range is a
one-line :class:`SimdlError`.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SimdlError

# What simdl reads (the rest of DeepSpeed's keys are accepted and listed as not modelled).
_READ_TOP = (
    "zero_optimization",
    "fp16",
    "bf16",
    "bfloat16",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "train_batch_size",
    "optimizer",
)
# runtime/constants.py and runtime/config.py, 0.16.5: top-level keys DeepSpeed reads.
_KNOWN_TOP = frozenset(
    _READ_TOP
    + (
        "scheduler",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "steps_per_print",
        "sparse_gradients",
        "amp",
        "graph_harvesting",
        "communication_data_type",
        "seq_parallel_communication_data_type",
        "prescale_gradients",
        "gradient_predivide_factor",
        "disable_allgather",
        "dump_state",
        "wall_clock_breakdown",
        "memory_breakdown",
        "eigenvalue",
        "progressive_layer_drop",
        "checkpoint",
        "data_types",
        "dataloader_drop_last",
        "sparse_attention",
        "activation_checkpointing",
        "flops_profiler",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comms_logger",
        "monitor_config",
        "elasticity",
        "aio",
        "autotuning",
        "compression_training",
        "data_efficiency",
        "pipeline",
        "curriculum_learning",
        "quantize_training",
        "nebula",
        "hybrid_engine",
        "compile",
        "timers",
        "weight_quantization",
        "zero_quantized_weights",
        "use_data_before_expert_parallelism",
        "torch_autocast",
    )
)
_ZERO_READ = (
    "stage",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "overlap_comm",
    "contiguous_gradients",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "offload_optimizer",
    "offload_param",
)
# runtime/zero/config.py DeepSpeedZeroConfig fields (and aliases), 0.16.5.
_ZERO_KNOWN = frozenset(
    _ZERO_READ
    + (
        "reduce_scatter",
        "use_multi_rank_bucket_allreduce",
        "allgather_partitions",
        "load_from_fp32_weights",
        "elastic_checkpoint",
        "sub_group_size",
        "cpu_offload_param",
        "cpu_offload_use_pin_memory",
        "cpu_offload",
        "stage3_model_persistence_threshold",
        "stage3_max_reuse_distance",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold",
        "stage3_use_all_reduce_for_fetch_params",
        "stage3_gather_fp16_weights_on_model_save",
        "ignore_unused_parameters",
        "legacy_stage1",
        "round_robin_gradients",
        "zero_hpz_partition_size",
        "zero_quantized_weights",
        "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients",
        "zeropp_loco_param",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "memory_efficient_linear",
        "pipeline_loading_checkpoint",
        "override_module_apply",
        "log_trace_cache_warnings",
        "prefetch_bucket_size",
        "param_persistence_threshold",
        "max_live_parameters",
    )
)
_ALIASES = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
}
_OFFLOAD_KNOWN = frozenset(
    (
        "device",
        "nvme_path",
        "buffer_count",
        "buffer_size",
        "max_in_cpu",
        "pin_memory",
        "pipeline_read",
        "pipeline_write",
        "fast_init",
        "ratio",
    )
)
_PRECISION_KNOWN = frozenset(
    (
        "enabled",
        "loss_scale",
        "auto_cast",
        "initial_scale_power",
        "loss_scale_window",
        "hysteresis",
        "consecutive_hysteresis",
        "min_loss_scale",
        "fp16_master_weights_and_grads",
        "immediate_grad_update",
        "type",
    )
)
# DeepSpeed optimizer types (runtime/config.py DEEPSPEED_OPTIMIZERS) simdl prices as Adam.
_ADAM_TYPES = ("adam", "adamw", "fusedadam", "cpuadam", "onebitadam", "zerooneadam")


class DeepSpeedConfigWarning(UserWarning):
    """A ds_config.json key DeepSpeed does not know."""


@dataclass(frozen=True)
class DSConfig:
    """What a ds_config.json sets: the strategy, its options, the workload's settings."""

    path: str
    strategy: str
    options: dict[str, Any] = field(default_factory=dict)  # predict keywords of the zero family
    batch_size: int | None = None
    grad_accumulation: int | None = None
    train_batch_size: int | None = None
    precision: str | None = None
    optimizer: str | None = None
    notes: tuple[str, ...] = ()

    def accumulation(self, gpus: int) -> int | None:
        """gradient_accumulation_steps, or train_batch_size / (micro batch x GPUs) when only
        those two are given (runtime/config.py _set_batch_related_parameters)."""
        if self.grad_accumulation is not None or self.batch_size is None or self.train_batch_size is None:
            return self.grad_accumulation
        if self.train_batch_size % (self.batch_size * gpus):
            raise SimdlError(
                f"{self.path}: train_batch_size {self.train_batch_size} is not a multiple of "
                f"train_micro_batch_size_per_gpu {self.batch_size} x {gpus} GPUs"
            )
        return self.train_batch_size // (self.batch_size * gpus)

    def micro_batch(self, gpus: int) -> int | None:
        """train_micro_batch_size_per_gpu, or train_batch_size / (gas x GPUs) as DeepSpeed
        derives it (runtime/config.py _set_batch_related_parameters)."""
        gas = self.accumulation(gpus) or 1
        if self.batch_size is not None:
            if self.train_batch_size is not None and self.train_batch_size != self.batch_size * gas * gpus:
                raise SimdlError(
                    f"{self.path}: train_batch_size {self.train_batch_size} != "
                    f"train_micro_batch_size_per_gpu {self.batch_size} x gradient_accumulation_steps "
                    f"{gas} x {gpus} GPUs"
                )
            return self.batch_size
        if self.train_batch_size is None:
            return None
        if self.train_batch_size % (gas * gpus):
            raise SimdlError(
                f"{self.path}: train_batch_size {self.train_batch_size} is not a multiple of "
                f"gradient_accumulation_steps {gas} x {gpus} GPUs"
            )
        return self.train_batch_size // (gas * gpus)


def read_ds_config(path: str | Path) -> DSConfig:
    """Parse and check one ds_config.json (see the module docstring)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SimdlError(f"--deepspeed-config {where!r}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise SimdlError(
            f"--deepspeed-config {where}: not UTF-8 text (byte {err.start}); accepted: a JSON file"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise SimdlError(
            f"--deepspeed-config {where}: not JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    if not isinstance(raw, dict):
        raise SimdlError(f"--deepspeed-config {where}: must be a JSON object, got {type(raw).__name__}")
    notes: list[str] = []
    _UNKNOWN.clear()
    _unknown(raw, _KNOWN_TOP, where, "")
    ignored = sorted(k for k in raw if k in _KNOWN_TOP and k not in _READ_TOP)
    if ignored:
        notes.append(f"DeepSpeed keys read but not modelled: {', '.join(ignored)}")
    zero = raw.get("zero_optimization", {})
    if isinstance(zero, bool):  # the deprecated form: "zero_optimization": true means stage 1
        zero = {"stage": 1 if zero else 0}
    if not isinstance(zero, dict):
        raise SimdlError(f"{where}: zero_optimization must be an object, got {zero!r}")
    _unknown(zero, _ZERO_KNOWN, where, "zero_optimization.")
    stage = _int(zero, "stage", where, "zero_optimization.", 0)
    if stage not in (0, 1, 2, 3):
        raise SimdlError(f"{where}: zero_optimization.stage {stage!r} is not a ZeRO stage; accepted: 0, 1, 2, 3")
    opts: dict[str, Any] = {}
    for key in (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
        "prefetch_bucket_size",
        "param_persistence_threshold",
        "max_live_parameters",
    ):
        v = _int(zero, key, where, "zero_optimization.", None, minimum=0)
        if v is not None and (stage == 3 or not _ALIASES.get(key, key).startswith("stage3_")):
            opts[_ALIASES.get(key, key)] = v
    for key in ("overlap_comm", "contiguous_gradients"):
        v = _bool(zero, key, where, "zero_optimization.")
        if v is not None:
            opts[key] = v
    for key in ("offload_optimizer", "offload_param"):
        device = _offload(zero, key, where)
        if device == "cpu" and (stage == 0 or (key == "offload_param" and stage != 3)):
            raise SimdlError(
                f"{where}: zero_optimization.{key} needs ZeRO stage {'3' if key == 'offload_param' else '1-3'}; "
                f"the config has stage {stage}"
            )
        if device == "cpu":
            opts[key] = "cpu"
    # Deprecated booleans (config.py: cpu_offload -> offload_optimizer, cpu_offload_param -> offload_param).
    for old, new in (("cpu_offload", "offload_optimizer"), ("cpu_offload_param", "offload_param")):
        if _bool(zero, old, where, "zero_optimization.") and new not in opts:
            if stage == 0 or (new == "offload_param" and stage != 3):
                raise SimdlError(f"{where}: zero_optimization.{old} needs a higher ZeRO stage than {stage}")
            opts[new] = "cpu"
    clip = raw.get("gradient_clipping")
    if clip is not None and clip != "auto":
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0:
            raise SimdlError(f"{where}: gradient_clipping {clip!r} must be a number >= 0")
        if clip > 0:
            opts["gradient_clipping"] = float(clip)
    precision = _precision(raw, where)
    optimizer = _optimizer(raw, where, notes)
    block = raw.get("optimizer") or {}
    params = block["params"] if isinstance(block.get("params"), dict) else {}
    if block.get("type", "").lower() in ("adam", "adamw") and not params.get("torch_adam", False):
        opts["fused_adam"] = True  # engine.py _configure_basic_optimizer: FusedAdam (DeepSpeedCPUAdam if offloaded)
    if _UNKNOWN:
        notes.append(f"not DeepSpeed keys, ignored: {', '.join(_UNKNOWN)}")
    return DSConfig(
        path=where,
        strategy=f"zero{stage}",
        options=opts,
        batch_size=_int(raw, "train_micro_batch_size_per_gpu", where, "", None, minimum=1),
        grad_accumulation=_int(raw, "gradient_accumulation_steps", where, "", None, minimum=1),
        train_batch_size=_int(raw, "train_batch_size", where, "", None, minimum=1),
        precision=precision,
        optimizer=optimizer,
        notes=tuple(notes),
    )


_UNKNOWN: list[str] = []  # the keys the current read_ds_config call warned about


def _unknown(block: dict, known: frozenset, where: str, prefix: str) -> None:
    for key in block:
        if key not in known:
            _UNKNOWN.append(f"{prefix}{key}")
            warnings.warn(
                f"{where}: {prefix}{key} is not a DeepSpeed 0.16.5 key; ignored", DeepSpeedConfigWarning, stacklevel=3
            )


def _int(block: dict, key: str, where: str, prefix: str, default, minimum: int | None = None):
    v = block.get(key, default)
    if v is None or v == "auto":
        return default
    # JSON writes 5e8 as a float; pydantic's int field takes a float with no fraction (config.py pp_int).
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise SimdlError(f"{where}: {prefix}{key} {v!r} must be an integer")
    if minimum is not None and v < minimum:
        raise SimdlError(f"{where}: {prefix}{key} {v!r} must be >= {minimum}")
    return v


def _bool(block: dict, key: str, where: str, prefix: str):
    v = block.get(key)
    if v is None or v == "auto":
        return None
    if not isinstance(v, bool):
        raise SimdlError(f"{where}: {prefix}{key} {v!r} must be true or false")
    return v


def _offload(zero: dict, key: str, where: str) -> str:
    block = zero.get(key)
    if block is None:
        return "none"
    if not isinstance(block, dict):
        raise SimdlError(f"{where}: zero_optimization.{key} must be an object with a 'device', got {block!r}")
    _unknown(block, _OFFLOAD_KNOWN, where, f"zero_optimization.{key}.")
    device = block.get("device", "none")  # offload_config.py: device = "none"
    if device not in ("none", "cpu"):
        hint = " (NVMe offload is not modelled)" if device == "nvme" else ""
        raise SimdlError(
            f"{where}: zero_optimization.{key}.device {device!r} is not accepted{hint}; accepted: none, cpu"
        )
    return device


def _precision(raw: dict, where: str) -> str | None:
    enabled = {}
    for key in ("fp16", "bf16", "bfloat16"):
        block = raw.get(key)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise SimdlError(f'{where}: {key} must be an object like {{"enabled": true}}, got {block!r}')
        _unknown(block, _PRECISION_KNOWN, where, f"{key}.")
        on = block.get("enabled", False)  # constants.py FP16_ENABLED_DEFAULT / BFLOAT16_ENABLED_DEFAULT = False
        if on == "auto":
            continue
        if not isinstance(on, bool):
            raise SimdlError(f"{where}: {key}.enabled {on!r} must be true or false")
        enabled["bf16" if key == "bfloat16" else key] = on
    if enabled.get("fp16") and enabled.get("bf16"):
        raise SimdlError(f"{where}: fp16 and bf16 are both enabled; DeepSpeed accepts one of them")
    if enabled.get("fp16"):
        return "fp16-amp"
    if enabled.get("bf16"):
        return "bf16"
    return "fp32" if enabled else None


def _optimizer(raw: dict, where: str, notes: list[str]) -> str | None:
    block = raw.get("optimizer")
    if block is None:
        return None
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise SimdlError(f"{where}: optimizer must be an object with a string 'type', got {block!r}")
    kind = block["type"].lower()
    if kind in _ADAM_TYPES:
        return "adam"
    if kind == "sgd":
        params = block.get("params") or {}
        return "momentum" if isinstance(params, dict) and params.get("momentum", 0) else "sgd"
    notes.append(f"optimizer type {block['type']!r} is not modelled; simdl's optimizer is used")
    return None


def apply_ds_config(
    path, engine_options: dict, *, gpus, strategy, default_strategy, batch_size, grad_accumulation, precision, optimizer
):
    """predict's settings with a ds_config.json applied: (config, strategy, batch, gas,
    precision, optimizer); the stage's options go into ``engine_options`` (predict's strategy
    keywords). A setting given beside the file must agree with it."""
    ds = read_ds_config(path)
    if strategy not in (default_strategy, ds.strategy):
        raise SimdlError(
            f"--strategy {strategy!r} disagrees with {ds.path} (ZeRO stage {ds.strategy[-1]}: "
            f"{ds.strategy}); give one of them"
        )

    def agree(name: str, given, from_file, default=None):
        if from_file is None:
            return given
        if given not in (None, default, from_file):
            raise SimdlError(
                f"--{name.replace('_', '-')} {given!r} disagrees with {ds.path} ({from_file!r}); give one of them"
            )
        return from_file

    for key, value in ds.options.items():
        engine_options[key] = agree(key, engine_options.get(key), value)
    counted = isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1
    micro = ds.micro_batch(gpus) if counted else ds.batch_size
    gas = ds.accumulation(gpus) if counted else ds.grad_accumulation
    return (
        ds,
        ds.strategy,
        agree("batch_size", batch_size, micro),
        agree("grad_accumulation", grad_accumulation, gas, 1),
        agree("precision", precision, ds.precision),
        agree("optimizer", optimizer, ds.optimizer),
    )
