"""Collective regime tables (``collective_regimes_intra`` and ``collective_regimes_subgroups``
of the ``efficiency`` section) as file sections: parsed into
:class:`~simdl.collectives.regimes.RegimeModel` and written back."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..collectives.cost import COLLECTIVES
from ..collectives.regimes import Regime, RegimeCurve, RegimeModel
from ..errors import SimdlError, unknown
from ..provenance import KINDS, kind_and_source
from ..units import GB
from .readers import FrozenMap, _check_keys, _number

_REGIME_SECTION_KEYS = ("kind", "source", "link_GB_per_s", "collectives")
_REGIME_CURVE_KEYS = ("overhead_us", "regimes")
_REGIME_KEYS = ("step_bytes", "alpha_us", "bus_GB_per_s")


def _parse_regimes(raw: Any, where: str) -> RegimeModel:
    """``collective_regimes_intra``: {kind, source, link_GB_per_s, collectives: {name:
    {overhead_us, regimes: [{step_bytes: [lo, hi], alpha_us, bus_GB_per_s}, ...]}}}; a regime's
    ``step_bytes`` is the range of bytes per ring step it was fitted on (ordered, disjoint)."""
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where} must be a mapping {{kind, source, link_GB_per_s, collectives}}, got {raw!r}")
    _check_keys(raw, _REGIME_SECTION_KEYS, where)
    kind, source = kind_and_source(raw, where, "", "the regimes come")
    link = _number(raw, "link_GB_per_s", where, positive=True) * GB
    colls = raw.get("collectives")
    if not isinstance(colls, Mapping) or not colls:
        raise SimdlError(f"{where}: collectives must be a non-empty mapping collective -> {{overhead_us, regimes}}")
    curves = []
    for name, c in colls.items():
        w = f"{where}: collectives: {name}"
        if name not in COLLECTIVES:
            raise SimdlError(f"{where}: {unknown('collective', name, COLLECTIVES)}")
        if not isinstance(c, Mapping):
            raise SimdlError(f"{w} must be a mapping {{overhead_us, regimes}}, got {c!r}")
        _check_keys(c, _REGIME_CURVE_KEYS, w)
        regs = c.get("regimes")
        if not isinstance(regs, list) or not regs:
            raise SimdlError(f"{w}: regimes must be a non-empty list of {{step_bytes, alpha_us, bus_GB_per_s}}")
        out = []
        for i, r in enumerate(regs):
            wr = f"{w}: regimes[{i}]"
            if not isinstance(r, Mapping):
                raise SimdlError(f"{wr} must be a mapping {{step_bytes, alpha_us, bus_GB_per_s}}, got {r!r}")
            _check_keys(r, _REGIME_KEYS, wr)
            rng = r.get("step_bytes")
            ok = (
                isinstance(rng, list)
                and len(rng) == 2
                and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in rng
                )
                and rng[0] <= rng[1]
            )
            if not ok or not isinstance(rng, list):
                raise SimdlError(
                    f"{wr}: step_bytes = {rng!r}; accepted: [lo, hi], 0 <= lo <= hi (bytes per ring "
                    "step of the sizes the regime was fitted on)"
                )
            out.append(
                Regime(
                    float(rng[0]),
                    float(rng[1]),
                    _number(r, "alpha_us", wr) * 1e-6,
                    _number(r, "bus_GB_per_s", wr, positive=True) * GB,
                )
            )
        for i in range(1, len(out)):
            if out[i].lo_step_bytes <= out[i - 1].hi_step_bytes:
                raise SimdlError(
                    f"{w}: regimes[{i}].step_bytes starts at {out[i].lo_step_bytes:g}; accepted: above "
                    f"regimes[{i - 1}]'s end ({out[i - 1].hi_step_bytes:g}): ordered, disjoint ranges"
                )
        curves.append(RegimeCurve(name, _number(c, "overhead_us", w) * 1e-6, tuple(out)))
    return RegimeModel(tuple(curves), link, kind, source)


def _parse_subgroup_regimes(raw: Any, where: str) -> FrozenMap:
    """``collective_regimes_subgroups``: {group size: a ``collective_regimes_intra``-shaped
    section}; null or absent: none."""
    if raw is None:
        return FrozenMap()
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where} must be a mapping group size -> regimes section, got {raw!r}")
    out = {}
    for key, section in raw.items():
        d = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else None
        if isinstance(key, bool) or d is None or d < 2:
            raise SimdlError(f"{where}: group size {key!r}; accepted: an integer >= 2 (ranks per group)")
        out[d] = _parse_regimes(section, f"{where}: {key}")
    return FrozenMap(out)


def regimes_to_dict(model: RegimeModel) -> dict[str, Any]:
    """The YAML form of a :class:`RegimeModel` (inverse of ``_parse_regimes``: 12 significant
    digits drop the unit conversion's rounding noise and keep every digit a file gives)."""

    def g(x: float) -> float | int:
        r = float(f"{x:.12g}")
        return int(r) if r.is_integer() and abs(r) < 1e15 else r

    return {
        "kind": model.kind,
        "source": model.source,
        "link_GB_per_s": g(model.link_bandwidth / GB),
        "collectives": {
            c.collective: {
                "overhead_us": g(c.overhead * 1e6),
                "regimes": [
                    {
                        "step_bytes": [int(r.lo_step_bytes), int(r.hi_step_bytes)],
                        "alpha_us": g(r.alpha * 1e6),
                        "bus_GB_per_s": g(r.bandwidth / GB),
                    }
                    for r in c.regimes
                ],
            }
            for c in model.curves
        },
    }


def parse_regimes_or_none(value: Any, where: str, ctx: Any = None) -> RegimeModel | None:
    """``collective_regimes_intra``; null: none."""
    return None if value is None else _parse_regimes(value, where)


def parse_subgroup_regimes(value: Any, where: str, ctx: Any = None) -> FrozenMap:
    return _parse_subgroup_regimes(value, where)


def subgroup_regimes_to_dict(models: Mapping[int, RegimeModel]) -> dict[str, Any]:
    return {str(d): regimes_to_dict(m) for d, m in sorted(models.items())}


_NUMBER = {"type": "number", "minimum": 0}
_REGIME_SECTION = {
    "type": "object",
    "additionalProperties": False,
    "required": ["kind", "source", "link_GB_per_s", "collectives"],
    "properties": {
        "kind": {"enum": list(KINDS)},
        "source": {"type": "string", "pattern": r"\S"},
        "link_GB_per_s": {"type": "number", "exclusiveMinimum": 0},
        "collectives": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": list(COLLECTIVES)},
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["overhead_us", "regimes"],
                "properties": {
                    "overhead_us": _NUMBER,
                    "regimes": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["step_bytes", "alpha_us", "bus_GB_per_s"],
                            "properties": {
                                "step_bytes": {"type": "array", "minItems": 2, "maxItems": 2, "items": _NUMBER},
                                "alpha_us": _NUMBER,
                                "bus_GB_per_s": {"type": "number", "exclusiveMinimum": 0},
                            },
                        },
                    },
                },
            },
        },
    },
}
REGIMES_SCHEMA = {"anyOf": [_REGIME_SECTION, {"type": "null"}]}
SUBGROUP_REGIMES_SCHEMA = {
    "anyOf": [
        {"type": "null"},
        {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"}, "additionalProperties": _REGIME_SECTION},
    ]
}
