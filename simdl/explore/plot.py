"""Sweep plots: time (top row) and peak memory (bottom row) against the swept variable.

Works on the rows of :func:`simdl.sweep` (a DataFrame or a list of dicts); rows with an
``error`` are left out. One column of panels per model when several are swept (``facet``),
one colour per strategy label, the same in every panel; other swept keys get their own
line style, named in the legend. Against GPUs the axis is log2 with the counts written
plainly, and a dashed line shows ideal scaling from the best configuration at the fewest GPUs.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import SimdlError
from ..units import GiB

MAX_COLUMNS = 4  # panels per row before the facets wrap
STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
# How each time column scales with the GPU count when the per-GPU batch is held (weak
# scaling): total and epoch time fall as 1/GPUs, the step stays, throughput grows as GPUs.
IDEAL_EXPONENT = {"total_time_s": -1.0, "epoch_time_s": -1.0, "iteration_time_s": 0.0, "throughput_samples_per_s": 1.0}
AXIS_NAMES = {
    "total_time_s": "total training time (s)",
    "epoch_time_s": "epoch time (s)",
    "iteration_time_s": "iteration time (s)",
    "throughput_samples_per_s": "throughput (samples/s)",
    "gpus": "GPUs",
}


def _rows(data: Any) -> list[dict[str, Any]]:
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a DataFrame, without importing pandas
        return [{k: (None if _isnan(v) else v) for k, v in r.items()} for r in data.to_dict("records")]
    return [dict(r) for r in data]


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and v != v


def _swept(rows: list[dict[str, Any]], keys: Sequence[str] | None) -> list[str]:
    if keys is None:  # the grid's keys: the columns before ``label``
        keys = []
        for k in rows[0]:
            if k == "label":
                break
            keys.append(k)
    return [k for k in keys if len({str(r.get(k)) for r in rows}) > 1]


def _choose(ok: list[dict], swept: list[str], x: str | None, time: str, facet: str | None):
    if x is None:
        candidates = [k for k in swept if k not in ("strategy", "sharding", "model")]
        if not candidates:
            raise SimdlError("plot: no swept variable besides the strategy and model; accepted: give x=KEY")
        x = candidates[0]
    if x not in ok[0]:
        raise SimdlError(f"plot: x={x!r} is not a column of the sweep; accepted: {', '.join(swept) or 'none'}")
    if time not in ok[0]:
        raise SimdlError(f"plot: time={time!r} is not a column of the sweep")
    if facet is None and "model" in swept and x != "model":
        facet = "model"
    if facet is not None and facet not in ok[0]:
        raise SimdlError(f"plot: facet={facet!r} is not a column of the sweep; accepted: {', '.join(swept)}")
    return x, facet


def plot_sweep(
    data: Any,
    x: str | None = None,
    output: str | None = None,
    *,
    time: str = "total_time_s",
    keys: Sequence[str] | None = None,
    title: str | None = None,
    facet: str | None = None,
    dpi: int = 100,
):
    """Draw time and memory against ``x``; save to ``output`` (PNG, SVG, PDF) if given; return the figure.

    ``x``: the swept key on the horizontal axis (default: the first swept key other than the
    strategy and the model). ``time``: the time column (``total_time_s``, ``iteration_time_s``,
    ``throughput_samples_per_s``, ...). ``keys``: the grid's parameter columns (default: the
    columns before ``label``). ``facet``: one column of panels per value of this key (default
    ``model`` when several models are swept).
    """
    import matplotlib

    if output is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = _rows(data)
    ok = [r for r in rows if not r.get("error")]
    if not ok:
        raise SimdlError("nothing to plot: every configuration of the sweep failed (see the error column)")
    swept = _swept(rows, keys)
    x, facet = _choose(ok, swept, x, time, facet)
    others = [k for k in swept if k not in (x, "strategy", "sharding", facet)]
    panels = sorted({r.get(facet) for r in ok}, key=str) if facet else [None]
    cols = min(len(panels), MAX_COLUMNS)
    grid_rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(2 * grid_rows, cols, figsize=(3.6 * cols + 1.6, 5.2 * grid_rows), squeeze=False)
    colors = _colors(ok, plt)
    variants = sorted({tuple(r.get(k) for k in others) for r in ok}, key=_natural)
    numeric = all(isinstance(r.get(x), (int, float)) and not isinstance(r.get(x), bool) for r in ok)
    order = sorted({r.get(x) for r in ok}, key=lambda v: (v is None, v if numeric else str(v)))
    log_time = _spread([r[time] for r in ok]) > 20
    for i, value in enumerate(panels):
        ax_t = axes[2 * (i // cols), i % cols]
        ax_m = axes[2 * (i // cols) + 1, i % cols]
        sub = [r for r in ok if facet is None or r.get(facet) == value]
        _draw_panel(ax_t, ax_m, sub, x, time, others, variants, colors, numeric, order)
        if log_time:  # decided over every panel, so that their scales compare
            ax_t.set_yscale("log")
            _log_ticks_plain(ax_t)
        if facet is not None:
            ax_t.set_title(f"{value}" if facet == "model" else f"{facet}={value}", fontsize=10)
    for k in range(len(panels), grid_rows * cols):
        axes[2 * (k // cols), k % cols].axis("off")
        axes[2 * (k // cols) + 1, k % cols].axis("off")
    _legend(fig, axes, others)
    fig.suptitle(title or f"{AXIS_NAMES.get(time, time)} and peak memory per GPU against {AXIS_NAMES.get(x, x)}")
    fig.tight_layout(rect=(0, 0, 0.82, 1))
    if output is not None:
        fig.savefig(output, dpi=dpi)
        plt.close(fig)
    return fig


def _colors(ok: list[dict], plt) -> dict[str, Any]:
    cmap = plt.get_cmap("tab10")
    return {lab: cmap(i % 10) for i, lab in enumerate(sorted({str(r["label"]) for r in ok}))}


def _draw_panel(ax_t, ax_m, rows, x, time, others, variants, colors, numeric, order) -> None:
    pos = {v: i for i, v in enumerate(order)}
    lines: dict[tuple, list[dict]] = {}
    for r in rows:
        lines.setdefault((str(r["label"]), tuple(r.get(k) for k in others)), []).append(r)
    for (label, variant), rs in sorted(lines.items(), key=lambda kv: (kv[0][0], _natural(kv[0][1]))):
        rs = sorted(rs, key=lambda r: pos[r.get(x)])
        xs = [r[x] if numeric else pos[r.get(x)] for r in rs]
        v = variants.index(variant)
        name = label + "".join(f", {k}={val}" for k, val in zip(others, variant))
        style = dict(
            color=colors[label], ls=STYLES[v % len(STYLES)], marker=MARKERS[v % len(MARKERS)], ms=4, lw=1.4, label=name
        )
        ax_t.plot(xs, [r[time] for r in rs], **style)
        ax_m.plot(xs, [r["peak_memory_bytes"] / GiB for r in rs], **style)
    if x == "gpus" and time in IDEAL_EXPONENT and numeric:
        _ideal(ax_t, rows, time)
    ax_m.set_ylabel("peak memory per GPU (GiB)")
    ax_t.set_ylabel(AXIS_NAMES.get(time, time))
    _capacity(ax_m, rows)
    for ax in (ax_t, ax_m):
        ax.set_xlabel(AXIS_NAMES.get(x, x))
        ax.grid(True, alpha=0.3)
        _x_axis(ax, order, numeric)


def _capacity(ax, rows: list[dict]) -> None:
    """The GPU's memory as a line when it is near the curves, else written in the corner."""
    caps = {r["memory_capacity_bytes"] for r in rows if r.get("memory_capacity_bytes")}
    if len(caps) != 1:
        return
    cap = caps.pop() / GiB
    if cap < 1.5 * max(r["peak_memory_bytes"] / GiB for r in rows):
        ax.axhline(cap, color="grey", linestyle="--", linewidth=1, label="GPU memory")
    else:  # far above the curves: a line there would flatten them
        ax.set_ylabel(f"peak memory per GPU (GiB)\nof {cap:.0f} GiB")
    ax.set_ylim(bottom=0)


def _ideal(ax, rows: list[dict], time: str) -> None:
    """Ideal scaling from the best configuration at the fewest GPUs of this panel."""
    g0 = min(r["gpus"] for r in rows)
    first = [r for r in rows if r["gpus"] == g0]
    best = (max if time == "throughput_samples_per_s" else min)(r[time] for r in first)
    gs = sorted({r["gpus"] for r in rows})
    e = IDEAL_EXPONENT[time]
    ax.plot(gs, [best * (g / g0) ** e for g in gs], color="black", ls="--", lw=1, label="ideal scaling")


def _x_axis(ax, order: list, numeric: bool) -> None:
    from matplotlib.ticker import NullLocator

    if not numeric:
        ax.set_xticks(range(len(order)), [str(v) for v in order], rotation=30)
        return
    ticks = list(order)
    if len(order) > 2 and min(order) > 0 and max(order) / min(order) >= 4:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
        ticks = _spaced(order)
    ax.set_xticks(ticks, [f"{v:g}" for v in ticks])  # the values as given: 1 2 4 8, never 2^3


def _spaced(values: list, min_octaves: float = 0.6) -> list:
    """The values to label on a log2 axis: the largest, then each at least ``min_octaves``
    below the last one kept (200 and 300 would print over each other)."""
    import math

    kept = [values[-1]]
    for v in reversed(values[:-1]):
        if math.log2(kept[-1] / v) >= min_octaves:
            kept.append(v)
    return kept[::-1]


def _plain_number(v: float) -> str:
    """10000 -> 10k, 1e6 -> 1M, 0.01 -> 0.01: no exponents on an axis."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:g}{suffix}"
    return f"{v:g}"


def _log_ticks_plain(ax) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _plain_number(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend(fig, axes, others: list[str]) -> None:
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    head = "strategy" + "".join(f", {k}" for k in others)
    fig.legend(handles, labels, loc="center right", fontsize=8, title=head, title_fontsize=8, frameon=False)


def _natural(values: tuple) -> tuple:
    """Numbers by value (32 before 128), then anything else by its text."""
    return tuple(
        (0, v, "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0, str(v)) for v in values
    )


def _spread(values: Sequence[float]) -> float:
    pos = [v for v in values if v and v > 0]
    return max(pos) / min(pos) if pos else 1.0
