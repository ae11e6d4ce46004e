"""The band around a prediction (simdl.band): from the profile's calibration, or none."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from simdl.band import band, step_spread
from simdl.cli import main
from simdl.cluster import load_cluster

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[1] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def test_band_is_symmetric_on_the_log_scale_and_holds_the_level():
    lo, hi = band(2.0, 0.1, 0.9)
    # z(0.95) = 1.6449: exp(+-0.16449)
    assert math.isclose(lo, 2.0 * math.exp(-0.164485), rel_tol=1e-5)
    assert math.isclose(hi, 2.0 * math.exp(0.164485), rel_tol=1e-5)
    assert math.isclose(lo * hi, 4.0)
    lo50, hi50 = band(2.0, 0.1, 0.5)
    assert lo < lo50 < 2.0 < hi50 < hi
    with pytest.raises(ValueError, match="level 1.5"):
        band(2.0, 0.1, 1.5)


def test_spread_adds_held_out_error_and_jitter_in_quadrature():
    spec = load_cluster(lab("cpu-xeon-emr-b"))
    s = step_spread(spec)
    # The shipped profile's 20 held-out strategy steps and its compute jitter 0.1298.
    assert s.model_points == 20 and math.isclose(s.jitter, 0.1298)
    errs = [e for h in spec.calibration["strategy_fit"]["held_out"].values() for e in h["rel_errors"].values()]
    assert math.isclose(s.model, math.sqrt(sum(math.log1p(e) ** 2 for e in errs) / len(errs)))
    assert math.isclose(s.sigma, math.hypot(s.model, 0.1298))
    # Without the jitter only the model's part is left; without held-out errors there is no band.
    no_jitter = dataclasses.replace(spec, efficiency=dataclasses.replace(spec.efficiency, compute_jitter=None))
    assert step_spread(no_jitter).sigma == pytest.approx(s.model)
    assert step_spread(dataclasses.replace(spec, calibration={})) is None


def test_predict_carries_the_band_of_a_calibrated_profile_and_none_for_a_preset(capsys):
    assert (
        main(
            [
                "predict",
                "--model",
                "vgg16",
                "--strategy",
                "ddp",
                "--gpus",
                "2",
                "--cluster",
                lab("cpu-xeon-emr-b"),
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    lo, hi = d["iteration_time_band_s"]
    sigma = step_spread(load_cluster(lab("cpu-xeon-emr-b"))).sigma
    assert (lo, hi) == pytest.approx(band(d["iteration_time_s"], sigma))
    assert "held-out step error" in d["config"]["iteration_time_band"]
    assert (
        main(["predict", "--model", "vgg16", "--strategy", "ddp", "--gpus", "2", "--cluster", lab("cpu-xeon-emr-b")])
        == 0
    )
    assert "    band: " in capsys.readouterr().out
    assert main(["predict", "--model", "vgg16", "--strategy", "ddp", "--gpus", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["iteration_time_band_s"] is None and "iteration_time_band" not in d["config"]


def test_the_simulators_run_keeps_its_type_with_the_band_and_note(tmp_path, capsys):
    # simdl trace/plot ask predict for the SimRun; on a profile whose steps wander
    # (cpu-xeon-emr-b) predict once treated it as a Result and raised (2026-11-29, 18:53-21:40).
    import simdl
    from simdl.sim.engine import SimRun

    run = simdl.predict(
        model="resnet18", strategy="ddp", gpus=2, cluster=lab("cpu-xeon-emr-b"), engine="sim", return_run=True
    )
    assert isinstance(run, SimRun) and run.result.iteration_time_band_s is not None
    assert any("wander" in n for n in run.result.notes)
    out = tmp_path / "t.json"
    assert (
        main(
            [
                "trace",
                "--model",
                "resnet18",
                "--strategy",
                "fsdp",
                "--gpus",
                "2",
                "--cluster",
                lab("cpu-xeon-emr-b"),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert out.is_file() and "wrote" in capsys.readouterr().out
