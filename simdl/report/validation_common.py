"""What every part of the validation report shares: the goals, number formats and record lookups."""

from __future__ import annotations

import math

from .metrics import METRIC_BY_KEY, pairs, rel_error

# simdl's accuracy goals on the local profile (fractions; validate/README.md, "Results").
GOALS = {"step_mape": 0.05, "step_mape_stretch": 0.03, "step_max": 0.15, "memory_mean": 0.03, "staleness": 0.10}


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "B":
        return f"{x / 2**20:.1f} MiB"
    if unit == "s":
        return f"{x:.3g} s" if x < 100 else f"{x:.0f} s"
    return f"{x:.3g}"


def _rel(path: str) -> str:
    """A path relative to the working directory when it lies below it (reports get committed)."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _ok(records):
    return [r for r in records if r.get("status") == "ok"]


def _model(r: dict) -> str:
    return r.get("model_name", r["spec"]["model"]).rpartition(":")[2]


def _triple(r: dict, key: str, engine: str = "analytic") -> tuple[str, str, str]:
    metric = METRIC_BY_KEY[key]
    pred = (r.get("predicted") or {}).get(engine) or {}
    m = metric.measured(r) if r.get("status") == "ok" else None
    p = metric.predicted(pred) if "error" not in pred else None
    return _num(m, metric.unit), _num(p, metric.unit), _pct(rel_error(p, m), signed=True)


ORDER_TOLERANCE = 0.03  # measured differences below 3% are ties (run-to-run noise on a shared CPU)


def ordering(records: list[dict], key: str, engine: str = "analytic", tol: float = ORDER_TOLERANCE) -> list[dict]:
    """Per (experiment, model, ranks, batch): do the predictions order the strategies as measured?

    Pairwise: every pair of strategies whose measured values differ by more than ``tol``
    must be ordered the same way by the prediction; closer pairs are ties and not judged.
    """
    metric = METRIC_BY_KEY[key]
    groups: dict[tuple, list] = {}
    for r, m, p, _ in pairs(records, metric, engine):
        sp = r["spec"]
        groups.setdefault((sp["experiment"], _model(r), sp["ranks"], sp["batch_size"]), []).append((r["label"], m, p))
    out = []
    for k, items in sorted(groups.items()):
        if len(items) < 2:
            continue
        discordant, judged = [], 0
        for i, (la, ma, pa) in enumerate(items):
            for lb, mb, pb in items[i + 1 :]:
                if abs(ma - mb) <= tol * max(abs(ma), abs(mb)):
                    continue
                judged += 1
                if (ma < mb) != (pa < pb):
                    # A prediction that calls the pair equal (within ``tol``) orders it by a
                    # rounding of the model, not by a mechanism: say so, with the measured gap.
                    tie = abs(pa - pb) <= tol * max(abs(pa), abs(pb))
                    discordant.append(
                        f"{la}/{lb}"
                        + (
                            f" (predicted within {100 * _gap(pa, pb):.1f}%, measured {100 * _gap(ma, mb):.1f}% apart)"
                            if tie
                            else ""
                        )
                    )
        meas = [lab for lab, *_ in sorted(items, key=lambda t: t[1])]
        pred = [lab for lab, *_ in sorted(items, key=lambda t: t[2])]
        out.append(
            {
                "group": k,
                "measured": meas,
                "predicted": pred,
                "match": not discordant,
                "pairs_judged": judged,
                "discordant": discordant,
            }
        )
    return out


def _gap(a: float, b: float) -> float:
    """How far apart two positive values are: the larger over the smaller, less 1."""
    return max(a, b) / min(a, b) - 1
