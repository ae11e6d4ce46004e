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
from typing import Any, Sequence

from ..errors import SimdlError, unknown
from ..units import GB, MB, GiB, MiB, format_bytes, format_seconds
from .recommend_explain import explain
from .recommend_rank import CHECKPOINT_KEY, TIE_TOLERANCE, rank

__all__ = ["BATCH_SIZES", "CHECKPOINT_KEY", "OBJECTIVES", "TIE_TOLERANCE", "Recommendation", "knobs", "recommend"]

OBJECTIVES = ("time", "memory", "cost")
#: Per-GPU batch sizes tried when the caller gives none.
BATCH_SIZES = (16, 32, 64, 128)


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

    _check_arguments(objective, price_per_gpu_hour, gpus)
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

    ranked, rejected, tied_with = rank(rows, budget, objective)
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
    rec.explanation = explain(rec, tied_with)
    if rec.winner is not None:
        point = {k: rec.winner[k] for k in axes if k in rec.winner}
        kwargs, over = to_call(point)
        if over:
            kwargs["cluster"] = derive_cluster(kwargs.get("cluster") or DEFAULT_CLUSTER, **over)
        rec.result = predict(**kwargs)
    return rec


def _check_arguments(objective: str, price_per_gpu_hour, gpus) -> None:
    """The objective is known, the price positive, the GPU count a whole number >= 1 (when given)."""
    if objective not in OBJECTIVES:
        raise unknown("objective", objective, OBJECTIVES)
    if price_per_gpu_hour is not None and (isinstance(price_per_gpu_hour, bool) or not price_per_gpu_hour > 0):
        raise SimdlError(f"--price-per-gpu-hour {price_per_gpu_hour!r} must be a number > 0")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise SimdlError(f"--gpus {gpus!r} must be an integer >= 1")
