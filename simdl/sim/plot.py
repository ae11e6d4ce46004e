"""Figures of a simulated run: a timeline (Gantt) and memory over the last iteration, as PNG.

The memory panel shares the timeline's time axis (zoomed in when that iteration is a small
part of the run): its curve is placed at the last simulated iteration (marked on the timeline),
stacked by the categories ``simdl predict`` prints (simdl.report.memory_labels), with the CLI's
peak figures in its title.
matplotlib (Agg backend) is imported here only, so nothing else in simdl needs it.
"""

from __future__ import annotations

from pathlib import Path

_COLORS = {"fwd": "#4c72b0", "bwd": "#dd8452", "opt": "#55a868", "comm": "#c44e52"}
# Memory categories in the colours simdl.memory.plot gives them.
_MEMORY_COLORS = {
    "params": "#4c72b0",
    "grads": "#dd8452",
    "optimizer": "#55a868",
    "activations": "#c44e52",
    "comm_buffers": "#937860",
}
MAX_CLASSES = 8  # rank classes drawn (the first ones); symmetric runs have one
SCALE = 1e3  # seconds -> ms on the time axis


def last_iteration_start(run, cls: int) -> float:
    """Simulated time (s) the last iteration of rank class ``cls`` starts: where its memory curve,
    whose times count from that start (simdl.sim.engine), sits on the timeline."""
    last = max((r.iteration for r in run.records if r.cls == cls), default=0)
    return min((r.start for r in run.records if r.cls == cls and r.iteration == last), default=0.0)


def plot_run(run, path: str | Path, *, dpi: int = 110) -> None:
    """Timeline of every stream of the first rank classes (top) and memory over time (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = run_figure(run)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def run_figure(run):
    """The figure :func:`plot_run` saves (for notebooks: shown inline, not written)."""
    import matplotlib.pyplot as plt

    classes = list(range(min(len(run.classes), MAX_CLASSES)))
    rows = _stream_rows(run, classes)
    fig, (ax, axm) = plt.subplots(
        2, 1, figsize=(12, 3 + 0.35 * len(rows) + 3), gridspec_kw={"height_ratios": [max(len(rows), 1), 4]}
    )
    _timeline(ax, run, rows, plt)
    _memory(axm, run, classes)
    _align(ax, axm, run)
    fig.tight_layout()
    return fig


def _stream_rows(run, classes: list[int]) -> list[tuple[int, str]]:
    rows: list[tuple[int, str]] = []
    for r in run.records:
        key = (r.cls, r.stream)
        if r.cls in classes and key not in rows:
            rows.append(key)
    for w, *_ in getattr(run, "transfers", ()):
        if w in classes and (w, "push/pull") not in rows:
            rows.append((w, "push/pull"))
    return sorted(rows)


def _timeline(ax, run, rows: list[tuple[int, str]], plt) -> None:
    from .trace import _label

    index = {k: i for i, k in enumerate(rows)}
    for r in run.records:
        k = (r.cls, r.stream)
        if k in index and r.end > r.start:
            color = _COLORS["comm"] if r.is_comm else _COLORS.get(r.phase, "#8172b2")
            ax.barh(index[k], (r.end - r.start) * SCALE, left=r.start * SCALE, color=color, edgecolor="none")
    for w, it, s, e, kind in getattr(run, "transfers", ()):
        k = (w, "push/pull")
        if k in index:
            ax.barh(index[k], (e - s) * SCALE, left=s * SCALE, color=_COLORS["comm"], edgecolor="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{_label(run.classes[c])} {s}" for c, s in rows], fontsize=8)
    ax.invert_yaxis()
    lo, hi = run.window
    ax.axvspan(lo * SCALE, hi * SCALE, color="#eeeeee", zorder=-1)
    start = last_iteration_start(run, 0)
    end = max((r.end for r in run.records if r.cls == 0), default=start)
    ax.axvspan(start * SCALE, end * SCALE, ymin=0, ymax=0.04, color="#333333", zorder=3)
    c = run.result.config
    ax.set_title(
        f"simulated timeline: {c.get('model', '')} {c.get('label', '')} on {c.get('gpus', '')} GPUs "
        "(grey: steady-state window; black bar: the iteration drawn below)"
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=col) for col in _COLORS.values()]
    ax.legend(handles, list(_COLORS), loc="upper left", fontsize=8, ncol=4)


def _align(ax, axm, run, min_share: float = 0.2) -> None:
    """The memory panel on the timeline's time axis; zoomed on the marked iteration when that
    iteration is under ``min_share`` of the timeline (a parameter server's short compute)."""
    lo, hi = ax.get_xlim()
    start = last_iteration_start(run, 0) * SCALE
    end = max((r.end for r in run.records if r.cls == 0), default=start / SCALE) * SCALE
    if end - start >= min_share * (hi - lo):
        axm.set_xlim(lo, hi)
        return
    pad = 0.03 * (end - start)
    axm.set_xlim(start - pad, end + pad)
    axm.ticklabel_format(axis="x", useOffset=False, style="plain")
    axm.set_title("zoomed on the iteration marked above; " + axm.get_title(), fontsize=10)


def _memory(axm, run, classes: list[int]) -> None:
    from ..memory.timeline import CATEGORIES
    from ..report.memory_labels import cli_levels, label, peak_line
    from .trace import _label

    r = run.result
    unit, factor = ("GiB", 2**30) if r.peak_tensor_bytes >= 2**30 else ("MiB", 2**20)
    for c in classes:
        m = run.memory.get(c)
        if m is None or len(m.times) == 0:
            continue
        t = (m.times + last_iteration_start(run, c)) * SCALE
        if c == 0:
            parts = cli_levels(m.levels, CATEGORIES)
            axm.stackplot(
                t,
                *[v / factor for v in parts.values()],
                labels=[label(k) for k in parts],
                colors=[_MEMORY_COLORS[k] for k in parts],
                step="post",
                alpha=0.85,
            )
        else:
            axm.step(t, m.total / factor, where="post", lw=1, label=f"{_label(run.classes[c])} tensors")
    axm.axhline(
        r.peak_tensor_bytes / factor,
        color="k",
        ls="--",
        lw=0.8,
        label=f"tensors {r.peak_tensor_bytes / factor:,.2f} {unit} (simdl predict's figure)",
    )
    axm.set_ylim(bottom=0)
    axm.set_ylabel(f"tensor memory ({unit})")
    axm.set_xlabel("simulated time (ms)")
    axm.set_title(
        f"{_label(run.classes[0])}: live tensors over the last iteration, by category\n{peak_line(r)}", fontsize=10
    )
    axm.legend(fontsize=8, loc="upper left", ncol=3)
