"""Which configuration to run: rank the knobs by predicted time (or memory, or cost) among those that fit.

``recommend(model, cluster=..., gpus=..., memory_budget=..., objective="time")`` predicts
every combination of the knobs below (a small sweep, analytic engine), drops those that do
not fit in memory (the GPU's capacity, or the budget if smaller), ranks the rest and
explains the winner: what dominates its step (compute, exposed communication, the rest),
how much memory headroom it leaves, and why the obvious alternatives lost.

The knobs are data (:func:`knobs`), chosen from what the cluster and GPU offer:

* strategy: DDP and FSDP with each sharding (hybrid only across nodes, where it differs
  from full); ``ps-sync`` when the cluster has parameter-server nodes; the stale
  ``ps-async`` / ``ps-ssp`` only with ``allow_stale=True`` -- they change what is trained
  (study 1 saw clearly lower accuracy with asynchronous updates), not only how fast;
* batch size per GPU (:data:`BATCH_SIZES` unless given): it changes the global batch, so
  a winner at another batch than yours may need its learning rate retuned (the text says so);
* precision: fp32, and tf32 / bf16 / fp16-amp where the GPU file gives them a higher peak
  than fp32 (fp16-amp only on GPUs without a faster bf16, such as V100);
* activation checkpointing (off / on), when :func:`simdl.predict` has the
  ``activation_checkpointing`` keyword (read from its signature at call time);
* GPU count, when not given: powers of two up to the preset's default size.

Ties: predictions within :data:`TIE_TOLERANCE` of the best are not told apart -- that is
far below simdl's error against real runs -- so among them the simplest configuration
wins (DDP before FSDP NO_SHARD before GRAD_OP before FULL; no checkpointing before
checkpointing; fp32 before mixed precision).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import SimdlError, unknown
from ..units import GB, MB, GiB, MiB, format_bytes, format_seconds

OBJECTIVES = ("time", "memory", "cost")
#: Per-GPU batch sizes tried when the caller gives none.
BATCH_SIZES = (16, 32, 64, 128)
#: Relative difference below which two predictions count as a tie.
TIE_TOLERANCE = 0.01
# Simplicity order of strategies (breaks ties, orders equals): the registry's labels,
# simplest first (simdl.strategies.registry.order).
_PRECISION_ORDER = ("fp32", "tf32", "bf16", "fp16-amp")
CHECKPOINT_KEY = "activation_checkpointing"


def _strategy_order(label: str) -> int:
    from ..strategies import registry

    return registry.order(label)


def _stale(row: Mapping[str, Any]) -> bool:
    """Whether a ranked row's strategy trains on stale updates (its registry entry says)."""
    from ..strategies import registry

    return registry.is_stale(str(row.get("config.strategy") or row.get("strategy") or row.get("label", "")))


def parse_memory(value: float | int | str | None) -> float | None:
    """A memory budget in bytes: a bare number is GiB (an "80 GB" A100 has 80 GiB); a string may say GB, GiB, MB, MiB."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SimdlError(f"--memory-budget {value!r}: accepted: a number of GiB, or e.g. 40GiB, 42GB, 900MiB")
    if isinstance(value, (int, float)):
        number, unit = float(value), "GiB"
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(GiB|GB|MiB|MB)?\s*", str(value))
        if not m:
            raise SimdlError(f"--memory-budget {value!r}: accepted: a number of GiB, or e.g. 40GiB, 42GB, 900MiB")
        number, unit = float(m.group(1)), m.group(2) or "GiB"
    if not number > 0:
        raise SimdlError(f"--memory-budget {value!r} must be > 0")
    return number * {"GiB": GiB, "GB": GB, "MiB": MiB, "MB": MB}[unit]


def checkpointing_available() -> bool:
    """Whether this simdl's predict models activation checkpointing (the memory model's knob)."""
    from ..predict import predict

    return CHECKPOINT_KEY in inspect.signature(predict).parameters


def knobs(
    cluster: str | Any,
    *,
    gpus: int | None = None,
    batch_sizes: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    allow_stale: bool = False,
    checkpointing: Sequence[bool] | None = None,
) -> dict[str, list]:
    """The candidate values of every knob for this cluster (the grid that :func:`recommend` ranks)."""
    from ..cluster import ClusterSpec, load_cluster
    from ..strategies import registry

    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    if gpus is None:
        top = spec.default_gpus
        gpu_list = sorted({g for g in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if g < top} | {top})
    else:
        gpu_list = [gpus]
    multi_node = any(g > spec.gpus_per_node for g in gpu_list)
    if strategies is None:
        strategies = registry.variants(
            registry.Variants(multi_node=multi_node, ps_servers=spec.ps_servers is not None, allow_stale=allow_stale)
        )
    for s in strategies:
        registry.split_label(s)  # validates
    if precisions is None:
        peak = spec.gpu.peak
        precisions = ["fp32"]
        if peak("tf32") > peak("fp32"):
            precisions.append("tf32")
        if peak("bf16") > peak("fp32"):
            precisions.append("bf16")
        elif peak("fp16") > peak("fp32"):
            precisions.append("fp16-amp")
    out: dict[str, list] = {
        "strategy": list(strategies),
        "gpus": gpu_list,
        "batch_size": list(batch_sizes or BATCH_SIZES),
        "precision": list(precisions),
    }
    if checkpointing is not None:
        if not checkpointing_available() and any(checkpointing):
            raise SimdlError(
                "activation checkpointing is not modelled by this simdl's predict yet "
                f"(no {CHECKPOINT_KEY} keyword); accepted: leave it out"
            )
        out[CHECKPOINT_KEY] = list(checkpointing)
    elif checkpointing_available():
        out[CHECKPOINT_KEY] = [False, True]
    return out


@dataclass
class Recommendation:
    """Ranked candidates, the winner and why. Rows are :func:`simdl.sweep` rows."""

    objective: str
    model: str
    cluster: str
    memory_budget_bytes: float | None
    knobs: dict[str, list]
    ranked: list[dict[str, Any]]  # configurations that fit, winner first
    rejected: list[dict[str, Any]]  # do not fit, or simdl rejected them ('reason' says which)
    explanation: str
    price_per_gpu_hour: float | None = None
    result: Any = field(default=None, repr=False)  # the winner's full simdl.Result

    @property
    def winner(self) -> dict[str, Any] | None:
        return self.ranked[0] if self.ranked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "model": self.model,
            "cluster": self.cluster,
            "memory_budget_bytes": self.memory_budget_bytes,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "knobs": self.knobs,
            "winner": self.winner,
            "ranked": self.ranked,
            "rejected": self.rejected,
            "explanation": self.explanation,
            "winner_result": self.result.to_dict() if self.result is not None else None,
        }

    def table(self, top: int = 10) -> str:
        """The best ``top`` candidates as a text table."""
        cost = self.objective == "cost" and self.price_per_gpu_hour is not None
        head = ["#", "strategy", "gpus", "batch", "precision"]
        ckpt = CHECKPOINT_KEY in self.knobs
        if ckpt:
            head.append("ckpt")
        head += ["step", "total", "peak memory", "GPU-h"] + (["cost"] if cost else [])
        lines = [head]
        for i, r in enumerate(self.ranked[:top], 1):
            cells = [str(i), r["label"], str(r["gpus"]), str(r["batch_size"]), r["precision"]]
            if ckpt:
                cells.append("on" if r.get(CHECKPOINT_KEY) else "off")
            cells += [
                format_seconds(r["iteration_time_s"]),
                format_seconds(r["total_time_s"]),
                format_bytes(r["peak_memory_bytes"]),
                f"{r['gpu_hours']:.3g}",
            ]
            if cost:
                cells.append(f"{r['gpu_hours'] * self.price_per_gpu_hour:.3g}")
            lines.append(cells)
        widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines)

    def header(self) -> str:
        budget = f", memory budget {format_bytes(self.memory_budget_bytes)}" if self.memory_budget_bytes else ""
        n = len(self.ranked) + len(self.rejected)
        return (
            f"{self.model} on {self.cluster}: {n} configurations ranked by {self.objective}{budget}; "
            f"{len(self.ranked)} fit, {len(self.rejected)} do not or were rejected"
        )

    def __str__(self) -> str:
        return self.header() + "\n" + self.table() + "\n\n" + self.explanation


def _order(r: Mapping[str, Any]) -> tuple:
    s = r.get("label", "")
    p = r.get("precision", "fp32")
    return (
        bool(r.get(CHECKPOINT_KEY)),
        _strategy_order(s),
        _PRECISION_ORDER.index(p) if p in _PRECISION_ORDER else len(_PRECISION_ORDER),
    )


def _value(r: Mapping[str, Any], objective: str) -> float:
    if objective == "time":
        return r["total_time_s"]
    if objective == "memory":
        return r["peak_memory_bytes"]
    return r["gpu_hours"]  # cost: a price per GPU-hour scales every candidate alike


def _knobs_text(r: Mapping[str, Any]) -> str:
    parts = [f"{r['gpus']} GPU{'s' if r['gpus'] != 1 else ''}", f"batch {r['batch_size']}/GPU", r["precision"]]
    if r.get(CHECKPOINT_KEY):
        parts.append("activation checkpointing")
    return ", ".join(parts)


def _describe(r: Mapping[str, Any]) -> str:
    return f"{r['label']} ({_knobs_text(r)})"


def _explain(rec: Recommendation, tied_with: dict | None) -> str:
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
    # Why not the alternatives: strategies that never fit, and the best of each other strategy.
    fit_labels = {r["label"] for r in rec.ranked}
    never = sorted(
        {r["label"] for r in rec.rejected if r.get("reason", "").startswith("needs")} - fit_labels, key=_strategy_order
    )
    for s in never:
        least = min(
            (r for r in rec.rejected if r["label"] == s and "peak_memory_bytes" in r),
            key=lambda r: r["peak_memory_bytes"],
            default=None,
        )
        if least is not None:
            lines.append(
                f"  {s} does not fit: it needs at least {format_bytes(least['peak_memory_bytes'])} "
                f"({_describe(least)}) > {format_bytes(limit)}."
            )
    best_other: dict[str, dict] = {}
    for r in rec.ranked[1:]:
        best_other.setdefault(r["label"], r)
    best_val = _value(w, rec.objective)
    for s, r in list(best_other.items())[:3]:
        if s == w["label"]:
            continue
        ratio = _value(r, rec.objective) / best_val if best_val > 0 else float("nan")
        what = {"time": "slower", "memory": "more memory", "cost": "more GPU-hours"}[rec.objective]
        lines.append(
            f"  best {s}: {ratio:.2f}x {what} ({_knobs_text(r)}"
            + (f", peak {format_bytes(r['peak_memory_bytes'])}" if rec.objective == "time" else "")
            + ")."
        )
    if tied_with is not None:
        lines.append(
            f"  {_describe(tied_with)} is predicted within {TIE_TOLERANCE:.0%} "
            f"({_value(tied_with, rec.objective) / best_val - 1:+.1%}): a tie at simdl's accuracy, "
            "so the simpler configuration is recommended."
        )
    if len(rec.knobs["batch_size"]) > 1 and w["batch_size"] != 32:
        lines.append(
            f"  note: batch {w['batch_size']}/GPU makes the global batch {w['batch_size'] * w['gpus']}; "
            "retune the learning rate if you change it."
        )
    if _stale(w):
        lines.append("  note: stale updates (asynchronous PS) can lower final accuracy; study 1 saw it on every model.")
    return "\n".join(lines)


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


def recommend(
    model: str,
    *,
    cluster: str | Any | None = None,
    gpus: int | None = None,
    memory_budget: float | str | None = None,
    objective: str = "time",
    price_per_gpu_hour: float | None = None,
    batch_size: int | None = None,
    batch_sizes: Sequence[int] | None = None,
    precisions: Sequence[str] | None = None,
    strategies: Sequence[str] | None = None,
    allow_stale: bool = False,
    checkpointing: Sequence[bool] | None = None,
    jobs: int | None = None,
    **fixed: Any,
) -> Recommendation:
    """Rank configurations of ``model`` on ``cluster``; see the module docstring.

    ``memory_budget``: GiB (a number) or a string with a unit (``"40GiB"``, ``"42GB"``);
    default: the GPU's memory. ``objective``: ``time`` (total training time), ``memory``
    (peak per GPU) or ``cost`` (GPU-hours, times ``price_per_gpu_hour`` if given).
    ``fixed``: any other :func:`simdl.predict` keyword (dataset, epochs, optimizer, ...).
    """
    from ..predict import DEFAULT_CLUSTER, predict
    from .grid import Grid, to_call
    from .sweep import run_points
    from .whatif import derive_cluster

    if objective not in OBJECTIVES:
        raise unknown("objective", objective, OBJECTIVES)
    if price_per_gpu_hour is not None and (isinstance(price_per_gpu_hour, bool) or not price_per_gpu_hour > 0):
        raise SimdlError(f"--price-per-gpu-hour {price_per_gpu_hour!r} must be a number > 0")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise SimdlError(f"--gpus {gpus!r} must be an integer >= 1")
    budget = parse_memory(memory_budget)
    cluster = cluster or DEFAULT_CLUSTER
    for k in ("strategy", "sharding", "precision", "batch_size", "gpus"):
        if k in fixed:
            raise SimdlError(
                f"recommend: {k} is a knob it ranks; accepted: the strategies=, precisions=, "
                "batch_sizes= (or batch_size=) and gpus= arguments"
            )
    if batch_size is not None:
        batch_sizes = [batch_size]
    grid = knobs(
        cluster,
        gpus=gpus,
        batch_sizes=batch_sizes,
        precisions=precisions,
        strategies=strategies,
        allow_stale=allow_stale,
        checkpointing=checkpointing,
    )
    axes = {"model": model, "cluster": cluster, **fixed, **grid}
    points = list(Grid(axes))
    rows = run_points(points, jobs=jobs, progress=False)

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
    ranked.sort(key=lambda r: (_value(r, objective), _order(r), r["total_time_s"]))
    tied_with = None
    if ranked:
        best = _value(ranked[0], objective)
        near = [r for r in ranked if _value(r, objective) <= best * (1 + TIE_TOLERANCE)]
        simplest = min(near, key=lambda r: (_order(r), _value(r, objective)))
        if simplest is not ranked[0]:
            tied_with = ranked[0]
            ranked.remove(simplest)
            ranked.insert(0, simplest)
    spec_name = cluster if isinstance(cluster, str) else getattr(cluster, "name", str(cluster))
    rec = Recommendation(
        objective=objective,
        model=str(model),
        cluster=spec_name,
        memory_budget_bytes=budget,
        knobs=grid,
        ranked=ranked,
        rejected=rejected,
        explanation="",
        price_per_gpu_hour=price_per_gpu_hour,
    )
    rec.explanation = _explain(rec, tied_with)
    if rec.winner is not None:
        point = {k: rec.winner[k] for k in axes if k in rec.winner}
        kwargs, over = to_call(point)
        if over:
            kwargs["cluster"] = derive_cluster(kwargs.get("cluster") or DEFAULT_CLUSTER, **over)
        rec.result = predict(**kwargs)
    return rec
