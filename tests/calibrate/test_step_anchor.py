"""Which unhooked repeat a model's per-row times are rescaled to (simdl.calibrate.compute)."""

import numpy as np
import pytest

from simdl.calibrate import compute as C
from simdl.workload.library import load_workload


def _record(table, fwd_all, bwd_all):
    n = table.n_rows
    best = min(range(len(fwd_all)), key=lambda i: fwd_all[i] + bwd_all[i])
    return {
        "model": "mnist_cnn",
        "dataset": "mnist",
        "batch": 8,
        "step_fwd_s": fwd_all[best],
        "step_bwd_s": bwd_all[best],
        "step_fwd_all_s": list(fwd_all),
        "step_bwd_all_s": list(bwd_all),
        "rows": {"name": list(table.names), "type": list(table.types), "fwd_s": [1.0 / n] * n, "bwd_s": [2.0 / n] * n},
    }


def test_median_anchor_picks_the_repeat_whose_whole_step_is_the_median():
    table = load_workload("mnist_cnn", "mnist")
    # whole steps 0.30, 0.20, 0.50, 0.25, 0.40: the median repeat is the first (0.30)
    rec = _record(table, [0.10, 0.05, 0.20, 0.10, 0.15], [0.20, 0.15, 0.30, 0.15, 0.25])
    assert C.anchored_step(rec, "median") == (0.10, 0.20)
    assert C.anchored_step(rec, "fastest") == (0.05, 0.15)
    run = C.make_run(table, rec, "median")
    assert run.step == pytest.approx(0.30)
    assert float(np.sum(run.fwd)) == pytest.approx(0.10) and float(np.sum(run.bwd)) == pytest.approx(0.20)
    assert C.make_run(table, rec, "fastest").step == pytest.approx(0.20)


def test_even_count_takes_the_lower_median_and_old_records_fall_back_on_the_fastest():
    table = load_workload("mnist_cnn", "mnist")
    rec = _record(table, [0.4, 0.1, 0.3, 0.2], [0.0, 0.0, 0.0, 0.0])
    assert C.anchored_step(rec, "median") == (0.2, 0.0)
    old = {k: v for k, v in rec.items() if not k.endswith("_all_s")}  # before 2026-11-24
    assert C.anchored_step(old, "median") == (0.1, 0.0)
    torn = dict(rec, step_bwd_all_s=[0.0])  # lists of different lengths: not trusted
    assert C.anchored_step(torn, "median") == (0.1, 0.0)


def test_the_default_is_the_median_and_an_unknown_anchor_is_refused():
    assert C.STEP_ANCHOR == "median"
    with pytest.raises(ValueError, match="'slowest'.*median, fastest"):
        C.anchored_step({"step_fwd_s": 1.0, "step_bwd_s": 1.0}, "slowest")
