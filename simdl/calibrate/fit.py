"""Fit every parameter group from a calibration run directory.

:func:`load_all` reads the raw records (:mod:`.records`); one function per stage runs the
estimators and returns a report (fitted values, fit quality, held-out errors) that
:mod:`.profile` turns into a cluster profile. Groups:

* collectives (:mod:`.collectives_fit`) -- per collective a piecewise alpha-beta regime
  curve (what the profile holds, ``efficiency.collective_regimes_intra``) and, for reference,
  one alpha-beta line; jointly one alpha-beta model per scope (the profile's base
  ``collective_*`` keys); each with a held-out check on message sizes left out of the fit;
* compute (:mod:`.compute_fit`) -- the per-row roofline on the fit models, checked on a
  held-out model; microbenchmarks per op class for reference; the measured rows of every
  profiled model (a compute profile, :mod:`simdl.analytic.measured`); the optimizer-step and
  copy bandwidths and the page-fault cost of fresh buffers (:mod:`.stream`);
* ps -- push/pull latency and bandwidth, server update bandwidth;
* strategies -- ``comm_compute_interference`` and the collective load factor and delay from
  DDP/FSDP steps (needs the other groups: it predicts the steps with a provisional profile;
  :mod:`.overlap`).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .collectives_fit import (  # noqa: F401  (re-exported: callers and tests import them from here)
    CHUNK_QUANTILE,
    PROFILE_COLLECTIVES,
    _collective_points,
    call_overheads,
    fit_collectives,
    fit_scope,
    quantile_interval,
    temp_threshold,
)
from .compute_fit import (  # noqa: F401  (re-exported)
    CALL_OVERHEAD_CLASSES,
    CONV_WEIGHT_GRAD,
    HOLD_CONV_CALL,
    conv_call_overhead,
    fit_compute,
    measured_rows,
)
from .ps import PSFit
from .records import StageRecords, load_run


def fit_ps(st: StageRecords) -> dict[str, Any] | None:
    rts, ups, alone, together = [], [], [], []
    for key in sorted(st.keys_all_ranks()):
        recs = st.records(key)
        w = [r for r in recs if r.get("role") == "worker"]
        if key.startswith("roundtrip/"):
            w = [r for r in w if r.get("time_s")]
            if w:
                rts.append({"bytes": w[0]["bytes"], "time_s": statistics.median(r["time_s"] for r in w)})
        elif key.startswith("rpc_alone/"):
            push = [t for r in w for t in r.get("push_s", [])]
            pull = [t for r in w for t in r.get("pull_s", [])]
            if push and pull:
                alone.append(
                    {
                        "bytes": w[0]["bytes"],
                        "push_time_s": statistics.median(push),
                        "pull_time_s": statistics.median(pull),
                    }
                )
        elif key.startswith("rpc_together/"):
            # Per repeat, the incast ends with the slowest worker's transfer.
            n = min((len(r.get("push_s", [])) for r in w), default=0)
            if n:
                together.append(
                    {
                        "bytes": w[0]["bytes"],
                        "workers": len(w),
                        "push_time_s": statistics.median(max(r["push_s"][i] for r in w) for i in range(n)),
                        "pull_time_s": statistics.median(max(r["pull_s"][i] for r in w) for i in range(n)),
                    }
                )
        elif key.startswith("update/"):
            s = [r for r in recs if r.get("role") == "server" and r.get("time_s")]
            if s:
                ups.append(s[0])
    if len(rts) < 2:
        return None
    est = PSFit().fit(rts, ups, alone, together)
    ping = est.pingpong_
    out = {
        "latency_us": est.latency_s_ * 1e6,
        "bandwidth_GB_per_s": est.bandwidth_B_per_s_ / 1e9,
        "worker_bandwidth_GB_per_s": None
        if est.worker_bandwidth_B_per_s_ is None
        else est.worker_bandwidth_B_per_s_ / 1e9,
        "transport": est.transport_,
        "receive_fault_ns_per_byte": None
        if est.receive_fault_s_per_byte_ is None
        else est.receive_fault_s_per_byte_ * 1e9,
        "response_copy_ns_per_byte": None
        if est.response_copy_s_per_byte_ is None
        else est.response_copy_s_per_byte_ * 1e9,
        "pingpong": {
            "latency_us": ping["latency_s"] * 1e6,
            "bandwidth_GB_per_s": ping["bandwidth_B_per_s"] / 1e9,
            "quality": ping["quality"],
            "bytes_range": list(ping["bytes_range"]),
        },
        "update_bandwidth_GB_per_s": None
        if est.update_bandwidth_B_per_s_ is None
        else est.update_bandwidth_B_per_s_ / 1e9,
        "quality": est.quality_,
        "bytes_range": list(est.bytes_range_),
    }
    if est.transport_ == "rpc":
        out["rpc_workers"] = est.workers_
        out["server_side_measured"] = est.server_side_measured_
        out["rpc_samples"] = {"alone": alone, "together": together}
    return out


def strategy_points(st: StageRecords) -> dict[str, dict]:
    """Per measured key (``variant/model/batch``): median over ranks (workers) of the median
    step, and peak memory."""
    out: dict[str, dict] = {}
    for key in sorted(st.keys_all_ranks()):
        recs = [r for r in st.records(key) if not r.get("skipped") and r.get("step_s")]
        skipped = [r for r in st.records(key) if r.get("skipped")]
        variant = key.split("/")[0]
        if skipped:
            out[key] = {"variant": variant, "skipped": True, "error": skipped[0].get("error", "")}
            continue
        workers = [r for r in recs if r.get("role", "worker") == "worker"]
        if not workers:
            continue
        out[key] = {
            "variant": variant,
            "step_s": statistics.median(r["step_s"] for r in workers),
            "peak_bytes": max(r.get("peak_bytes", 0) for r in recs),
            "memory_kind": recs[0].get("memory_kind"),
            "model": recs[0]["model"],
            "dataset": recs[0]["dataset"],
            "batch": recs[0]["batch"],
            "iters": recs[0]["iters"],
        }
        # The profiled step's copy ops (calibration/strategies.py profiled_step; older runs lack
        # it), mean of the ranks: what simdl.calibrate.in_step.CopyFit fits.
        prof = [r["profiled_step"] for r in workers if r.get("profiled_step")]
        if prof and len(prof) == len(workers):
            out[key]["copies_s"] = statistics.fmean(p["busy_by_group_s"]["copies"] for p in prof)
    return out


def load_all(run_dir: Path) -> dict[str, StageRecords]:
    return load_run(run_dir)
