"""Fit every parameter group from a calibration run directory.

:func:`fit_run` reads the raw records (:mod:`.records`), runs the estimators and returns a
report (fitted values, fit quality, held-out errors) that :mod:`.profile` turns into a
cluster profile. Groups:

* collectives -- per collective and jointly (what the profile holds: one alpha-beta model per
  scope), each with a held-out check on message sizes left out of the fit;
* compute -- the per-row roofline on the fit models, checked on a held-out model;
  microbenchmarks per op class for reference;
* ps -- push/pull latency and bandwidth, server update bandwidth;
* interference -- ``comm_compute_interference`` from DDP/FSDP steps (needs the other groups: it
  predicts the steps with a provisional profile).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from .collectives import fit_with_holdout
from .compute import MicroFit, RooflineFit, make_run
from .ps import PSFit
from .records import StageRecords, load_run

# Collectives the profile's joint fit uses (what DDP and FSDP run); send/recv sets the link.
PROFILE_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def _collective_points(st: StageRecords, scope: str) -> list[dict]:
    """One point per (collective, size): the slowest rank's time (a collective ends when
    its last rank does)."""
    out = []
    for key in sorted(st.keys_all_ranks()):
        recs = [r for r in st.records(key) if r.get("scope") == scope]
        if not recs:
            continue
        r = dict(recs[0])
        r["time_s"] = max(x["time_s"] for x in recs)
        out.append(r)
    return out


def fit_collectives(st: StageRecords) -> dict[str, Any]:
    report: dict[str, Any] = {}
    scopes = sorted({r.get("scope") for m in st.measurements.values() for r in m.values()})
    for scope in scopes:
        pts = _collective_points(st, scope)
        if len(pts) < 3:
            continue
        per: dict[str, Any] = {}
        for coll in sorted({p["collective"] for p in pts}):
            sub = [p for p in pts if p["collective"] == coll]
            if len(sub) < 3:
                continue
            res = fit_with_holdout(sub)
            est = res.pop("estimator")
            per[coll] = {"params": _r(est.params()), "quality": est.quality_, **res,
                         "bytes_range": list(est.bytes_range_), "group_size": sub[0]["group_size"]}
        joint_pts = [p for p in pts if p["collective"] in PROFILE_COLLECTIVES]
        joint = None
        if len(joint_pts) >= 3:
            res = fit_with_holdout(joint_pts, per_collective_bandwidth=True)
            est = res.pop("estimator")
            joint = {"params": _r(est.params()), "quality": est.quality_, **res,
                     "bandwidth_factors": est.bandwidth_factors_,
                     "collectives": est.collectives_, "bytes_range": list(est.bytes_range_),
                     "group_size": joint_pts[0]["group_size"],
                     "overhead_s": est.overhead_s_, "alpha_s": est.alpha_s_,
                     "bus_bandwidth_B_per_s": est.bus_bandwidth_B_per_s_}
        report[scope] = {"per_collective": per, "joint": joint,
                         "points": [{"collective": p["collective"], "bytes": p["bytes"], "time_s": p["time_s"],
                                     "busbw_GB_per_s": p["busbw_GB_per_s"]} for p in pts]}
    return report


def _compute_runs(st: StageRecords) -> dict[str, list]:
    from ..workload.library import load_workload

    runs: dict[str, list] = {}
    for key in sorted(st.keys_all_ranks()):
        if not key.startswith("model/"):
            continue
        for rec in st.records(key):
            table = load_workload(rec["model"], rec["dataset"])
            runs.setdefault(rec["model"], []).append(make_run(table, rec))
    return runs


def fit_compute(st: StageRecords, peak_flops: float, memory_bandwidth: float,
                held_out: list[str]) -> dict[str, Any]:
    runs = _compute_runs(st)
    report: dict[str, Any] = {"peak_flops_per_rank": peak_flops, "memory_bandwidth_per_rank": memory_bandwidth}
    fit_models = [m for m in runs if m not in held_out]
    test_models = [m for m in runs if m in held_out]
    if not fit_models and test_models:  # nothing else measured: fit on what there is
        fit_models, test_models = test_models, []
    if fit_models:
        est = RooflineFit(peak_flops=peak_flops, memory_bandwidth=memory_bandwidth).fit(
            [r for m in fit_models for r in runs[m]])
        report.update(params=_r(est.params()), fit_models=fit_models, quality=est.quality_,
                      estimator=est)
        if test_models:
            q = est.evaluate([r for m in test_models for r in runs[m]])
            report["held_out"] = {"models": test_models, **q}
        report["batches"] = {m: sorted({r.batch for r in runs[m]}) for m in runs}
    micro = [r for m in st.measurements.values() for r in m.values() if r.get("kind") == "micro"]
    by_class: dict[str, Any] = {}
    for cls in sorted({r["op_class"] for r in micro}):
        pts = [r for r in micro if r["op_class"] == cls]
        mf = MicroFit(op_class=cls).fit(pts)
        by_class[cls] = {
            "achieved_GFLOP_per_s": None if mf.flops_per_s_ is None else round(mf.flops_per_s_ / 1e9, 3),
            "matmul_efficiency": None if mf.flops_per_s_ is None else round(mf.flops_per_s_ / peak_flops, 4),
            "achieved_GB_per_s": None if mf.bytes_per_s_ is None else round(mf.bytes_per_s_ / 1e9, 3),
            "memory_bandwidth_efficiency": None if mf.bytes_per_s_ is None else round(mf.bytes_per_s_ / memory_bandwidth, 4),
            "overhead_us": round(mf.overhead_s_ * 1e6, 3),
            "max_abs_rel_residual": round(float(np.max(np.abs(mf.residuals_))), 4),
            "n": len(pts),
        }
    report["micro"] = by_class
    return report


def fit_ps(st: StageRecords) -> dict[str, Any] | None:
    rts, ups = [], []
    for key in sorted(st.keys_all_ranks()):
        recs = st.records(key)
        if key.startswith("roundtrip/"):
            w = [r for r in recs if r.get("role") == "worker" and r.get("time_s")]
            if w:
                rts.append({"bytes": w[0]["bytes"], "time_s": statistics.median(r["time_s"] for r in w)})
        elif key.startswith("update/"):
            s = [r for r in recs if r.get("role") == "server" and r.get("time_s")]
            if s:
                ups.append(s[0])
    if len(rts) < 2:
        return None
    est = PSFit().fit(rts, ups)
    return {"latency_us": est.latency_s_ * 1e6, "bandwidth_GB_per_s": est.bandwidth_B_per_s_ / 1e9,
            "update_bandwidth_GB_per_s": None if est.update_bandwidth_B_per_s_ is None
            else est.update_bandwidth_B_per_s_ / 1e9,
            "quality": est.quality_, "bytes_range": list(est.bytes_range_)}


def strategy_points(st: StageRecords) -> dict[str, dict]:
    """Per variant: median over ranks (workers) of the median step, and peak memory."""
    out: dict[str, dict] = {}
    for key in sorted(st.keys_all_ranks()):
        recs = [r for r in st.records(key) if not r.get("skipped") and r.get("step_s")]
        skipped = [r for r in st.records(key) if r.get("skipped")]
        variant = key.split("/")[0]
        if skipped:
            out[variant] = {"skipped": True, "error": skipped[0].get("error", "")}
            continue
        if not recs:
            continue
        out[variant] = {"step_s": statistics.median(r["step_s"] for r in recs),
                        "peak_bytes": max(r.get("peak_bytes", 0) for r in recs),
                        "memory_kind": recs[0].get("memory_kind"),
                        "model": recs[0]["model"], "dataset": recs[0]["dataset"], "batch": recs[0]["batch"],
                        "iters": recs[0]["iters"]}
    return out


def load_all(run_dir: Path) -> dict[str, StageRecords]:
    return load_run(run_dir)


def _r(d: dict) -> dict:
    return {k: (float(f"{v:.5g}") if isinstance(v, float) else v) for k, v in d.items()}
