"""``PYTORCH_CUDA_ALLOC_CONF`` as the user writes it, for the caching allocator model.

Syntax (c10/core/AllocatorConfig.cpp, ``ConfigTokenizer``): ``key:value`` pairs separated
by commas. The keys the model implements (:class:`.allocator.AllocatorConfig`):

* ``expandable_segments``: ``True`` or ``False``.
* ``max_split_size_mb``: an integer >= 20 (``kLargeBuffer`` / 1 MiB;
  ``AcceleratorAllocatorConfig::parseMaxSplitSize`` rejects smaller values).
* ``roundup_power2_divisions``: a power of two (the single-value form;
  ``parseRoundUpPower2Divisions`` checks the power of two).

Any other key, or a bad value, is a :class:`~simdl.errors.SimdlError` naming what is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import SimdlError
from .allocator import AllocatorConfig

ENV_VAR = "PYTORCH_CUDA_ALLOC_CONF"
KEYS = ("expandable_segments", "max_split_size_mb", "roundup_power2_divisions")
_MIN_SPLIT_MB = 20  # kLargeBuffer (20 MiB) in MiB, CUDACachingAllocator.cpp
_MiB = 1024 * 1024


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise SimdlError(f"allocator option {key}:{value!r} is not an integer") from None


def parse_alloc_conf(text: str) -> AllocatorConfig:
    """An :class:`AllocatorConfig` from ``PYTORCH_CUDA_ALLOC_CONF`` syntax."""
    fields: dict[str, int | bool] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        key, sep, value = (s.strip() for s in item.partition(":"))
        if key not in KEYS:
            raise SimdlError(f"allocator option {key!r} is not modelled; accepted: {', '.join(KEYS)}")
        if not sep or not value:
            raise SimdlError(f"allocator option {key!r} needs a value ({key}:VALUE)")
        if key == "expandable_segments":
            if value not in ("True", "False"):
                raise SimdlError(f"expandable_segments:{value!r}: accepted values are True and False")
            fields["expandable_segments"] = value == "True"
        elif key == "max_split_size_mb":
            mb = _int(key, value)
            if mb < _MIN_SPLIT_MB:
                raise SimdlError(
                    f"max_split_size_mb:{mb} is too small: accepted values are integers >= {_MIN_SPLIT_MB}"
                )
            fields["max_split_size_bytes"] = mb * _MiB
        else:
            div = _int(key, value)
            if div < 1 or div & (div - 1):
                raise SimdlError(f"roundup_power2_divisions:{div}: accepted values are powers of two (1, 2, 4, ...)")
            fields["roundup_power2_divisions"] = div
    return AllocatorConfig(**fields)  # type: ignore[arg-type]


def alloc_conf_echo(
    flag: str | None, environ: Mapping[str, str] | None = None
) -> tuple[AllocatorConfig | None, str, str]:
    """(the allocator options, their text, where they came from: ``flag``, ``env``
    (PYTORCH_CUDA_ALLOC_CONF) or ``default``), in :func:`resolve_alloc_conf`'s order."""
    env = os.environ if environ is None else environ
    config, _ = resolve_alloc_conf(flag, env)
    if flag is not None:
        return config, flag, "flag"
    if env.get(ENV_VAR):
        return config, env[ENV_VAR], "env"
    return config, "", "default"


def resolve_alloc_conf(
    flag: str | None, environ: Mapping[str, str] | None = None
) -> tuple[AllocatorConfig | None, str]:
    """The allocator options and where they came from: the flag if given, else the
    ``PYTORCH_CUDA_ALLOC_CONF`` environment variable, else PyTorch's defaults."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return parse_alloc_conf(flag), f"--cuda-alloc-conf {flag}"
    if env.get(ENV_VAR):
        return parse_alloc_conf(env[ENV_VAR]), f"{ENV_VAR}={env[ENV_VAR]}"
    return None, "allocator defaults (no --cuda-alloc-conf, no PYTORCH_CUDA_ALLOC_CONF)"
