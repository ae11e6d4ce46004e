"""The machine-speed probe (validate/probe.py) and the report's drift table."""

from __future__ import annotations

import pytest

from simdl.report.validation import drift_table
from validate import probe
from validate.experiments import RunSpec
from validate.run import resolve_profile


def _run(model="vgg16", batch=32, dataset="cifar10"):
    return RunSpec("exp1", model, dataset, "ddp", 2, batch, 1, 64, 16)


def test_the_probe_remeasures_a_calibrated_batch_never_the_runs_own():
    milan = str(resolve_profile("cpu-epyc-milan"))
    point = probe.probe_point(milan, _run(batch=32))
    # cpu-epyc-milan.compute.json measured VGG16 on CIFAR at 2, 8, 24, 48: 24 is nearest 32 (log scale)
    assert (point["model"], point["dataset"], point["batch"], point["ranks"]) == ("vgg16", "cifar10", 24, 2)
    assert point["calibrated_step_s"] == pytest.approx(1.542, abs=1e-3)
    assert probe.probe_point(milan, _run(batch=24))["batch"] != 24
    assert "skipped" in probe.probe_point(milan, _run(model="resnet152"))
    assert "skipped" in probe.probe_point(str(resolve_profile("a100-80gb-nvlink")), _run())


def test_speed_ratio_is_the_mean_probe_over_the_calibrated_step():
    point = {
        "model": "vgg16",
        "dataset": "cifar10",
        "batch": 24,
        "calibrated_step_s": 2.0,
        "ranks": 2,
        "compute_profile": "x.json",
    }
    rec = probe.speed(point, {"step_s": 2.2}, {"step_s": 2.6})
    assert rec["speed_ratio"] == pytest.approx(1.2)
    assert "compute_profile" not in rec
    # a probe that failed is left out; none that worked: no ratio rather than a made-up one
    assert probe.speed(point, {"error": "x"}, {"step_s": 1.8})["speed_ratio"] == pytest.approx(0.9)
    assert "speed_ratio" not in probe.speed(point, {"error": "x"}, {"error": "y"})


def _rec(run_id, measured, predicted, ratio):
    return {
        "run_id": run_id,
        "status": "ok",
        "spec": {"strategy": "ddp", "ranks": 2},
        "measured": {"step_time_s": {"median": measured}},
        "predicted": {"analytic": {"iteration_time_s": predicted}},
        "machine_probe": {
            "model": "vgg16",
            "batch": 24,
            "ranks": 2,
            "calibrated_step_s": 1.0,
            "before": {"step_s": ratio},
            "after": {"step_s": ratio},
            "speed_ratio": ratio,
        },
    }


def test_the_drift_table_scales_the_prediction_by_the_ratio():
    lines = drift_table([_rec("a", 1.2, 1.0, 1.2), _rec("b", 0.9, 1.0, 0.8)])
    text = "\n".join(lines)
    # as predicted: -16.7 % and +11.1 %; x ratio: 1.2 / 1.2 = 0 % and 0.8 / 0.9 = -11.1 %
    assert "MAPE 13.9%, max 16.7%, bias -2.8%; prediction x ratio: MAPE 5.6%, max 11.1%, bias -5.6%" in text
    assert "| 1.200 | 1.2 s | 1 s | -16.7% | 1.2 s | +0.0% | - | - |" in text
    assert "compute x ratio:" not in text  # no prediction split: nothing to scale
    # The probe times compute alone: scaled onto the predicted compute (0.5 of 1.0 s) only,
    # 1.0 + 0.5 x (1.2 - 1) = 1.1 s against 1.2 s measured, -8.3 %.
    rec = _rec("a", 1.2, 1.0, 1.2)
    rec["predicted"]["analytic"]["step_split_s"] = {"compute": 0.5, "copies": 0.2}
    text = "\n".join(drift_table([rec]))
    assert "| 1.2 s | +0.0% | 1.1 s | -8.3% |" in text and "compute x ratio: MAPE 8.3%" in text
    assert drift_table([{**_rec("c", 1.0, 1.0, 1.0), "machine_probe": {"skipped": "no compute profile"}}]) == []


@pytest.mark.torch
@pytest.mark.torchrun
@pytest.mark.slow
def test_a_real_probe_measures_both_ranks(tmp_path):
    pytest.importorskip("torch")
    point = {"model": "mnist_cnn", "dataset": "mnist", "batch": 16, "calibrated_step_s": 0.05, "ranks": 2}
    got = probe.measure(point, tmp_path / "probe", timeout_s=120)
    assert "error" not in got, got
    assert len(got["per_rank_s"]) == 2 and all(0 < t < 5 for t in got["per_rank_s"])
