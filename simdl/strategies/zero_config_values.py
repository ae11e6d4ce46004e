"""Typed reads of ds_config.json values, each checked as DeepSpeed 0.16.5's pydantic config
checks it; a value of the wrong type or range is a one-line SimdlError naming the key, an
unknown key a :class:`DeepSpeedConfigWarning` (simdl.strategies.zero_config).
"""

from __future__ import annotations

import math
import warnings

from ..errors import SimdlError
from .zero_config_keys import ADAM_TYPES, OFFLOAD_KNOWN, PRECISION_KNOWN


class DeepSpeedConfigWarning(UserWarning):
    """A ds_config.json key DeepSpeed does not know."""


UNKNOWN: list[str] = []  # the keys the current read_ds_config call warned about


def unknown_keys(block: dict, known: frozenset, where: str, prefix: str) -> None:
    for key in block:
        if key not in known:
            UNKNOWN.append(f"{prefix}{key}")
            warnings.warn(
                f"{where}: {prefix}{key} is not a DeepSpeed 0.16.5 or 0.19.8 key; ignored",
                DeepSpeedConfigWarning,
                stacklevel=3,
            )


def int_value(block: dict, key: str, where: str, prefix: str, default, minimum: int | None = None):
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


def bool_value(block: dict, key: str, where: str, prefix: str):
    v = block.get(key)
    if v is None or v == "auto":
        return None
    if not isinstance(v, bool):
        raise SimdlError(f"{where}: {prefix}{key} {v!r} must be true or false")
    return v


def offload_device(zero: dict, key: str, where: str) -> str:
    block = zero.get(key)
    if block is None:
        return "none"
    if not isinstance(block, dict):
        raise SimdlError(f"{where}: zero_optimization.{key} must be an object with a 'device', got {block!r}")
    unknown_keys(block, OFFLOAD_KNOWN, where, f"zero_optimization.{key}.")
    device = block.get("device", "none")  # offload_config.py: device = "none"
    if device not in ("none", "cpu"):
        hint = " (NVMe offload is not modelled)" if device == "nvme" else ""
        raise SimdlError(
            f"{where}: zero_optimization.{key}.device {device!r} is not accepted{hint}; accepted: none, cpu"
        )
    return device


def precision_setting(raw: dict, where: str) -> str | None:
    enabled = {}
    for key in ("fp16", "bf16", "bfloat16"):
        block = raw.get(key)
        if block is None:
            continue
        if not isinstance(block, dict):
            raise SimdlError(f'{where}: {key} must be an object like {{"enabled": true}}, got {block!r}')
        unknown_keys(block, PRECISION_KNOWN, where, f"{key}.")
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


def optimizer_kind(raw: dict, where: str, notes: list[str]) -> str | None:
    block = raw.get("optimizer")
    if block is None:
        return None
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise SimdlError(f"{where}: optimizer must be an object with a string 'type', got {block!r}")
    kind = block["type"].lower()
    if kind in ADAM_TYPES:
        return "adam"
    if kind == "sgd":
        params = block.get("params") or {}
        return "momentum" if isinstance(params, dict) and params.get("momentum", 0) else "sgd"
    notes.append(f"optimizer type {block['type']!r} is not modelled; simdl's optimizer is used")
    return None
