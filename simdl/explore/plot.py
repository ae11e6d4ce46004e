"""Sweep plots: time and peak memory against the swept variable, one line per strategy.

Works on the rows of :func:`simdl.sweep` (a DataFrame or a list of dicts); rows with an
``error`` are left out. When the grid has other swept keys besides ``x`` and the strategy,
each combination gets its own line (named in the legend).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import SimdlError
from ..units import GiB

_NOT_KEYS = {"label", "error"}


def _rows(data: Any) -> list[dict[str, Any]]:
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a DataFrame, without importing pandas
        return [{k: (None if _isnan(v) else v) for k, v in r.items()} for r in data.to_dict("records")]
    return [dict(r) for r in data]


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def plot_sweep(data: Any, x: str | None = None, output: str | None = None, *, time: str = "total_time_s",
               keys: Sequence[str] | None = None, title: str | None = None):
    """Draw time and memory against ``x``; save to ``output`` (PNG, SVG, PDF) if given; return the figure.

    ``x``: the swept key on the horizontal axis (default: the first swept key other than the
    strategy). ``time``: the time column (``total_time_s``, ``iteration_time_s``, ...).
    ``keys``: the grid's parameter columns (default: the columns before ``label``).
    """
    import matplotlib

    if output is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = _rows(data)
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        raise SimdlError("nothing to plot: every configuration of the sweep failed (see the error column)")
    if keys is None:
        first = rows[0]
        keys = []
        for k in first:
            if k == "label":
                break
            keys.append(k)
    swept = [k for k in keys if len({str(r.get(k)) for r in rows}) > 1]
    if x is None:
        candidates = [k for k in swept if k not in ("strategy", "sharding")]
        if not candidates:
            raise SimdlError("plot: no swept variable besides the strategy; accepted: give x=KEY")
        x = candidates[0]
    if x not in ok[0]:
        raise SimdlError(f"plot: x={x!r} is not a column of the sweep; accepted: {', '.join(swept) or 'none'}")
    if time not in ok[0]:
        raise SimdlError(f"plot: time={time!r} is not a column of the sweep")
    others = [k for k in swept if k not in (x, "strategy", "sharding")]

    lines: dict[tuple, list[dict]] = {}
    for r in ok:
        key = (r["label"],) + tuple(r.get(k) for k in others)
        lines.setdefault(key, []).append(r)

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    numeric = all(isinstance(r.get(x), (int, float)) and not isinstance(r.get(x), bool) for r in ok)
    order = sorted({r.get(x) for r in ok}, key=lambda v: (v is None, v if numeric else str(v)))
    pos = {v: i for i, v in enumerate(order)}
    for key, rs in lines.items():
        rs = sorted(rs, key=lambda r: pos[r.get(x)])
        xs = [r[x] if numeric else pos[r.get(x)] for r in rs]
        name = key[0] + "".join(f", {k}={v}" for k, v in zip(others, key[1:]))
        ax_t.plot(xs, [r[time] for r in rs], marker="o", label=name)
        ax_m.plot(xs, [r["peak_memory_bytes"] / GiB for r in rs], marker="o", label=name)
    caps = {r["memory_capacity_bytes"] for r in ok if r.get("memory_capacity_bytes")}
    if len(caps) == 1:
        ax_m.axhline(caps.pop() / GiB, color="grey", linestyle="--", linewidth=1, label="GPU memory")
    for ax, ylabel in ((ax_t, f"{time} (s)"), (ax_m, "peak memory per GPU (GiB)")):
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if numeric and len(order) > 2 and min(order) > 0 and max(order) / min(order) >= 8:
            ax.set_xscale("log", base=2)
        if not numeric:
            ax.set_xticks(range(len(order)), [str(v) for v in order], rotation=30)
    ax_t.set_yscale("log") if _spread([r[time] for r in ok]) > 20 else None
    ax_m.legend(fontsize=7, loc="best")
    fig.suptitle(title or f"{time} and peak memory against {x}")
    fig.tight_layout()
    if output is not None:
        fig.savefig(output, dpi=120)
        plt.close(fig)
    return fig


def _spread(values: Sequence[float]) -> float:
    pos = [v for v in values if v and v > 0]
    return max(pos) / min(pos) if pos else 1.0
