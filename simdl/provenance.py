"""Numbers with a source.

Every hardware or framework constant in a data file is written as a mapping::

    peak_fp32_TFLOP_per_s: {value: 19.5, kind: datasheet, source: "NVIDIA A100 datasheet"}

The unit is in the key (see :mod:`simdl.units`); ``kind`` says whether the number is
a datasheet peak, a measurement, derived from other numbers, an assumption, a value
taken from PyTorch's source, or the output of a calibration. :func:`read` turns such
an entry into a :class:`Sourced` in SI units and rejects anything else with a
one-line :class:`~simdl.errors.SimdlError` that names the file and key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import SimdlError
from .units import split_key, to_si

KINDS = ("datasheet", "measured", "derived", "assumed", "framework", "calibrated")


@dataclass(frozen=True)
class Sourced:
    """A value in SI units with where it came from."""

    value: float
    kind: str
    source: str

    def __float__(self) -> float:
        return self.value

    def to_dict(self, key: str) -> dict[str, Any]:
        """Back to the file form: the value in the unit of ``key``."""
        _, unit = split_key(key)
        scale = to_si(1.0, unit) if unit else 1.0
        return {"value": _round(self.value / scale), "kind": self.kind, "source": self.source}


def _round(x: float) -> float | int:
    r = float(f"{x:.6g}")
    return int(r) if r.is_integer() and abs(r) < 1e15 else r


def kind_and_source(entry: Mapping[str, Any], where: str, prefix: str, what: str) -> tuple[str, str]:
    """An entry's ``kind`` (one of :data:`KINDS`) and its non-empty ``source``, stripped.

    ``prefix`` goes before the field names in errors (``"peak_fp32_TFLOP_per_s."``) and
    ``what`` ends the missing-source error (``"the number comes"``: "must name where the
    number comes from").
    """
    kind = entry.get("kind")
    if kind not in KINDS:
        raise SimdlError(f"{where}: {prefix}kind is {kind!r}; accepted: {', '.join(KINDS)}")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SimdlError(f"{where}: {prefix}source must name where {what} from")
    return str(kind), source.strip()


def read(
    mapping: Mapping[str, Any],
    key: str,
    *,
    where: str,
    minimum: float | None = 0.0,
    strictly_positive: bool = False,
    default: Sourced | None = None,
) -> Sourced:
    """Read ``mapping[key]`` as a sourced quantity, converted to SI by the key's unit suffix."""
    if key not in mapping:
        if default is not None:
            return default
        raise SimdlError(f"{where}: missing key {key!r}")
    entry = mapping[key]
    if not isinstance(entry, Mapping) or "value" not in entry:
        raise SimdlError(f"{where}: {key} must be a mapping {{value, kind, source}}, got {entry!r}")
    value = entry["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SimdlError(f"{where}: {key}.value must be a number, got {value!r}")
    kind, source = kind_and_source(entry, where, f"{key}.", "the number comes")
    if strictly_positive and not value > 0:
        raise SimdlError(f"{where}: {key} = {value} must be > 0")
    if minimum is not None and value < minimum:
        raise SimdlError(f"{where}: {key} = {value} must be >= {minimum}")
    _, unit = split_key(key)
    si = to_si(value, unit, where=f"{where}: {key}") if unit else float(value)
    return Sourced(si, kind, source)
