"""Collective calls logged in strategy steps: pairing the ranks, splitting waiting from
transfer (simdl.calibrate.in_step), and the logger itself (calibration/strategies.py)."""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from simdl.calibrate.in_step import in_step_collectives, summarise

MS = 1_000_000  # ns


def _recs(calls_per_rank):
    return [{"collective_calls": c, "calls_block": True} for c in calls_per_rank]


def test_waiting_for_the_last_rank_is_split_from_the_transfer():
    # rank 1 enters 4 ms after rank 0; both leave at 10 ms: 6 ms of transfer, rank 0 waited 4.
    r0 = [[0, "all_gather", 1000, 0, 10 * MS], [1, "all_gather", 1000, 20 * MS, 23 * MS]]
    r1 = [[0, "all_gather", 1000, 4 * MS, 10 * MS], [1, "all_gather", 1000, 20 * MS, 23 * MS]]
    c = in_step_collectives(_recs([r0, r1]))
    assert c["world"] == 2 and c["steps"] == 2
    (_, n, in_call, transfer), second = c["calls"]
    assert n == 1000
    assert in_call == pytest.approx((10 + 6) / 2 * 1e-3)
    assert transfer == pytest.approx(6e-3)
    assert second[2:] == pytest.approx((3e-3, 3e-3))


def test_ranks_that_logged_different_calls_are_not_paired():
    r0 = [[0, "all_gather", 1000, 0, 1]]
    assert in_step_collectives(_recs([r0, [[0, "all_gather", 2000, 0, 1]]])) is None
    assert in_step_collectives(_recs([r0, r0 + r0])) is None
    assert in_step_collectives(_recs([r0, []])) is None


def test_summary_per_step_against_idle_curves_and_the_charge():
    r = [[s, "reduce_scatter", 4096, s * 100 * MS, s * 100 * MS + 8 * MS] for s in range(4)]
    c = in_step_collectives(_recs([r, r]))
    out = summarise(c, idle=lambda coll, n: 4e-3, model=lambda coll, n: 12e-3)
    t = out["total"]
    assert t["calls"] == 1 and t["in_call_s"] == pytest.approx(8e-3) and t["waiting_s"] == pytest.approx(0.0)
    assert t["transfer_over_idle"] == pytest.approx(2.0)
    assert t["model_over_in_call"] == pytest.approx(1.5)
    assert set(out["per_step"]) == {"reduce_scatter"}


def _calibration_module(name: str):
    """A script of calibration/ (not a package) loaded as a module."""
    path = Path(__file__).resolve().parents[2] / "calibration" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"calibration_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _strategies_module():
    return _calibration_module("strategies")


def test_call_timer_logs_the_calls_fsdp2_makes_and_restores_torch_distributed(monkeypatch):
    seen = []
    monkeypatch.setattr(dist, "all_reduce", lambda t, **kw: seen.append(("ar", t.numel())))
    monkeypatch.setattr(
        dist, "reduce_scatter_single", lambda **kw: seen.append(("rs", kw["input"].numel())), raising=False
    )
    monkeypatch.setattr(
        dist, "all_gather_single", lambda out, inp, **kw: seen.append(("ag", out.numel())), raising=False
    )
    before = dist.all_reduce
    timer = _strategies_module().CallTimer()
    with timer:
        dist.all_reduce(torch.zeros(10))  # not in a timed step: run, not logged
        timer.step = 3
        dist.all_reduce(torch.zeros(10))
        # FSDP2's call forms (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py)
        dist.reduce_scatter_single(output=torch.zeros(5), input=torch.zeros(10), group=None, op=None, async_op=False)
        dist.all_gather_single(
            torch.zeros(8, dtype=torch.float64), torch.zeros(4, dtype=torch.float64), group=None, async_op=False
        )
    assert dist.all_reduce is before
    assert seen == [("ar", 10), ("ar", 10), ("rs", 10), ("ag", 8)]
    assert [c[:3] for c in timer.calls] == [[3, "all_reduce", 40], [3, "reduce_scatter", 40], [3, "all_gather", 64]]
    assert all(c[4] >= c[3] for c in timer.calls)


def _calls(model_scale, steps=2, late_ms=1):
    """Two ranks, per step one all_gather and one reduce_scatter; rank 1 arrives ``late_ms``
    late. Transfers take ``model_scale`` x their idle wire time (idle: 1 ms fixed + 1 ns/byte)."""
    r0, r1 = [], []
    t = 0
    for s in range(steps):
        for coll, n in (("all_gather", 4_000_000), ("reduce_scatter", 8_000_000)):
            dur = int((1e-3 + n * 1e-9 * model_scale[coll]) * 1e9)
            r0.append([s, coll, n, t, t + late_ms * MS + dur])
            r1.append([s, coll, n, t + late_ms * MS, t + late_ms * MS + dur])
            t += 50 * MS
    return in_step_collectives(_recs([r0, r1]))


def test_blocking_fit_recovers_factors_and_wait_and_predicts_a_held_out_model():
    from simdl.calibrate.in_step import BlockingFit

    scale = {"all_gather": 1.3, "reduce_scatter": 1.6}
    # Waits proportional to compute: 2 calls x 1 ms late / 2 ranks = 1 ms per step per 20 ms
    # of compute, 2 ms per 40 ms.
    rows = [
        {"model": m, "key": f"fsdp-full/{m}/8", "calls": _calls(scale, late_ms=late), "compute_s": comp}
        for m, late, comp in (("a", 1, 0.02), ("b", 2, 0.04), ("c", 1, 0.02))
    ]
    idle = lambda coll, n: (1e-3, n * 1e-9)  # noqa: E731
    bf = BlockingFit().fit(rows, idle)
    assert bf.factors_ == pytest.approx(scale, rel=1e-3)
    assert bf.wait_ == pytest.approx(0.05, rel=1e-3)
    assert set(bf.held_out_) == {"a", "b", "c"}
    for h in bf.held_out_.values():
        (v,) = h.values()
        assert abs(v["rel_error"]) < 1e-3
    # a model whose calls run slower than the others' is predicted too fast
    rows[0]["calls"] = _calls({"all_gather": 2.6, "reduce_scatter": 3.2})
    bf = BlockingFit().fit(rows, idle)
    assert bf.held_out_["a"]["fsdp-full/a/8"]["rel_error"] < -0.3


def test_copy_fit_recovers_the_factor_and_predicts_a_held_out_model():
    from simdl.calibrate.in_step import CopyFit

    pts = [
        {"model": m, "key": f"{v}/{m}/16", "measured_s": 4.0 * p, "predicted_s": p}
        for m, base in (("a", 0.02), ("b", 0.05), ("c", 0.1))
        for v, p in (("fsdp-full", base), ("ddp", base / 2))
    ]
    pts.append({"model": "c", "key": "tiny", "measured_s": 0.001, "predicted_s": 0.0001})  # below min_s: left out
    f = CopyFit().fit(pts)
    assert f.factor_ == pytest.approx(4.0) and len(f.points_) == 6
    assert max(abs(r) for r in f.residuals_) < 1e-9
    assert set(f.held_out_) == {"a", "b", "c"}
    assert all(abs(e) < 1e-9 for h in f.held_out_.values() for e in h["rel_errors"].values())
    # a model whose copies are slower than the others': its held-out error shows it
    pts[0]["measured_s"] *= 2
    pts[1]["measured_s"] *= 2
    f = CopyFit().fit(pts)
    assert f.held_out_["a"]["factor"] == pytest.approx(4.0)
    assert f.held_out_["a"]["rel_errors"]["fsdp-full/a/16"] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="at least"):
        CopyFit().fit([{"model": "a", "key": "k", "measured_s": 1e-4, "predicted_s": 1e-4}])


def test_quick_gpu_microbenchmarks_stay_on_the_declared_device():
    """The quick CUDA set (built here on meta, which allocates nothing): GPU-sized GEMMs in fp32
    and bf16, no host page-fault benchmarks, and the lazily built stream benchmarks made on the
    device they were declared for, not on the CPU of the later call."""
    import torch

    mod = _calibration_module("compute")
    out = []
    with torch.device("meta"):
        mod._micro(True, out, cuda=True)
    keys = [k for k, _, _ in out]
    assert "gemm/8192" in keys and "gemm_bf16/8192" in keys and not any(k.startswith("fault/") for k in keys)
    assert {d["op_class"] for _, d, _ in out} >= {"gemm", "gemm_bf16", "conv", "elementwise", "launch", "stream"}
    lazy = next(fn for k, _, fn in out if k.startswith("stream/copy/"))
    lazy()  # made and run outside the context
    assert lazy.fn.__closure__ is not None
    assert {c.cell_contents.device.type for c in lazy.fn.__closure__} == {"meta"}
