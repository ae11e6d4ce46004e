"""The text of a recommendation: what the winner's step is spent on, its memory headroom,
why the obvious alternatives lost, and what to try when nothing fits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ..units import format_bytes, format_seconds
from .recommend_rank import CHECKPOINT_KEY, TIE_TOLERANCE, is_stale, strategy_order, value

if TYPE_CHECKING:
    from .recommend import Recommendation


def _knobs_text(r: Mapping[str, Any]) -> str:
    parts = [f"{r['gpus']} GPU{'s' if r['gpus'] != 1 else ''}", f"batch {r['batch_size']}/GPU", r["precision"]]
    if r.get(CHECKPOINT_KEY):
        parts.append("activation checkpointing")
    return ", ".join(parts)


def _describe(r: Mapping[str, Any]) -> str:
    return f"{r['label']} ({_knobs_text(r)})"


def explain(rec: Recommendation, tied_with: dict | None) -> str:
    """What the winner's step is spent on, its memory headroom and why the alternatives lost
    (``tied_with``: the prediction it won a tie against); why nothing fits when nothing does."""
    w = rec.winner
    if w is None:
        return _explain_none(rec)
    step = w["iteration_time_s"]
    compute, exposed = w["compute_time_s"], w["exposed_comm_time_s"]
    other = max(0.0, step - compute - exposed)
    comm = w["comm_time_s"]
    shares = {"compute": compute, "exposed communication": exposed, "data loading and other stalls": other}
    dominant = max(shares, key=lambda k: shares[k])
    limit = min(w["memory_capacity_bytes"], rec.memory_budget_bytes or float("inf"))
    limit_name = (
        "budget" if rec.memory_budget_bytes and rec.memory_budget_bytes < w["memory_capacity_bytes"] else "GPU memory"
    )
    headroom = limit - w["peak_memory_bytes"]
    verb = {"time": "fastest", "memory": "smallest peak memory", "cost": "fewest GPU-hours"}[rec.objective]
    lines = [
        f"Recommended: {_describe(w)}: the {verb} of the {len(rec.ranked)} configurations that fit "
        f"({len(rec.rejected)} did not).",
        f"  predicted: {format_seconds(w['total_time_s'])} in total, {format_seconds(step)} per step, "
        f"{w['gpu_hours']:.3g} GPU-hours"
        + (
            f" = {w['gpu_hours'] * rec.price_per_gpu_hour:.3g} at {rec.price_per_gpu_hour:g} per GPU-hour"
            if rec.price_per_gpu_hour is not None
            else ""
        )
        + ".",
        f"  step: {dominant} dominates -- compute {format_seconds(compute)} ({compute / step:.0%}), exposed "
        f"communication {format_seconds(exposed)} ({exposed / step:.0%}), other {format_seconds(other)} "
        f"({other / step:.0%}); {1 - exposed / comm if comm > 0 else 1:.0%} of its "
        f"{format_seconds(comm)} of communication is hidden behind compute.",
        f"  memory: peak {format_bytes(w['peak_memory_bytes'])} of {format_bytes(limit)} ({limit_name}), "
        f"headroom {format_bytes(headroom)} ({headroom / limit:.0%}).",
    ]
    lines += _never_fit(rec, limit)
    best_other: dict[str, dict] = {}
    for r in rec.ranked[1:]:
        best_other.setdefault(r["label"], r)
    best_val = value(w, rec.objective)
    for s, r in list(best_other.items())[:3]:
        if s == w["label"]:
            continue
        ratio = value(r, rec.objective) / best_val if best_val > 0 else float("nan")
        what = {"time": "slower", "memory": "more memory", "cost": "more GPU-hours"}[rec.objective]
        lines.append(
            f"  best {s}: {ratio:.2f}x {what} ({_knobs_text(r)}"
            + (f", peak {format_bytes(r['peak_memory_bytes'])}" if rec.objective == "time" else "")
            + ")."
        )
    if tied_with is not None:
        lines.append(
            f"  {_describe(tied_with)} is predicted within {TIE_TOLERANCE:.0%} "
            f"({value(tied_with, rec.objective) / best_val - 1:+.1%}): a tie at simdl's accuracy, "
            "so the simpler configuration is recommended."
        )
    if len(rec.knobs["batch_size"]) > 1 and w["batch_size"] != 32:
        lines.append(
            f"  note: batch {w['batch_size']}/GPU makes the global batch {w['batch_size'] * w['gpus']}; "
            "retune the learning rate if you change it."
        )
    if is_stale(w):
        lines.append("  note: stale updates (asynchronous PS) can lower final accuracy; study 1 saw it on every model.")
    return "\n".join(lines)


def _never_fit(rec: Recommendation, limit: float) -> list[str]:
    """Why not the alternatives, first part: the strategies that fit in no configuration, each
    with the least memory it needs (the best of each other strategy follows in :func:`explain`)."""
    out: list[str] = []
    fit_labels = {r["label"] for r in rec.ranked}
    never = sorted(
        {r["label"] for r in rec.rejected if r.get("reason", "").startswith("needs")} - fit_labels, key=strategy_order
    )
    for s in never:
        least = min(
            (r for r in rec.rejected if r["label"] == s and "peak_memory_bytes" in r),
            key=lambda r: r["peak_memory_bytes"],
            default=None,
        )
        if least is not None:
            out.append(
                f"  {s} does not fit: it needs at least {format_bytes(least['peak_memory_bytes'])} "
                f"({_describe(least)}) > {format_bytes(limit)}."
            )
    return out


def _explain_none(rec: Recommendation) -> str:
    lines = [f"No configuration fits: all {len(rec.rejected)} candidates were rejected."]
    sized = [r for r in rec.rejected if "peak_memory_bytes" in r]
    if sized:
        least = min(sized, key=lambda r: r["peak_memory_bytes"])
        limit = rec.memory_budget_bytes or least.get("memory_capacity_bytes")
        lines.append(
            f"  the smallest, {_describe(least)}, needs {format_bytes(least['peak_memory_bytes'])}"
            + (f" > {format_bytes(limit)}" if limit else "")
            + "; try more GPUs with fsdp-full, a "
            "smaller batch, or a larger budget."
        )
    errors = sorted({r["reason"] for r in rec.rejected if not r.get("reason", "").startswith("needs")})
    for e in errors[:3]:
        lines.append(f"  rejected by simdl: {e}")
    return "\n".join(lines)
