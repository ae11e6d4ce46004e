"""How :func:`simdl.explore.recommend` orders candidates: by the objective's value, and among
predictions within :data:`TIE_TOLERANCE` of the best by simplicity (the module docstring of
simdl.explore.recommend gives the order).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..units import format_bytes

#: Relative difference below which two predictions count as a tie.
TIE_TOLERANCE = 0.01
# Simplicity order of strategies (breaks ties, orders equals): the registry's labels,
# simplest first (simdl.strategies.registry.order).
_PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16-amp")
CHECKPOINT_KEY = "activation_checkpointing"


def strategy_order(label: str) -> int:
    from ..strategies import registry

    return registry.order(label)


def is_stale(row: Mapping[str, Any]) -> bool:
    """Whether a ranked row's strategy trains on stale updates (its registry entry says)."""
    from ..strategies import registry

    return registry.is_stale(str(row.get("config.strategy") or row.get("strategy") or row.get("label", "")))


def simplicity(r: Mapping[str, Any]) -> tuple:
    s = r.get("label", "")
    p = r.get("precision", "fp32")
    return (
        bool(r.get(CHECKPOINT_KEY)),
        strategy_order(s),
        _PRECISION_ORDER.index(p) if p in _PRECISION_ORDER else len(_PRECISION_ORDER),
    )


def value(r: Mapping[str, Any], objective: str) -> float:
    if objective == "time":
        return r["total_time_s"]
    if objective == "memory":
        return r["peak_memory_bytes"]
    return r["gpu_hours"]  # cost: a price per GPU-hour scales every candidate alike


def rank(rows: list[dict[str, Any]], budget: float | None, objective: str):
    """(ranked, rejected, tied_with): the sweep rows that fit (in the GPU's memory and the budget),
    best first, the simplest of a tie moved first; those that do not fit or that simdl rejected,
    each with its ``reason``; the best prediction the simplest won a tie against, or None."""
    ranked, rejected = [], []
    for r in rows:
        if r.get("error"):
            rejected.append({**r, "reason": r["error"]})
            continue
        limit = min(r["memory_capacity_bytes"], budget or float("inf"))
        if not r["fits_in_memory"] or r["peak_memory_bytes"] > limit:
            rejected.append({**r, "reason": f"needs {format_bytes(r['peak_memory_bytes'])} > {format_bytes(limit)}"})
        else:
            ranked.append(r)
    ranked.sort(key=lambda r: (value(r, objective), simplicity(r), r["total_time_s"]))
    tied_with = None
    if ranked:
        best = value(ranked[0], objective)
        near = [r for r in ranked if value(r, objective) <= best * (1 + TIE_TOLERANCE)]
        simplest = min(near, key=lambda r: (simplicity(r), value(r, objective)))
        if simplest is not ranked[0]:
            tied_with = ranked[0]
            ranked.remove(simplest)
            ranked.insert(0, simplest)
    return ranked, rejected, tied_with
