"""The sweep figure: one panel column per model, a colour per strategy, GPUs on a log2 axis
written plainly, and an ideal-scaling line that follows 1/GPUs from the best first point."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

import simdl
from simdl.errors import SimdlError
from simdl.explore.plot import plot_sweep

GPUS = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def rows():
    return simdl.sweep(
        model=["resnet18", "vgg16"],
        strategy=["ddp", "fsdp-full"],
        gpus=GPUS,
        cluster="dgx-a100",
        as_frame=False,
        progress=False,
        jobs=1,
    )


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _line(ax, label):
    return next(ln for ln in ax.get_lines() if ln.get_label() == label)


def test_one_panel_column_per_model_with_time_over_memory(rows, tmp_path):
    fig = plot_sweep(rows, x="gpus", output=str(tmp_path / "s.png"))
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert len(visible) == 4  # 2 models x (time, memory)
    titles = [ax.get_title() for ax in visible if ax.get_title()]
    assert titles == ["resnet18", "vgg16"]
    assert (tmp_path / "s.png").stat().st_size > 10_000
    assert all("peak memory" in ax.get_ylabel() for ax in visible[2:])


def test_a_strategy_has_one_colour_in_every_panel(rows):
    fig = plot_sweep(rows, x="gpus")
    time_axes = [fig.axes[0], fig.axes[1]]
    for label in ("ddp", "fsdp-full"):
        assert len({_line(ax, label).get_color() for ax in time_axes}) == 1
    assert _line(time_axes[0], "ddp").get_color() != _line(time_axes[0], "fsdp-full").get_color()


def test_gpus_are_log2_with_plain_tick_labels(rows):
    fig = plot_sweep(rows, x="gpus")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(g) for g in GPUS]
    assert ax.xaxis.get_minorticklocs().size == 0


def test_ideal_scaling_halves_with_each_doubling_from_the_best_first_point(rows):
    fig = plot_sweep(rows, x="gpus", time="total_time_s")
    ax = fig.axes[0]  # resnet18
    ideal = _line(ax, "ideal scaling")
    best = min(r["total_time_s"] for r in rows if r["model"] == "resnet18" and r["gpus"] == 1)
    assert list(ideal.get_xdata()) == GPUS
    assert list(ideal.get_ydata()) == pytest.approx([best / g for g in GPUS])
    # Every prediction is at or above ideal scaling from the best single GPU.
    for r in rows:
        if r["model"] == "resnet18":
            assert r["total_time_s"] >= best / r["gpus"] * (1 - 1e-9)
    step = plot_sweep(rows, x="gpus", time="iteration_time_s").axes[0]
    assert len(set(_line(step, "ideal scaling").get_ydata())) == 1  # per-GPU batch held: a flat step


def test_a_single_model_is_one_panel_and_bad_keys_are_refused(rows):
    one = [r for r in rows if r["model"] == "vgg16"]
    fig = plot_sweep(one, x="gpus", keys=["strategy", "gpus"])
    assert len([ax for ax in fig.axes if ax.axison]) == 2
    with pytest.raises(SimdlError, match="facet='nosuch'"):
        plot_sweep(rows, x="gpus", facet="nosuch")
    with pytest.raises(SimdlError, match="x='nosuch'"):
        plot_sweep(rows, x="nosuch")


def test_log_axes_print_plain_numbers_that_do_not_collide():
    from simdl.explore.plot import _plain_number, _spaced

    assert [_plain_number(v) for v in (0.01, 5, 10_000, 2_500_000)] == ["0.01", "5", "10k", "2.5M"]
    assert _spaced([8, 16, 32, 64, 100, 200, 300]) == [8, 16, 32, 64, 100, 300]
    assert _spaced([1, 2, 4, 8]) == [1, 2, 4, 8]
    rows = simdl.sweep(
        model="resnet18", strategy="ddp", gpus=[1, 8, 64], cluster="dgx-a100", as_frame=False, progress=False, jobs=1
    )
    fig = plot_sweep(rows, x="gpus", time="throughput_samples_per_s")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and not any("e+" in t or "^" in t for t in labels), labels
