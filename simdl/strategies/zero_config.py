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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SimdlError
from .zero_config_keys import ALIASES, KNOWN_TOP, READ_TOP, ZERO_KNOWN
from .zero_config_values import (
    UNKNOWN,
    DeepSpeedConfigWarning,
    bool_value,
    int_value,
    offload_device,
    optimizer_kind,
    precision_setting,
    unknown_keys,
)

__all__ = ["DSConfig", "DeepSpeedConfigWarning", "apply_ds_config", "read_ds_config"]

# The integer sizes of zero_optimization simdl reads, under DeepSpeed's names and aliases.
_SIZE_KEYS = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "prefetch_bucket_size",
    "param_persistence_threshold",
    "max_live_parameters",
)


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
    raw = _load(path, where)
    notes: list[str] = []
    UNKNOWN.clear()
    unknown_keys(raw, KNOWN_TOP, where, "")
    ignored = sorted(k for k in raw if k in KNOWN_TOP and k not in READ_TOP)
    if ignored:
        notes.append(f"DeepSpeed keys read but not modelled: {', '.join(ignored)}")
    zero = raw.get("zero_optimization", {})
    if isinstance(zero, bool):  # the deprecated form: "zero_optimization": true means stage 1
        zero = {"stage": 1 if zero else 0}
    if not isinstance(zero, dict):
        raise SimdlError(f"{where}: zero_optimization must be an object, got {zero!r}")
    unknown_keys(zero, ZERO_KNOWN, where, "zero_optimization.")
    stage = int_value(zero, "stage", where, "zero_optimization.", 0)
    if stage not in (0, 1, 2, 3):
        raise SimdlError(f"{where}: zero_optimization.stage {stage!r} is not a ZeRO stage; accepted: 0, 1, 2, 3")
    opts = _zero_options(zero, stage, where)
    _clipping(raw, where, opts)
    precision = precision_setting(raw, where)
    optimizer = optimizer_kind(raw, where, notes)
    block = raw.get("optimizer") or {}
    params = block["params"] if isinstance(block.get("params"), dict) else {}
    if block.get("type", "").lower() in ("adam", "adamw") and not params.get("torch_adam", False):
        opts["fused_adam"] = True  # engine.py _configure_basic_optimizer: FusedAdam (DeepSpeedCPUAdam if offloaded)
    if UNKNOWN:
        notes.append(f"not DeepSpeed keys, ignored: {', '.join(UNKNOWN)}")
    return DSConfig(
        path=where,
        strategy=f"zero{stage}",
        options=opts,
        batch_size=int_value(raw, "train_micro_batch_size_per_gpu", where, "", None, minimum=1),
        grad_accumulation=int_value(raw, "gradient_accumulation_steps", where, "", None, minimum=1),
        train_batch_size=int_value(raw, "train_batch_size", where, "", None, minimum=1),
        precision=precision,
        optimizer=optimizer,
        notes=tuple(notes),
    )


def _load(path: str | Path, where: str) -> dict:
    """The file's JSON object; a file that cannot be read, is not UTF-8 or not a JSON object is refused."""
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
    return raw


def _zero_options(zero: dict, stage: int, where: str) -> dict[str, Any]:
    """The zero family's predict keywords that zero_optimization sets at this stage."""
    opts: dict[str, Any] = {}
    for key in _SIZE_KEYS:
        v = int_value(zero, key, where, "zero_optimization.", None, minimum=0)
        if v is not None and (stage == 3 or not ALIASES.get(key, key).startswith("stage3_")):
            opts[ALIASES.get(key, key)] = v
    for key in ("overlap_comm", "contiguous_gradients"):
        v = bool_value(zero, key, where, "zero_optimization.")
        if v is not None:
            opts[key] = v
    for key in ("offload_optimizer", "offload_param"):
        device = offload_device(zero, key, where)
        if device == "cpu" and (stage == 0 or (key == "offload_param" and stage != 3)):
            raise SimdlError(
                f"{where}: zero_optimization.{key} needs ZeRO stage {'3' if key == 'offload_param' else '1-3'}; "
                f"the config has stage {stage}"
            )
        if device == "cpu":
            opts[key] = "cpu"
    # Deprecated booleans (config.py: cpu_offload -> offload_optimizer, cpu_offload_param -> offload_param).
    for old, new in (("cpu_offload", "offload_optimizer"), ("cpu_offload_param", "offload_param")):
        if bool_value(zero, old, where, "zero_optimization.") and new not in opts:
            if stage == 0 or (new == "offload_param" and stage != 3):
                raise SimdlError(f"{where}: zero_optimization.{old} needs a higher ZeRO stage than {stage}")
            opts[new] = "cpu"
    return opts


def _clipping(raw: dict, where: str, opts: dict[str, Any]) -> None:
    """gradient_clipping into ``opts`` when above 0 (DeepSpeed's default 0 clips nothing: runtime/constants.py)."""
    clip = raw.get("gradient_clipping")
    if clip is not None and clip != "auto":
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0:
            raise SimdlError(f"{where}: gradient_clipping {clip!r} must be a number >= 0")
        if clip > 0:
            opts["gradient_clipping"] = float(clip)


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
