"""DeepSpeed ZeRO in the calibration's strategies stage: the host-cost fit, and the stage
without ZeRO steps where deepspeed does not import (the plain environment)."""

import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simdl.calibrate.zero_fit import NAMES, ZeROHostFit

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
ROOT = Path(__file__).resolve().parents[2]


def _step(theta, p):
    """A step: compute (stage 1's post-backward reduction 5 ms more) plus each parameter's,
    (stage 3) each module call's and (stage 1) each parameter's extra-pass host time."""
    ps, ms, ls = theta
    host = ps * p["params"] * (p["stage"] >= 1) + ms * p["calls"] * (p["stage"] == 3)
    return p["compute"] + 0.005 * (p["stage"] == 1) + host + ls * p["params"] * (p["stage"] == 1)


def _points(truth, stages=(2, 3)):
    pts = []
    for model, comp, params, calls in (("a", 0.2, 62, 76), ("b", 0.35, 110, 132), ("c", 0.5, 160, 220)):
        for stage in stages:
            p = {"model": model, "batch": 16, "stage": stage, "compute": comp, "params": params, "calls": calls}
            p["measured_s"] = _step(truth, p)
            pts.append(p)
    return pts


def test_zero_host_fit_recovers_both_costs_and_checks_held_out_models():
    est = ZeROHostFit().fit(_points((4e-4, 2.5e-3, 0.0)), _step)
    assert est.param_s_ == pytest.approx(4e-4, rel=1e-3)
    assert est.module_s_ == pytest.approx(2.5e-3, rel=1e-3)
    want = {"param_overhead_us": 400.0, "module_overhead_us": 2500.0, "stage1_loop_overhead_us": 0.0}
    assert est.params() == pytest.approx(want, rel=1e-3)
    assert np.max(np.abs(est.residuals_)) < 1e-4 and np.min(np.abs(est.errors_before_)) > 0.05
    assert set(est.held_out_) == {"model a", "model b", "model c"}
    assert est.held_ == ["stage1_loop_overhead_us"] and "held at 0" in est.loop_note()  # no zero1 step
    assert all(abs(e) < 1e-3 for h in est.held_out_.values() for e in h["rel_errors"].values())


def test_zero_host_fit_holds_the_per_call_cost_without_a_stage_3_step_and_holds_out_batches():
    pts = [
        dict(p, batch=b) for p in _points((4e-4, 2.5e-3, 0)) if p["stage"] == 2 and p["model"] == "a" for b in (8, 16)
    ]
    est = ZeROHostFit().fit(pts, _step)
    assert est.module_s_ == 0.0 and est.held_ == ["module_overhead_us", "stage1_loop_overhead_us"]
    assert est.param_s_ == pytest.approx(4e-4, rel=1e-3)
    assert set(est.held_out_) == {"batch 8", "batch 16"}  # one model: each batch predicted from the other


def test_zero_host_fit_recovers_stage_1_s_pass_per_parameter_beyond_the_engine_s_difference():
    truth = (4e-4, 2.5e-3, 6.4e-5)
    est = ZeROHostFit().fit(_points(truth, stages=(1, 2, 3)), _step)
    assert (est.param_s_, est.module_s_) == pytest.approx(truth[:2], rel=1e-3)  # from stages 2 and 3, as before
    assert est.loop_s_ == pytest.approx(6.4e-5, rel=1e-6) and not est.loop_clamped_ and est.held_ == []
    assert est.params()["stage1_loop_overhead_us"] == pytest.approx(64.0, rel=1e-6)
    a = next(r for r in est.loop_pairs_ if r["model"] == "a")
    # the pass's count is the engine's (62 parameters); the 5 ms the engine itself predicts is not the pass's
    assert a["params"] == pytest.approx(62) and a["predicted_diff_at_0_s"] == pytest.approx(0.005)
    assert a["per_param_us"] == pytest.approx(64.0)
    assert set(est.held_out_) == {"model a", "model b", "model c"}
    for h in est.held_out_.values():  # each model's zero1 step predicted from the other two models' pairs
        assert h["loop_pairs"] == 2 and h["params"]["stage1_loop_overhead_us"] == pytest.approx(64.0, rel=1e-6)
        assert any(k.startswith("zero1/") for k in h["rel_errors"])
        assert all(abs(e) < 1e-3 for e in h["rel_errors"].values())
    assert "64.0 us per parameter" in est.loop_note()


def test_zero_host_fit_clamps_a_negative_stage_1_difference_to_0_and_says_so():
    pts = _points((4e-4, 2.5e-3, 0.0), stages=(1, 2, 3))
    for p in pts:
        if p["stage"] == 1:
            p["measured_s"] -= 1e-5 * p["params"]  # stage 1 measured faster than the engine's difference: noise
    est = ZeROHostFit().fit(pts, _step)
    assert est.loop_s_ == 0.0 and est.params()["stage1_loop_overhead_us"] == 0.0
    assert est.loop_clamped_ and est.loop_raw_s_ == pytest.approx(-1e-5, rel=1e-6)
    assert "-10.0 us per parameter" in est.loop_note() and "clamped to 0" in est.loop_note()
    assert all(h["loop_clamped"] and h["params"]["stage1_loop_overhead_us"] == 0.0 for h in est.held_out_.values())


@pytest.mark.skipif(HAS_DEEPSPEED, reason="the plain environment has no deepspeed")
def test_without_deepspeed_the_zero_steps_are_skipped_with_a_one_line_note(tmp_path):
    from simdl.calibrate.deepspeed_check import deepspeed_missing, zero_steps_setting
    from simdl.calibrate.run import _torchrun_cmd, make_settings

    why = deepspeed_missing()
    assert why and "import deepspeed" in why and "\n" not in why
    s = make_settings(nproc_per_node=2, quick=True, time_budget=None, output=None)
    out = io.StringIO()
    assert zero_steps_setting(s, out) == {"run": False, "note": why}
    assert out.getvalue().count("\n") == 1 and "ZeRO steps skipped" in out.getvalue()
    assert "--zero" not in _torchrun_cmd(s, "strategies", tmp_path)
    zero_steps_setting(s, out)  # decided once per run: a resumed run says nothing more
    assert out.getvalue().count("\n") == 1
    s["zero_steps"] = {"run": True, "note": ""}
    assert "--zero" in _torchrun_cmd(s, "strategies", tmp_path)


def test_fit_without_zero_steps_records_why_and_writes_nothing(tmp_path):
    from simdl.calibrate import profile_steps

    class Run:
        prov = {"settings": {"zero_steps": {"run": False, "note": "'import deepspeed' fails under python"}}}
        ranks = 2
        tag = "test"

    from simdl.calibrate.report_strategies import zero_fit_lines

    strat = {"ddp/resnet18/16": {"variant": "ddp", "model": "resnet18", "batch": 16, "step_s": 0.1}}
    rep: dict = {}
    profile: dict = {"strategies": {}}
    profile_steps._zero(Run(), profile, rep, strat)
    assert rep["zero"] == {"skipped": "'import deepspeed' fails under python"} and rep["zero_kept"] == {}
    assert profile == {"strategies": {}}
    assert zero_fit_lines(rep["zero"], rep["zero_kept"]) == [
        "ZeRO host costs: not fitted ('import deepspeed' fails under python); the base's kept: none (absent = 0)"
    ]
    # a base with all three costs keeps each, stage 1's pass included, and the report line names them
    base = {k: {"value": v, "kind": "calibrated", "source": "base"} for k, v in zip(NAMES, (142, 0, 64))}
    profile = {"strategies": {"zero": {k: dict(v) for k, v in base.items()}}}
    profile_steps._zero(Run(), profile, rep, strat)
    assert profile == {"strategies": {"zero": base}}
    assert zero_fit_lines(rep["zero"], rep["zero_kept"]) == [
        "ZeRO host costs: not fitted ('import deepspeed' fails under python); the base's kept: "
        "param_overhead_us 142, module_overhead_us 0, stage1_loop_overhead_us 64"
    ]


def test_zero_steps_are_kept_out_of_the_ddp_fsdp_fits():
    from simdl.calibrate.profile_strategy_fit import _spmd_variant, _zero_variant

    assert _spmd_variant("ddp") and not _zero_variant("ddp")
    assert _zero_variant("zero3") and not _spmd_variant("zero3")


@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed")
def test_strategies_stage_trains_zero_steps_under_real_deepspeed(tmp_path):
    import json

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += [str(ROOT / "calibration" / "strategies.py"), "--out", str(tmp_path), "--budget", "300"]
    cmd += ["--zero", "--models", "mnist_cnn:mnist:8", "--iters", "2", "--warmup", "1"]
    cmd += ["--variants", "zero1,zero2,zero3"]  # not --quick: it leaves zero1 out
    subprocess.run(cmd, check=True, timeout=900, cwd=ROOT, capture_output=True)
    rows = [json.loads(x) for x in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    got = {r["variant"]: r for r in rows if r.get("kind") == "strategy"}
    assert set(got) == {"zero1", "zero2", "zero3"}
    assert all(not r.get("skipped") and r["step_s"] > 0 for r in got.values()), got
    assert [r["variant"] for r in rows if r.get("kind") == "strategy"] == ["zero2", "zero3", "zero1"]


def test_fit_recovers_the_costs_from_zero_steps_and_writes_the_profile_section(tmp_path):
    import dataclasses

    from simdl.calibrate import profile_steps
    from simdl.calibrate.profile_strategy_fit import _step_kwargs
    from simdl.cluster.spec import CLUSTER_DIR, load_cluster, raw_preset
    from simdl.predict import predict
    from simdl.provenance import Sourced

    raw = raw_preset(CLUSTER_DIR / "cpu-local.yaml")
    raw["compute_profile"]["file"] = str((CLUSTER_DIR / raw["compute_profile"]["file"]).resolve())
    raw.get("strategies", {}).pop("zero", None)
    truth = load_cluster("cpu-local")
    truth = dataclasses.replace(
        truth,
        strategies=truth.strategies.with_zero(
            param_overhead=Sourced(3e-4, "assumed", "t"),
            module_overhead=Sourced(2e-3, "assumed", "t"),
            loop_overhead=Sourced(5e-5, "assumed", "t"),
        ),
    )
    raw["strategies"].setdefault("zero", {})["stage1_loop_overhead_us"] = {
        "value": 999,
        "kind": "measured",
        "source": "b",
    }
    strat = {}
    for model, batch in (("resnet18", 16), ("mnist_cnn", 32)):
        for v in ("zero1", "zero2", "zero3"):
            m = {"variant": v, "model": model, "dataset": "cifar10" if model == "resnet18" else "mnist", "batch": batch}
            m["step_s"] = predict(cluster=truth, **_step_kwargs(m, 2)).iteration_time_s
            strat[f"{v}/{model}/{batch}"] = m

    class Run:
        prov: dict = {"settings": {}}
        ranks = 2
        tag = "test run"

    rep: dict = {}
    profile_steps._zero(Run(), raw, rep, strat)
    z = raw["strategies"]["zero"]
    assert z["param_overhead_us"]["value"] == pytest.approx(300, rel=1e-2)
    assert z["module_overhead_us"]["value"] == pytest.approx(2000, rel=1e-2)
    assert (
        z["param_overhead_us"]["kind"] == "calibrated" and "6 measured ZeRO steps" in z["param_overhead_us"]["source"]
    )
    # stage 1's pass: the base's 999 (another host's) replaced by the fit's, with its source
    loop = z["stage1_loop_overhead_us"]
    assert loop["value"] == pytest.approx(50, rel=1e-2) and loop["kind"] == "calibrated"
    assert loop["source"].startswith("test run: stage 1's extra pass") and "ZeRO-1 minus ZeRO-2" in loop["source"]
    assert "resnet18/16:" in loop["source"] and "mnist_cnn/32:" in loop["source"] and "clamped" not in loop["source"]
    assert set(rep["zero"]["held_out"]) == {"model mnist_cnn", "model resnet18"}
    assert rep["zero"]["held_out_max_abs_rel_error"] < 0.01
    assert rep["zero"]["loop"]["held_out_max_abs_rel_error_zero1"] < 0.01 and not rep["zero"]["loop"]["clamped"]
    from simdl.calibrate.report_strategies import zero_fit_lines

    lines = zero_fit_lines(rep["zero"])
    assert lines[1].startswith("  stage 1's extra pass: 50") and "stage-1 pass 50" in lines[-1]
