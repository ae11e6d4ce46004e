"""The calibration fitters recover known parameters from synthetic measurements, and follow
scikit-learn's estimator contract (style.md s.6): fit() returns self, fitted values end in '_'."""

import numpy as np
import pytest
from simdl.analytic.costs import Rates, row_times

from simdl.calibrate.collectives import CollectiveFit, fit_with_holdout, held_out_split
from simdl.calibrate.compute import RooflineFit, Run
from simdl.calibrate.overlap import StrategyStepFit
from simdl.calibrate.ps import PSFit
from simdl.calibrate.records import read_jsonl
from simdl.collectives.cost import collective_time
from simdl.workload.library import load_workload
from simdl.workload.op_classes import op_class

SIZES = [4096 * 4**i for i in range(9)]  # 4 KB .. 256 MB


def synthetic_collectives(overhead, alpha, bw, factors=None, n=2, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        f = (factors or {}).get(c, 1.0)
        for m in SIZES:
            t = overhead + collective_time(c, m, n, bw * f, alpha, "auto")
            out.append(
                {"collective": c, "bytes": m, "group_size": n, "time_s": t * (1 + noise * rng.standard_normal())}
            )
    return out


def test_collective_fit_recovers_alpha_beta_and_follows_the_contract():
    X = synthetic_collectives(40e-6, 15e-6, 1.2e9, n=4)
    est = CollectiveFit()
    assert est.fit(X) is est
    assert not hasattr(CollectiveFit(), "alpha_s_")  # __init__ stores settings only
    assert est.alpha_s_ == pytest.approx(15e-6, rel=0.02)
    assert est.overhead_s_ == pytest.approx(40e-6, rel=0.05)
    assert est.bus_bandwidth_B_per_s_ == pytest.approx(1.2e9, rel=0.01)
    assert np.max(np.abs(est.residuals_)) < 1e-3
    assert est.quality_["r2"] > 0.999


def test_per_collective_bandwidth_factors_and_held_out_sizes():
    factors = {"all_gather": 0.5, "reduce_scatter": 0.25, "broadcast": 2.0}
    X = synthetic_collectives(30e-6, 50e-6, 1e9, factors, noise=0.02)
    fit_part, test_part = held_out_split(X)
    assert {x["bytes"] for x in fit_part}.isdisjoint({x["bytes"] for x in test_part})
    assert max(x["bytes"] for x in test_part) == max(SIZES)  # the largest size is an extrapolation check
    res = fit_with_holdout(X, per_collective_bandwidth=True)
    est = res["estimator"]
    for c, f in factors.items():
        assert est.bandwidth_factors_[c] == pytest.approx(f, rel=0.05)
    assert res["held_out"]["max_abs_rel_error"] < 0.10  # 2 % noise -> held-out within 10 %


def _synthetic_run(model, dataset, batch, rates):
    table = load_workload(model, dataset)
    rt = row_times.__wrapped__(table, batch, rates)
    return Run(
        f"{model}/b{batch}", table, batch, rt.fwd.copy(), rt.bwd.copy(), float(rt.fwd.sum()), float(rt.bwd.sum())
    )


def test_roofline_fit_recovers_efficiencies_and_predicts_a_held_out_model():
    P, BW = 166e9, 19e9
    true = Rates(
        flops=P * 0.45,
        memory_bandwidth=BW * 0.3,
        kernel_overhead=8e-6,
        activation_factor=1.0,
        matmul_call_overhead=60e-6,
    )
    runs = [_synthetic_run("mnist_cnn", "mnist", b, true) for b in (8, 32)]
    runs += [_synthetic_run("resnet18", "cifar10", b, true) for b in (4, 16)]
    est = RooflineFit(peak_flops=P, memory_bandwidth=BW)
    assert est.fit(runs) is est
    assert est.matmul_efficiency_ == pytest.approx(0.45, rel=0.02)
    assert est.memory_bandwidth_efficiency_ == pytest.approx(0.3, rel=0.05)
    assert est.kernel_launch_s_ == pytest.approx(8e-6, rel=0.05)
    assert est.matmul_call_overhead_s_ == pytest.approx(60e-6, rel=0.05)
    held = est.evaluate([_synthetic_run("densenet121", "cifar10", 4, true)])
    assert held["steps"]["max_abs_rel_error"] < 0.01
    assert set(held["by_class"]) >= {"conv", "norm", "activation"}


def test_evaluate_reports_each_configuration_as_the_mean_of_its_ranks():
    P, BW = 166e9, 19e9
    rates = Rates(flops=P * 0.45, memory_bandwidth=BW * 0.3, kernel_overhead=8e-6, activation_factor=1.0)
    est = RooflineFit(peak_flops=P, memory_bandwidth=BW).fit([_synthetic_run("mnist_cnn", "mnist", 8, rates)])
    exact = _synthetic_run("resnet18", "cifar10", 4, rates)
    # Two ranks measured the same configuration at once, one 30 % fast and one 10 % slow.
    fast = Run(
        exact.label, exact.table, 4, exact.fwd * 0.7, exact.bwd * 0.7, exact.step_fwd * 0.7, exact.step_bwd * 0.7
    )
    slow = Run(
        exact.label, exact.table, 4, exact.fwd * 1.1, exact.bwd * 1.1, exact.step_fwd * 1.1, exact.step_bwd * 1.1
    )
    q = est.evaluate([fast, slow])
    assert [round(r["step_rel_error"], 2) for r in q["runs"]] == [0.43, -0.09]  # 1/0.7 - 1, 1/1.1 - 1
    (cfg,) = q["configs"]
    assert cfg["ranks_or_repeats"] == 2 and cfg["step_rel_error"] == pytest.approx(1 / 0.9 - 1, abs=2e-3)


def test_op_classes():
    assert op_class("Conv2d") == "conv" and op_class("BatchNorm2d") == "norm"
    assert op_class("Sequential") == "other"


def _slowdown(f, size, half):
    return 1.0 + (f - 1.0) / (1.0 + size / half)


def _synthetic_step(theta, p):
    """Compute, then communication slowed by f (all_reduce by f_ar), both less for messages
    beyond the half size h, and delayed by a per call; free overlap (k = 0) hides ``overlap``
    seconds of it, serialisation (k = 1) none; FSDP steps pay u per unit."""
    k, f, f_ar, h, a, u = theta
    return (
        p["compute"]
        + _slowdown(f, p["size"], h) * p["comm"]
        + _slowdown(f_ar, p["size"], h) * p["comm_ar"]
        + a * p["calls"]
        + u * p["units"]
        - (1.0 - k) * p["overlap"]
    )


def _synthetic_points(truth, overlaps=(0.05, 0.1, 0.02)) -> list[dict]:
    """DDP (all-reduces), FSDP-full (gathers and reduce-scatters) and FSDP-none (all-reduces
    after copies) steps of three models (compute, comm, calls, message size, overlap), timed
    by ``truth``."""
    pts = []
    for (model, (comp, comm, calls, size)), ov in zip(
        {"a": (0.3, 0.1, 5, 1e6), "b": (0.5, 0.3, 40, 3e7), "c": (0.2, 0.2, 60, 4e8)}.items(), overlaps
    ):
        for v, scale, ar, extra in (
            ("ddp", 1.0, True, 0.0),
            ("fsdp-full", 2.0, False, 0.0),
            ("fsdp-none", 1.0, True, 0.07),
        ):
            p = {
                "model": model,
                "variant": v,
                "compute": comp + extra,
                "comm": 0.0 if ar else comm * scale,
                "comm_ar": comm * scale if ar else 0.0,
                "calls": calls * scale,
                "size": size,
                "units": 0 if v == "ddp" else calls // 5,
                "overlap": ov if v == "ddp" else 0.0,
            }
            p["measured_s"] = _synthetic_step(truth, p)
            pts.append(p)
    return pts


def test_strategy_step_fit_recovers_known_values_and_checks_held_out_models():
    pts = _synthetic_points((1.0, 1.6, 2.2, 5e7, 3e-3, 4e-3))
    est = StrategyStepFit().fit(pts, _synthetic_step)
    assert est.load_factor_ == pytest.approx(1.6, rel=1e-2)
    assert est.load_factor_all_reduce_ == pytest.approx(2.2, rel=1e-2)
    assert est.load_half_size_bytes_ == pytest.approx(5e7, rel=5e-2)
    assert est.load_overhead_s_ == pytest.approx(3e-3, rel=5e-2)
    assert est.unit_overhead_s_ == pytest.approx(4e-3, rel=5e-2)  # per FSDP unit, told apart from per call
    assert est.params()["fsdp_unit_overhead_us"] == pytest.approx(4e3, rel=5e-2)
    assert np.max(np.abs(est.residuals_)) < 1e-3
    assert np.min(np.abs(est.errors_before_)) > 0.05  # the defaults were wrong
    # Every model is predicted from a fit to the others.
    assert set(est.held_out_) == {"a", "b", "c"}
    assert all(abs(e) < 0.05 for h in est.held_out_.values() for e in h["rel_errors"].values())
    # A fit is bounded to physical values: k in [0, 5], f, f_ar >= 1, h in [1 MB, 3 GB], a >= 0.
    lo = StrategyStepFit().fit([dict(p, measured_s=p["compute"] * 0.5) for p in pts], _synthetic_step)
    assert 0.0 <= lo.interference_ <= 5.0 and lo.load_factor_ >= 1.0 and lo.load_overhead_s_ >= 0.0
    assert lo.load_factor_all_reduce_ >= 1.0 and 1e6 <= lo.load_half_size_bytes_ <= 3e9
    assert lo.interference_ == pytest.approx(0.0, abs=1e-6)  # steps faster than compute: k at its floor
    assert lo.at_bounds_.get("comm_compute_interference") == "lower"  # and the fit says so
    assert est.at_bounds_ == {}  # the known values are inside the bounds
    # A half size beyond every message measured leaves h unpinned: the fit flags it at its bound.
    far = StrategyStepFit().fit(_synthetic_points((1.0, 1.6, 2.2, 3e9, 3e-3, 4e-3)), _synthetic_step)
    assert far.at_bounds_.get("collective_load_half_size_MiB") == "upper"


def test_strategy_step_fit_holds_a_fixed_parameter_and_fits_the_rest():
    # Steps with no all-gather or reduce-scatter left to the factor f (the blocking calls are
    # priced as logged): f is held at 1, the others are still recovered.
    pts = [dict(p, comm=0.0) for p in _synthetic_points((1.0, 1.0, 2.2, 5e7, 3e-3, 0.0))]
    for p in pts:
        p["measured_s"] = _synthetic_step((1.0, 1.0, 2.2, 5e7, 3e-3, 0.0), p)
    est = StrategyStepFit(fixed={1: 1.0, 5: 0.0}).fit(pts, _synthetic_step)
    assert est.load_factor_ == 1.0 and est.unit_overhead_s_ == 0.0
    assert est.load_factor_all_reduce_ == pytest.approx(2.2, rel=1e-2)
    assert est.load_overhead_s_ == pytest.approx(3e-3, rel=5e-2)
    assert all(h["params"][1] == 1.0 for h in est.held_out_.values())


def test_strategy_step_fit_finds_interference_above_one_when_each_stream_slows_the_other():
    # Each concurrent second costs 1.5 s more: beyond serialising.
    est = StrategyStepFit().fit(
        _synthetic_points((1.5, 1.2, 1.2, 1e8, 2e-3, 1e-3), overlaps=(0.05, 0.1, 0.08)), _synthetic_step
    )
    assert est.interference_ == pytest.approx(1.5, rel=2e-2)


def test_ps_fit():
    rts = [{"bytes": m, "time_s": 2 * (50e-6 + m / 2e9)} for m in SIZES]
    ups = [{"streamed_bytes": 8 * m, "time_s": 8 * m / 10e9} for m in SIZES[3:]]
    est = PSFit().fit(rts, ups)
    assert est.latency_s_ == pytest.approx(50e-6, rel=0.02)
    assert est.bandwidth_B_per_s_ == pytest.approx(2e9, rel=0.02)
    assert est.update_bandwidth_B_per_s_ == pytest.approx(10e9, rel=0.02)


def test_ps_fit_over_rpc_separates_link_faults_copy_and_the_server_side():
    # One worker alone reaches 2 GB/s; above 32 MiB each received buffer faults at 0.2 ns/B,
    # a pull's answer is copied at 0.1 ns/B (into a fresh buffer); three workers at once
    # share a 3 GB/s server side.
    lat, bw1, phi, kappa, bws, c = 300e-6, 2e9, 0.2e-9, 0.1e-9, 3e9, 3
    rts = [{"bytes": m, "time_s": 2 * (50e-6 + m / 4e9)} for m in SIZES]
    rpc = [2**20 * k for k in (1, 4, 16, 64, 256)]

    def t(m, workers, pull):
        fresh = m if m > 32 * 2**20 else 0
        return lat + workers * m / (bws if workers > 1 else bw1) + fresh * phi * (1 + pull) + pull * m * kappa

    alone = [{"bytes": m, "push_time_s": t(m, 1, 0), "pull_time_s": t(m, 1, 1)} for m in rpc]
    together = [{"bytes": m, "workers": c, "push_time_s": t(m, c, 0), "pull_time_s": t(m, c, 1)} for m in rpc]
    est = PSFit().fit(rts, (), alone, together)
    assert est.transport_ == "rpc" and est.workers_ == [c]
    assert est.latency_s_ == pytest.approx(lat, rel=0.02)
    assert est.worker_bandwidth_B_per_s_ == pytest.approx(bw1, rel=0.02)
    assert est.receive_fault_s_per_byte_ == pytest.approx(phi, rel=0.02)
    assert est.response_copy_s_per_byte_ == pytest.approx(kappa, rel=0.02)
    assert est.bandwidth_B_per_s_ == pytest.approx(bws, rel=0.02)
    assert est.quality_["rpc_alone"]["max_abs_rel_error"] < 0.01
    # The process group's ping-pong stays what it was: the one-way latency between processes.
    assert est.pingpong_["latency_s"] == pytest.approx(50e-6, rel=0.02)
    # Without RPC records, the ping-pong is the PS link (profiles calibrated before them).
    old = PSFit().fit(rts)
    assert old.transport_ == "process group" and old.worker_bandwidth_B_per_s_ is None
    assert old.bandwidth_B_per_s_ == pytest.approx(4e9, rel=0.02)


def test_ps_fit_with_one_worker_at_once_takes_the_worker_link_for_the_server_side():
    # A 2-rank calibration has one server and one worker: its "all at once" records are the
    # alone ones again, and a free fit of the server side runs off to its bound (cpu-epyc-zen5,
    # 2026-12-01: 8,000,000 Gb/s). The server side is then the worker's link, marked unmeasured.
    lat, bw1 = 300e-6, 2e9
    rts = [{"bytes": m, "time_s": 2 * (50e-6 + m / 4e9)} for m in SIZES]
    rpc = [2**20 * k for k in (1, 4, 16, 64, 256)]
    # The together pass runs a little faster than the alone one, as on the VM.
    alone = [{"bytes": m, "push_time_s": lat + m / bw1, "pull_time_s": lat + m / bw1} for m in rpc]
    together = [
        {"bytes": m, "workers": 1, "push_time_s": 0.9 * (lat + m / bw1), "pull_time_s": 0.9 * (lat + m / bw1)}
        for m in rpc
    ]
    est = PSFit().fit(rts, (), alone, together)
    assert est.transport_ == "rpc" and est.workers_ == [1]
    assert not est.server_side_measured_
    assert est.bandwidth_B_per_s_ == pytest.approx(est.worker_bandwidth_B_per_s_)
    assert est.bandwidth_B_per_s_ == pytest.approx(bw1, rel=0.02)
    # With three workers at once the server side is fitted, as before.
    three = [dict(r, workers=3) for r in together]
    assert PSFit().fit(rts, (), alone, three).server_side_measured_


def test_jsonl_reader_skips_a_torn_last_line(tmp_path):
    p = tmp_path / "rank1.jsonl"
    p.write_text('{"type": "header"}\n{"type": "measurement", "key": "a"}\n{"type": "measurem')
    assert [r["type"] for r in read_jsonl(p)] == ["header", "measurement"]


def test_failure_reason_names_the_root_cause_rank():
    from simdl.calibrate.run import _failure_reason

    log = """Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16810)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 16810
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 16811)  (SIGKILL)
  traceback : Signal 9 (SIGKILL) received by PID 16811
"""
    assert _failure_reason(log) == "rank 1 exited with code -9 (Signal 9 (SIGKILL) received by PID 16811)"


# ---------------------------------------------------------------------------- size regimes

DENSE = [int(4096 * 2 ** (i / 2)) // 64 * 64 for i in range(33)]  # 4 KB .. 256 MB, 2 per octave


def _regime_data(curve, n=2, noise=0.0, seed=0, sizes=DENSE):
    rng = np.random.default_rng(seed)
    return [
        {
            "collective": curve.collective,
            "bytes": m,
            "group_size": n,
            "time_s": curve.time(m, n) * (1 + noise * rng.standard_normal()),
        }
        for m in sizes
    ]


def _true_curve(hard=True):
    from simdl.collectives.regimes import Regime, RegimeCurve

    # all_gather like gloo on the 2-core VM: bandwidth steps down at 10 MB per ring step (hard),
    # or changes gradually between 8 and 16 MB per step.
    lo, hi = (10e6, 10e6 + 1) if hard else (8e6, 16e6)
    return RegimeCurve("all_gather", 15e-6, (Regime(0, lo, 150e-6, 0.9e9), Regime(hi, 1e12, 3e-3, 0.55e9)))


def test_regime_fit_follows_the_estimator_contract_and_recovers_known_regimes():
    from simdl.calibrate.regimes import RegimeFit

    X = _regime_data(_true_curve(), noise=0.02)
    est = RegimeFit("all_gather", overhead_s=15e-6)
    assert not hasattr(est, "curve_")  # __init__ stores settings only
    assert est.fit(X) is est
    assert est.n_regimes_ == 2
    ((hi1, lo2),) = est.breakpoints_step_bytes_
    # The step lies between the two fitted ranges, which end and start at neighbouring grid
    # points (8.4 and 11.9 MB per step).
    assert hi1 < 10e6 < lo2 and lo2 / hi1 < 1.5
    r1, r2 = est.regimes_
    assert r1.bandwidth == pytest.approx(0.9e9, rel=0.05) and r1.alpha == pytest.approx(150e-6, rel=0.15)
    assert r2.bandwidth == pytest.approx(0.55e9, rel=0.05)
    assert len(est.residuals_) == len(X) and np.max(np.abs(est.residuals_)) < 0.08
    assert set(est.cv_error_) >= {1, 2} and est.cv_error_[2] < est.cv_error_[1]


def test_one_line_stays_one_regime_despite_noise():
    from simdl.calibrate.regimes import RegimeFit
    from simdl.collectives.regimes import Regime, RegimeCurve

    line = RegimeCurve("all_reduce", 10e-6, (Regime(0, 1e12, 80e-6, 1.5e9),))
    est = RegimeFit("all_reduce", overhead_s=10e-6).fit(_regime_data(line, noise=0.03, seed=1))
    assert est.n_regimes_ == 1
    assert est.regimes_[0].bandwidth == pytest.approx(1.5e9, rel=0.05)


def test_regime_fit_predicts_held_out_sizes_and_other_group_sizes():
    from simdl.calibrate.collectives import regimes_with_holdout

    # A gradual change: the held-out sizes inside it are predicted by the blend between regimes.
    # (A hard step inside a gap that the held-out split opens is not, unless it is the
    # allocator's: see test_regime_fit_steps_at_the_allocators_threshold_on_held_out_sizes.)
    true = _true_curve(hard=False)
    res = regimes_with_holdout(_regime_data(true, noise=0.02), "all_gather", overhead_s=15e-6)
    assert res["held_out"]["within_10pct"] == res["held_out"]["n"]  # 2 % noise -> all within 10 %
    # Fitted at 2 ranks, predicts 4 ranks as the ring does (the synthetic truth scales that way).
    est = res["estimator"]
    for m in (64e3, 8e6, 30e6, 256e6):
        assert est.curve_.time(m, 4) == pytest.approx(true.time(m, 4), rel=0.1)


def test_collective_points_take_the_lower_quartile_of_all_passes_chunks(tmp_path):
    import json

    from simdl.calibrate.fit import _collective_points, call_overheads
    from simdl.calibrate.records import load_stage

    d = tmp_path / "collectives"
    d.mkdir()
    for rank in (0, 1):
        recs = [{"type": "header", "rank": rank}]
        for k, chunks in enumerate(([1.0, 9.0], [3.0, 2.0], [4.0, 5.0], [8.0, 7.0])):
            # rank 1 is 0.5 s slower in every chunk: a chunk counts with its slowest rank.
            recs.append(
                {
                    "type": "measurement",
                    "key": f"world/all_reduce/4096/p{k}",
                    "scope": "world",
                    "collective": "all_reduce",
                    "bytes": 4096,
                    "group_size": 2,
                    "repeat": k,
                    "time_s": min(chunks) + 0.5 * rank,
                    "chunk_times_s": [c + 0.5 * rank for c in chunks],
                }
            )
        recs.append(
            {
                "type": "measurement",
                "key": "self/all_reduce/4096/p0",
                "scope": "self",
                "collective": "all_reduce",
                "bytes": 4096,
                "group_size": 1,
                "time_s": 1e-5,
                "chunk_times_s": [1e-5, 2e-5],
            }
        )
        (d / f"rank{rank}.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (p,) = _collective_points(load_stage(tmp_path, "collectives"), "world")
    chunks = [1.5, 9.5, 3.5, 2.5, 4.5, 5.5, 8.5, 7.5]
    assert p["time_s"] == pytest.approx(np.quantile(chunks, 0.25)) and p["n_chunks"] == 8
    assert p["time_s_passes"] == [1.5, 2.5, 4.5, 7.5]
    assert call_overheads(load_stage(tmp_path, "collectives")) == {"all_reduce": pytest.approx(1.25e-5)}
    # The point's own 95 % interval, from resampling whole passes, brackets its value and
    # stays inside the range of its chunks.
    lo, hi = p["time_s_ci95"]
    assert min(chunks) <= lo <= p["time_s"] <= hi <= max(chunks) and hi > lo


def test_quantile_interval_is_wide_for_scattered_passes_narrow_for_steady_ones():
    from simdl.calibrate.fit import quantile_interval

    rng = np.random.default_rng(1)
    steady = [list(1.0 + 0.01 * rng.standard_normal(4)) for _ in range(20)]
    # a bimodal machine: whole passes in a slow mode (a 4 ms tick on a 1 ms call), 6 of 20
    # passes fast: the lower quartile sits at the edge between the modes
    scattered = [list((1.0 if i < 6 else 4.0) + 0.01 * rng.standard_normal(4)) for i in range(20)]
    lo, hi = quantile_interval(steady, 0.25)
    assert hi / lo - 1 < 0.02
    lo, hi = quantile_interval(scattered, 0.25)
    assert hi / lo - 1 > 0.5
    assert quantile_interval(steady[:2], 0.25) is None  # too few passes to resample
    assert quantile_interval(steady, 0.25) == quantile_interval(steady, 0.25)  # a refit is identical


def test_held_out_misses_inside_the_points_own_interval_are_counted_apart():
    from simdl.calibrate.collectives import _held_out_errors

    pts = [
        {"bytes": 1 << 20, "collective": "all_reduce", "time_s": 1.0, "time_s_ci95": [0.7, 1.4]},
        {"bytes": 1 << 24, "collective": "all_reduce", "time_s": 2.0, "time_s_ci95": [1.95, 2.05]},
        {"bytes": 1 << 26, "collective": "all_reduce", "time_s": 4.0, "time_s_ci95": [3.9, 4.1]},
    ]
    ho = _held_out_errors(pts, [1.25, 2.5, 4.2])  # +25 % (noisy point), +25 % (steady point), +5 %
    assert ho["within_10pct"] == 1 and ho["n"] == 3
    assert ho["within_10pct_or_ci95"] == 2  # the first miss is inside its point's interval, the second is not
    assert ho["errors"][0]["measured_ci95_rel"] == [-0.3, 0.4]
    assert ho["median_ci95_halfwidth"] == pytest.approx(0.025)
    del pts[0]["time_s_ci95"]  # a point without an interval (published figures): no such count
    assert "within_10pct_or_ci95" not in _held_out_errors(pts, [1.25, 2.5, 4.2])


def test_profile_models_option_parses_and_rejects_bad_input():
    from simdl.calibrate.run import make_settings, parse_profile_models
    from simdl.errors import SimdlError

    assert parse_profile_models("vgg16:cifar10:48,24;validate.models:vgg16_w8:cifar10:16") == [
        ("vgg16", "cifar10", [24, 48]),
        ("validate.models:vgg16_w8", "cifar10", [16]),
    ]
    for bad, msg in (
        ("vgg16:cifar10", "accepted: MODEL:DATASET"),
        ("vgg17:cifar10:8", "unknown model"),
        ("vgg16:cifar10:1,2", ">= 2"),
        ("vgg16:cifar10:a", "integers"),
        ("vgg16:imagenet2:8", "imagenet2"),
    ):
        with pytest.raises(SimdlError, match=msg):
            parse_profile_models(bad)
    s = make_settings(
        nproc_per_node=2,
        quick=True,
        time_budget=None,
        output=None,
        profile_models="vgg16:cifar10:24,48;convnext_large:cifar10:24",
    )
    # vgg16 is a fit model of the roofline, so it stays in that fit; convnext_large is profiled only
    assert "convnext_large" in s["compute_profile_only"] and "vgg16" not in s["compute_profile_only"]
    assert "convnext_large:cifar10:24" in s["compute_models"] and s["strategy_models"]


def test_a_noisy_machine_is_named_in_the_calibration_report():
    from simdl.calibrate.jitter import NOISY_SIGMA, noise_warning
    from simdl.calibrate.report import format_report

    assert noise_warning(None) == "" and noise_warning(0.013) == "" and noise_warning(NOISY_SIGMA) == ""
    why = noise_warning(0.1298)
    assert "compute jitter 0.130" in why and "about 13 %" in why and "--repeats" in why
    report = {
        "provenance": {"ranks": 2, "host": ["vm"], "devices": ["cpu"], "backend": "gloo", "versions": {}},
        "strategies": {"compute_jitter": {"sigma": 0.1298}},
    }
    profile = {"name": "p", "efficiency": {"compute_jitter": {"value": 0.1298}}}
    assert f"warning: {why}" in format_report(report, profile).splitlines()
    report["strategies"]["compute_jitter"]["sigma"] = 0.013
    assert "warning" not in format_report(report, profile)


def test_step_jitter_is_robust_to_stalled_steps_and_pools_series_about_their_own_levels():
    import math

    from simdl.calibrate.jitter import MAD_TO_SD, StepJitterFit

    # Series a: log deviations +-0.1 (median absolute deviation 0.1) and one step stalled to 2x;
    # series b, five times slower: +-0.2 (MAD 0.2). Pooled by steps: sqrt((5 x 0.1^2 + 3 x 0.2^2) / 8).
    a = [math.exp(v) for v in (-0.1, 0.1, -0.1, 0.1, 0.0)] + [2.0]
    logs_a = [-0.1, 0.1, -0.1, 0.1, 0.0, math.log(2.0)]
    b = [5 * math.exp(v) for v in (-0.2, 0.2, 0.0)]
    f = StepJitterFit().fit(
        [
            {"label": "a", "step_times_s": a},
            {"label": "b", "step_times_s": b},
            {"label": "short", "step_times_s": [1.0, 2.0]},
        ]
    )
    med_a = 0.05  # median of logs_a
    mad_a = sorted(abs(v - med_a) for v in logs_a)
    mad_a = (mad_a[2] + mad_a[3]) / 2
    assert f.per_series_["a"] == pytest.approx(MAD_TO_SD * mad_a)
    assert f.per_series_["b"] == pytest.approx(MAD_TO_SD * 0.2)
    assert f.sigma_ == pytest.approx(math.sqrt((6 * f.per_series_["a"] ** 2 + 3 * f.per_series_["b"] ** 2) / 9))
    # The plain sd carries the stall: much larger than the robust one for series a alone.
    alone = StepJitterFit().fit([{"label": "a", "step_times_s": a}])
    assert alone.sd_ > 2 * alone.sigma_
    assert f.n_series_ == 2 and f.n_steps_ == 9
    with pytest.raises(ValueError):
        StepJitterFit().fit([{"step_times_s": [1.0, 2.0]}])


def test_roofline_fit_recovers_per_class_bandwidths_and_the_overlap_of_a_cpu_like_device():
    """Rows of a host CPU: FLOP and byte times add up (overlap 0) and each memory-bound class
    streams at its own rate; the fit finds both, and a held-out model's rows follow."""
    P, BW = 166e9, 22e9
    classes = {"norm": 0.29, "activation": 1.1, "pool": 0.25, "dropout": 0.66, "other": 0.48}
    true = Rates(
        flops=P * 0.8,
        memory_bandwidth=BW * 0.22,
        kernel_overhead=25e-6,
        activation_factor=1.0,
        matmul_call_overhead=60e-6,
        compute_memory_overlap=0.0,
        class_memory_bandwidth=tuple((c, BW * e) for c, e in classes.items()),
    )
    runs = [_synthetic_run("mnist_cnn", "mnist", b, true) for b in (16, 64)]
    runs += [_synthetic_run("resnet18", "cifar10", b, true) for b in (4, 32)]
    runs += [_synthetic_run("vgg16", "cifar10", b, true) for b in (2, 24)]
    est = RooflineFit(peak_flops=P, memory_bandwidth=BW).fit(runs)
    assert est.compute_memory_overlap_ == pytest.approx(0.0, abs=0.02)
    assert est.classes_ == ("norm", "activation", "pool", "dropout", "other")
    for c, e in classes.items():
        assert est.class_bandwidth_efficiency_[c] == pytest.approx(e, rel=0.05), c
    assert est.params()["memory_bandwidth_norm"] == est.class_bandwidth_efficiency_["norm"]
    held = est.evaluate([_synthetic_run("densenet121", "cifar10", 8, true)])
    assert held["steps"]["max_abs_rel_error"] < 0.01
    # The same runs fitted with one bandwidth and the plain roofline miss the held-out model.
    plain = RooflineFit(peak_flops=P, memory_bandwidth=BW, per_class_bandwidth=False, fit_overlap=False).fit(runs)
    assert plain.classes_ == () and plain.compute_memory_overlap_ == 1.0
    assert plain.evaluate([_synthetic_run("densenet121", "cifar10", 8, true)])["steps"]["max_abs_rel_error"] > 0.05


def test_roofline_fit_recovers_the_conv_weight_gradient_term_and_a_norm_call_cost():
    """A CPU whose convolutions accumulate their weight gradient image by image (at 0.7x the
    memory bandwidth) and whose batch norms cost 120 us a call: the fit finds both, and
    without the weight term it cannot follow ResNet-18 from batch 4 to 32."""
    P, BW = 156e9, 31e9
    true = Rates(
        flops=P * 0.8,
        memory_bandwidth=BW * 0.2,
        kernel_overhead=3.5e-6,
        activation_factor=1.0,
        matmul_call_overhead=150e-6,
        compute_memory_overlap=0.0,
        class_memory_bandwidth=(("norm", BW * 0.5),),
        class_call_overhead=(("norm", 120e-6),),
        conv_weight_grad_bandwidth=BW * 0.7,
    )
    runs = [_synthetic_run("mnist_cnn", "mnist", b, true) for b in (16, 64)]
    runs += [_synthetic_run("resnet18", "cifar10", b, true) for b in (4, 32)]
    runs += [_synthetic_run("vgg16", "cifar10", b, true) for b in (2, 24)]
    est = RooflineFit(
        peak_flops=P,
        memory_bandwidth=BW,
        kernel_launch_s=3.5e-6,
        conv_weight_grad=True,
        call_overhead_classes=("norm",),
    ).fit(runs)
    assert est.conv_weights_ and est.call_classes_ == ("norm",)
    assert est.conv_weight_grad_efficiency_ == pytest.approx(0.7, rel=0.05)
    assert est.class_call_overhead_s_["norm"] == pytest.approx(120e-6, rel=0.05)
    assert est.params()["call_overhead_norm_us"] == pytest.approx(120.0, rel=0.05)
    assert est.evaluate([_synthetic_run("densenet121", "cifar10", 8, true)])["steps"]["max_abs_rel_error"] < 0.01
    plain = RooflineFit(peak_flops=P, memory_bandwidth=BW, kernel_launch_s=3.5e-6).fit(runs)
    assert not plain.conv_weights_ and "conv_weight_grad_bandwidth" not in plain.params()
    assert plain.quality_["steps"]["max_abs_rel_error"] > 0.05


def test_a_class_without_rows_in_the_fit_runs_keeps_the_shared_bandwidth():
    P, BW = 166e9, 19e9
    true = Rates(flops=P * 0.45, memory_bandwidth=BW * 0.3, kernel_overhead=8e-6, activation_factor=1.0)
    est = RooflineFit(peak_flops=P, memory_bandwidth=BW).fit(
        [_synthetic_run("mnist_cnn", "mnist", b, true) for b in (8, 32)]
    )
    assert "norm" not in est.classes_  # mnist_cnn has no batch norm
    assert "memory_bandwidth_norm" not in est.params()


def test_collective_passes_reach_the_collectives_script_and_bad_values_are_one_line_errors(tmp_path):
    from simdl.calibrate.run import _torchrun_cmd, make_settings
    from simdl.errors import SimdlError

    s = make_settings(nproc_per_node=2, quick=False, time_budget=None, output=None, collective_passes=28)
    cmd = _torchrun_cmd(s, "collectives", tmp_path)
    assert cmd[cmd.index("--passes") + 1] == "28"
    assert "--passes" not in _torchrun_cmd(s, "compute", tmp_path)
    default = make_settings(nproc_per_node=2, quick=False, time_budget=None, output=None)
    assert default["collective_passes"] is None and "--passes" not in _torchrun_cmd(default, "collectives", tmp_path)
    with pytest.raises(SimdlError, match="--collective-passes 0: must be >= 1"):
        make_settings(nproc_per_node=2, quick=False, time_budget=None, output=None, collective_passes=0)


def test_conv_call_cost_from_the_tiny_conv_microbenchmarks():
    from simdl.calibrate.fit import conv_call_overhead

    # Each point: 3 calls of 150 us (fwd, input grad, weight grad) plus the FLOPs at 50 GFLOP/s.
    pts = [{"time_s": 450e-6 + f / 50e9, "flops": f} for f in (1e5, 1e6, 4e6, 1e7)]
    assert conv_call_overhead(pts, 5e-6) == pytest.approx(145e-6, rel=0.02)  # less one launch per call
    assert conv_call_overhead([], 5e-6) is None


def test_regime_fit_steps_at_the_allocators_threshold_on_held_out_sizes():
    """gloo's all_gather allocates its whole output per call; above glibc's 32 MiB threshold the
    output is mapped fresh. A hard step there opens a gap in the held-out split; given the
    threshold, the fit predicts the held-out sizes inside it by the regime on their side."""
    from simdl.calibrate.collectives import regimes_with_holdout
    from simdl.collectives.regimes import Regime, RegimeCurve

    thr = 32 * 2**20
    fast, slow = Regime(0, 1e12, 500e-6, 0.6e9), Regime(0, 1e12, 1.2e-3, 0.27e9)
    one = {r: RegimeCurve("all_gather", 120e-6, (r,)) for r in (fast, slow)}
    X = [
        {"collective": "all_gather", "bytes": m, "group_size": 2, "time_s": one[fast if m < thr else slow].time(m, 2)}
        for m in DENSE
    ]
    blind = regimes_with_holdout(X, "all_gather", overhead_s=120e-6)
    told = regimes_with_holdout(X, "all_gather", overhead_s=120e-6, temp_threshold=thr)
    errs = {e["bytes"]: e["rel_error"] for e in told["held_out"]["errors"]}
    gap_size = max(b for b in errs if b < thr)  # the held-out size just below the threshold
    assert abs(errs[gap_size]) < 0.02
    blind_errs = {e["bytes"]: e["rel_error"] for e in blind["held_out"]["errors"]}
    assert abs(blind_errs[gap_size]) > 0.10  # blending across the gap misses it
    assert told["held_out"]["within_10pct"] == told["held_out"]["n"]


def test_the_threshold_comes_from_the_backend_of_the_run(tmp_path):
    from simdl.analytic.costs import GLIBC_MMAP_THRESHOLD_MAX

    from simdl.calibrate.fit import temp_threshold
    from simdl.calibrate.records import StageRecords

    st = StageRecords("collectives", tmp_path, True, headers={0: {"backend": "gloo"}, 1: {"backend": "gloo"}})
    assert temp_threshold(st) == GLIBC_MMAP_THRESHOLD_MAX
    st.headers = {0: {"backend": "nccl"}}
    assert temp_threshold(st) is None


def test_compute_models_replace_the_fit_set_and_hold_out_the_last():
    """--compute-models (the quick GPU calibration of validate.gpu_check): the compute stage
    measures exactly these, fits on all but the last and holds the last out; without the
    strategies stage no strategy model is added."""
    from pathlib import Path

    from simdl.calibrate.run import _torchrun_cmd, make_settings
    from simdl.errors import SimdlError

    s = make_settings(
        nproc_per_node=1,
        quick=True,
        time_budget=50,
        output=None,
        stages=("compute",),
        compute_models="resnet18:cifar10:32,128;vgg16:cifar10:32,128",
    )
    assert s["compute_models"] == "resnet18:cifar10:32,128;vgg16:cifar10:32,128"
    assert s["compute_held_out"] == ["vgg16"] and s["compute_fit_models"] == 2
    assert s["compute_profile_only"] == []
    cmd = _torchrun_cmd(s, "compute", Path("/tmp/x"))
    assert cmd[cmd.index("--models") + 1] == s["compute_models"]
    with pytest.raises(SimdlError, match="^--compute-models 'resnet18:cifar10': accepted"):
        make_settings(nproc_per_node=1, quick=True, time_budget=None, output=None, compute_models="resnet18:cifar10")
