"""`simdl plot`: the memory panel sits under the iteration it shows, and names memory as the CLI does."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

import simdl
from simdl.report.memory_labels import cli_levels, label, peak_line
from simdl.result import MEMORY_CATEGORIES
from simdl.sim.plot import last_iteration_start, run_figure
from simdl.units import format_bytes


@pytest.fixture(scope="module")
def run():
    return simdl.predict(model="resnet18", strategy="fsdp", gpus=4, engine="sim", return_run=True)


def test_memory_panel_spans_the_last_iteration_of_the_timeline(run):
    import matplotlib.pyplot as plt

    fig = run_figure(run)
    ax, axm = fig.axes[:2]
    last = max(r.iteration for r in run.records if r.cls == 0)
    recs = [r for r in run.records if r.cls == 0 and r.iteration == last]
    start, end = min(r.start for r in recs) * 1e3, max(r.end for r in recs) * 1e3
    assert last_iteration_start(run, 0) * 1e3 == pytest.approx(start)
    xs = np.concatenate([p.get_paths()[0].vertices[:, 0] for p in axm.collections])
    assert xs.min() == pytest.approx(start, abs=1e-9)
    assert xs.max() <= end * (1 + 1e-9)
    assert start > 0.3 * end  # not the first iteration: the old panel drew it at t = 0
    assert ax.get_xlim() == axm.get_xlim()
    plt.close(fig)


def test_memory_panel_names_the_clis_categories_and_figures(run):
    import matplotlib.pyplot as plt

    fig = run_figure(run)
    axm = fig.axes[1]
    names = [t.get_text() for t in axm.get_legend().get_texts()]
    assert names[:5] == [label(c) for c in MEMORY_CATEGORIES if c != "other"]
    assert "comm buffers" in names and "temporaries" not in names
    r = run.result
    assert format_bytes(r.peak_memory_bytes) in axm.get_title()
    assert format_bytes(r.peak_tensor_bytes) in axm.get_title()
    plt.close(fig)


def test_folding_into_cli_categories_keeps_every_byte():
    from simdl.memory.timeline import CATEGORIES

    levels = np.arange(2 * len(CATEGORIES), dtype=float).reshape(2, len(CATEGORIES))
    parts = cli_levels(levels, CATEGORIES)
    assert list(parts) == [c for c in MEMORY_CATEGORIES if c != "other"]
    assert sum(parts.values()) == pytest.approx(levels.sum(axis=1))
    t = CATEGORIES.index("temporaries")
    a = CATEGORIES.index("activations")
    assert parts["activations"] == pytest.approx(levels[:, a] + levels[:, t])


def test_peak_line_is_the_clis_figure():
    r = simdl.predict(model="resnet18", strategy="ddp", gpus=2)
    text = peak_line(r)
    assert text.startswith(f"peak memory {format_bytes(r.peak_memory_bytes)}")
    assert f"tensors {format_bytes(r.peak_tensor_bytes)}" in text


def test_plot_writes_a_png(run, tmp_path):
    from simdl.sim.plot import plot_run

    out = tmp_path / "t.png"
    plot_run(run, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_short_iteration_in_a_long_run_is_zoomed_on():
    """Asynchronous PS: the marked iteration is a sliver of the run; the panel zooms on it."""
    import matplotlib.pyplot as plt

    ps = simdl.predict(model="resnet18", strategy="ps-async", gpus=2, cluster="a10g-ps", engine="sim", return_run=True)
    fig = run_figure(ps)
    ax, axm = fig.axes[:2]
    start = last_iteration_start(ps, 0) * 1e3
    lo, hi = axm.get_xlim()
    assert lo < start < hi and (hi - lo) < 0.5 * (ax.get_xlim()[1] - ax.get_xlim()[0])
    assert axm.get_title().startswith("zoomed on the iteration marked above")
    plt.close(fig)
