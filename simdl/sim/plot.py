"""Figures of a simulated run: a timeline (Gantt) and per-rank memory over time, as PNG.

matplotlib (Agg backend) is imported here only, so nothing else in simdl needs it.
"""

from __future__ import annotations

from pathlib import Path

_COLORS = {"fwd": "#4c72b0", "bwd": "#dd8452", "opt": "#55a868", "comm": "#c44e52"}
MAX_CLASSES = 8  # rank classes drawn (the first ones); symmetric runs have one


def plot_run(run, path: str | Path) -> None:
    """Timeline of every stream of the first rank classes (top) and memory over time (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .trace import _label

    classes = list(range(min(len(run.classes), MAX_CLASSES)))
    rows: list[tuple[int, str]] = []
    for r in run.records:
        key = (r.cls, r.stream)
        if r.cls in classes and key not in rows:
            rows.append(key)
    for w, *_ in getattr(run, "transfers", ()):
        if w in classes and (w, "push/pull") not in rows:
            rows.append((w, "push/pull"))
    rows.sort()
    index = {k: i for i, k in enumerate(rows)}
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(12, 3 + 0.35 * len(rows) + 3), sharex=True,
                                  gridspec_kw={"height_ratios": [max(len(rows), 1), 4]})
    scale = 1e3  # ms
    for r in run.records:
        k = (r.cls, r.stream)
        if k in index and r.end > r.start:
            color = _COLORS["comm"] if r.is_comm else _COLORS.get(r.phase, "#8172b2")
            ax.barh(index[k], (r.end - r.start) * scale, left=r.start * scale, color=color, edgecolor="none")
    for w, it, s, e, kind in getattr(run, "transfers", ()):
        k = (w, "push/pull")
        if k in index:
            ax.barh(index[k], (e - s) * scale, left=s * scale, color=_COLORS["comm"], edgecolor="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{_label(run.classes[c])} {s}" for c, s in rows], fontsize=8)
    ax.invert_yaxis()
    lo, hi = run.window
    ax.axvspan(lo * scale, hi * scale, color="#eeeeee", zorder=-1)
    ax.set_title(f"simulated timeline: {run.result.config.get('model', '')} {run.result.config.get('label', '')} "
                 f"on {run.result.config.get('gpus', '')} GPUs (grey: steady-state window)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLORS.values()]
    ax.legend(handles, list(_COLORS), loc="upper right", fontsize=8, ncol=5)

    for c in classes:
        m = run.memory.get(c)
        if m is None or len(m.times) == 0:
            continue
        axm.step(m.times * scale, m.total / 2**30, where="post", label=_label(run.classes[c]))
    axm.set_ylabel("tensor memory (GiB)")
    axm.set_xlabel("time (ms)")
    axm.set_title("memory over the last iteration (allocation events)")
    axm.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
