"""Memory over time per rank, as the source studies draw it: stacked categories (PNG).

matplotlib (Agg backend) is imported here only, so nothing else in simdl pays for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..report.memory_labels import cli_levels
from ..report.memory_labels import label as category_label
from .timeline import CATEGORIES

COLORS = {
    "params": "#4c72b0",
    "grads": "#dd8452",
    "optimizer": "#55a868",
    "activations": "#c44e52",
    "temporaries": "#8172b3",
    "comm_buffers": "#937860",
}


def plot_memory(
    curves: Mapping[str, tuple[Sequence[float], np.ndarray]],
    path: str | Path,
    *,
    title: str = "",
    capacity_bytes: float | None = None,
    overhead_bytes: float = 0.0,
    allocator: Mapping[str, tuple] | None = None,
) -> Path:
    """Draw one panel per rank: live bytes per category (stacked) against time.

    ``curves``: rank label -> (times in s, levels of shape (len(times), len(CATEGORIES)))
    as :func:`simdl.memory.place.analytic_memory_curve` returns. ``overhead_bytes`` (context,
    workspace) is drawn as a dashed line above the tensors; ``capacity_bytes`` as a red line
    when it is close enough to the peak to be seen. ``allocator``: rank label -> (times,
    allocated bytes, reserved bytes, bytes outside the allocator) of the caching allocator's
    replay (CUDA devices); drawn as lines (allocated, reserved, device total) instead of
    the dashed overhead line.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(curves)
    fig, axes = plt.subplots(n, 1, figsize=(9, 3.2 * n), squeeze=False)
    for ax, (label, (times, levels)) in zip(axes[:, 0], curves.items()):
        t = np.asarray(times, dtype=float) * 1e3
        total = _draw_tensors(ax, t, np.asarray(levels, dtype=float) / 2**20)
        top = total.max()
        if allocator and label in allocator:
            top = max(top, _draw_allocator(ax, *allocator[label]))
        elif overhead_bytes:
            top = _draw_overhead(ax, t, total, overhead_bytes)
        if capacity_bytes and capacity_bytes / 2**20 < 1.5 * top:  # only when it is in view
            ax.axhline(capacity_bytes / 2**20, color="red", lw=1, label="capacity")
        ax.set_ylabel("MiB")
        ax.set_title(f"{title} {label}".strip())
        ax.margins(x=0)
    axes[-1, 0].set_xlabel("time in iteration (ms)")
    axes[0, 0].legend(loc="upper left", fontsize=7, ncol=3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_tensors(ax: Any, t: np.ndarray, lv: np.ndarray) -> np.ndarray:
    """The stacked categories (MiB ``lv`` against ms ``t``) and the peak's label; the total per time."""
    parts = cli_levels(lv, CATEGORIES)  # the CLI's categories: temporaries count as activations
    ax.stackplot(
        t,
        *parts.values(),
        labels=[category_label(c) for c in parts],
        colors=[COLORS[c] for c in parts],
        step="post",
        alpha=0.9,
    )
    total = lv.sum(axis=1)
    k = int(np.argmax(total))
    ax.annotate(f"peak tensors {total[k]:,.0f} MiB", (t[k], total[k]), textcoords="offset points", xytext=(5, 5))
    return total


def _draw_allocator(ax: Any, at: Any, alloc: Any, res: Any, outside: float) -> float:
    """The caching allocator's replay as lines (allocated, reserved, device total); their top in MiB."""
    at = np.asarray(at, dtype=float) * 1e3
    res = np.asarray(res, dtype=float) / 2**20
    ax.step(
        at,
        np.asarray(alloc, dtype=float) / 2**20,
        where="post",
        color="k",
        lw=0.8,
        label="allocated (caching allocator)",
    )
    ax.step(at, res, where="post", color="k", ls="--", lw=0.8, label="reserved")
    ax.step(at, res + outside / 2**20, where="post", color="0.4", ls=":", lw=1.0, label="device (+ context, NCCL)")
    return (res.max() if len(res) else 0.0) + outside / 2**20


def _draw_overhead(ax: Any, t: np.ndarray, total: np.ndarray, overhead_bytes: float) -> float:
    """The tensors plus what lies outside them (context, workspace) as a dashed line; its top in MiB."""
    ax.step(
        t,
        total + overhead_bytes / 2**20,
        where="post",
        ls="--",
        color="k",
        lw=0.8,
        label="+ other (context, workspace, fragmentation)",
    )
    return total.max() + overhead_bytes / 2**20
