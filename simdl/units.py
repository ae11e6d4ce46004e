"""The one place where units are converted.

Inside simdl every number is SI: bytes, seconds, FLOP, FLOP/s, bytes/s. Data files
put the unit in the key (``memory_GiB``, ``nic_Gb_per_s``); :func:`to_si` converts
once, on load. Human output converts back with the ``format_*`` helpers.
"""

from __future__ import annotations

from .errors import SimdlError

# Decimal prefixes are what datasheets and nccl-tests use (GB/s = 1e9 bytes/s);
# memory capacities are binary (an "80 GB" A100 has 80 GiB of HBM, nvidia-smi: 81920 MiB).
KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB = 1024.0, 1024.0**2, 1024.0**3

# Suffix of a data-file key -> factor to SI.
_SUFFIX_FACTORS: dict[str, float] = {
    "bytes": 1.0,
    "KB": KB,
    "MB": MB,
    "GB": GB,
    "TB": TB,
    "KiB": KiB,
    "MiB": MiB,
    "GiB": GiB,
    "B_per_s": 1.0,
    "MB_per_s": MB,
    "GB_per_s": GB,
    "Gb_per_s": GB / 8.0,  # gigabits per second (NIC line rates)
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "ns": 1e-9,
    "FLOP_per_s": 1.0,
    "GFLOP_per_s": 1e9,
    "TFLOP_per_s": 1e12,
    "per_s": 1.0,
    "ns_per_byte": 1e-9,  # seconds per byte (host page-fault cost)
}


def split_key(key: str) -> tuple[str, str | None]:
    """Split ``'nic_Gb_per_s'`` into ``('nic', 'Gb_per_s')``; keys without a unit give None."""
    for suffix in sorted(_SUFFIX_FACTORS, key=len, reverse=True):
        if key.endswith("_" + suffix):
            return key[: -len(suffix) - 1], suffix
    return key, None


def to_si(value: float, unit: str, *, where: str = "") -> float:
    """Convert ``value`` given in ``unit`` (a key suffix such as ``GB_per_s``) to SI."""
    try:
        factor = _SUFFIX_FACTORS[unit]
    except KeyError:
        raise SimdlError(f"{where or 'value'}: unknown unit {unit!r}; accepted: {', '.join(_SUFFIX_FACTORS)}") from None
    return float(value) * factor


def format_bytes(n: float) -> str:
    """Binary units, as nvidia-smi and torch.cuda.memory_summary print memory."""
    for unit, factor in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:.2f} d"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.2f} min"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def format_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / GB:.2f} GB/s"
