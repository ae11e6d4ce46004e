"""Fit the collectives stage: one point per (collective, size) from the raw chunks of every
rank, then per scope each collective's alpha-beta line and size-regime curve and the joint
line of the profile's collectives, each with its held-out check (simdl.calibrate.collectives)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analytic.costs import GLIBC_MMAP_THRESHOLD_MAX
from ..collectives.cost import bus_bytes_factor as bus_factor
from .collectives import fit_with_holdout, regimes_with_holdout
from .quality import rounded_params
from .records import StageRecords

# Collectives the profile's joint fit uses (what DDP and FSDP run); send/recv sets the link.
PROFILE_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


# Which of a size's chunk times is its time (see _collective_points).
CHUNK_QUANTILE = 0.25


def _collective_points(st: StageRecords, scope: str) -> list[dict]:
    """One point per (collective, size). Every chunk (a run of back-to-back calls between two
    barriers, on all ranks at once) counts with its slowest rank (a collective ends when its
    last rank does); the size's time is the 25th percentile of its chunks over all passes
    (keys ``.../p<k>``; older runs have one pass and no suffix). ``time_s_passes`` keeps each
    pass's fastest chunk.

    Why a low quantile, neither the fastest chunk nor the median: on the 2-core VM this was
    measured on, a small call is either fast (~0.15 ms) or waits for a 4 ms scheduler tick
    (250 Hz: send/recv chunks of exactly 3.99 ms), and the slow mode sticks for whole passes,
    so medians are often in the slow mode; for large sizes a chunk is a single call and the
    fastest of 14 is an outlier as often as not (one 256 MB broadcast in 69 ms, the 13 others
    in 99-130 ms). Of min, second fastest, 25th percentile and median over 7 passes x 2
    chunks, the 25th percentile gave the smoothest curves against size (median |second
    difference of log time| 5-14 % on a 2-rank gloo calibration), i.e. the least noise."""
    by: dict[tuple[str, int], dict] = {}
    chunks: dict[tuple[str, int], list[list[float]]] = {}  # per pass, its chunks
    passes: dict[tuple[str, int], list[float]] = {}
    for key in sorted(st.keys_all_ranks()):
        recs = [r for r in st.records(key) if r.get("scope") == scope]
        if not recs:
            continue
        k = (recs[0]["collective"], int(recs[0]["bytes"]))
        by.setdefault(k, dict(recs[0]))
        per_rank = [r.get("chunk_times_s") or [r["time_s"]] for r in recs]
        if len({len(c) for c in per_rank}) == 1:
            worst = [max(c) for c in zip(*per_rank)]
        else:  # malformed: fall back on each rank's fastest chunk
            worst = [max(r["time_s"] for r in recs)]
        chunks.setdefault(k, []).append(worst)
        passes.setdefault(k, []).append(min(worst))
    out = []
    for k in sorted(by, key=lambda k: (k[0], k[1])):
        r = by[k]
        r["time_s"] = float(np.quantile([c for p in chunks[k] for c in p], CHUNK_QUANTILE))
        r["time_s_passes"] = passes[k]
        r["n_chunks"] = sum(len(p) for p in chunks[k])
        ci = quantile_interval(chunks[k], CHUNK_QUANTILE)
        if ci is not None:
            r["time_s_ci95"] = ci
        r["busbw_GB_per_s"] = r["bytes"] / r["time_s"] * bus_factor(r["collective"], r["group_size"]) / 1e9
        out.append(r)
    return out


def quantile_interval(groups: list[list[float]], q: float, n_boot: int = 400, seed: int = 0) -> list[float] | None:
    """95 % interval of the ``q`` quantile of the pooled values of ``groups`` (a size's
    chunks, grouped by pass), by a bootstrap that resamples whole passes: on the VM the
    slow mode sticks for a whole pass (see :func:`_collective_points`), so chunks of one
    pass are not independent draws. None with fewer than 3 passes. A fixed seed keeps a
    refit of the same records identical."""
    if len(groups) < 3:
        return None
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(g, dtype=float) for g in groups]
    stats = [
        float(np.quantile(np.concatenate([arrays[i] for i in rng.integers(0, len(arrays), len(arrays))]), q))
        for _ in range(n_boot)
    ]
    lo, hi = np.quantile(stats, [0.025, 0.975])
    return [float(lo), float(hi)]


def call_overheads(st: StageRecords) -> dict[str, float]:
    """Seconds of one call on a one-rank group (scope 'self'), per collective: the fixed
    per-call cost the regime curves use as their overhead."""
    return {p["collective"]: p["time_s"] for p in _collective_points(st, "self")}


def temp_threshold(st: StageRecords) -> float | None:
    """The mmap threshold the regime curves step at (simdl.collectives.regimes, "The
    allocator's step"): glibc's on a gloo (CPU) run, None on NCCL (no per-call temporaries
    in host memory)."""
    backends = {h.get("backend") for h in st.headers.values()}
    return float(GLIBC_MMAP_THRESHOLD_MAX) if backends == {"gloo"} else None


def fit_collectives(st: StageRecords) -> dict[str, Any]:
    report: dict[str, Any] = {}
    scopes: list[str] = sorted(
        {str(r["scope"]) for m in st.measurements.values() for r in m.values() if r.get("scope") not in ("self", None)}
    )
    overheads = call_overheads(st)
    for scope in scopes:
        pts = _collective_points(st, scope)
        if len(pts) < 3:
            continue
        report[scope] = fit_scope(pts, overheads, temp_threshold(st))
    return report


def fit_scope(pts: list[dict], overheads: dict[str, float], temp_threshold: float | None = None) -> dict[str, Any]:
    """Every fit of one scope's points (``collective``, ``bytes``, ``group_size``, ``time_s``):
    per collective one alpha-beta line and the size-regime curve, each with its held-out
    check, and the joint line. ``overheads``: seconds per call on a one-rank group;
    ``temp_threshold``: see :func:`temp_threshold`."""
    per: dict[str, Any] = {}
    for coll in sorted({p["collective"] for p in pts}):
        sub = [p for p in pts if p["collective"] == coll]
        if len(sub) < 3:
            continue
        res = fit_with_holdout(sub)
        est = res.pop("estimator")
        per[coll] = {
            "params": rounded_params(est.params()),
            "quality": est.quality_,
            **res,
            "bytes_range": list(est.bytes_range_),
            "group_size": sub[0]["group_size"],
        }
        if len(sub) >= 4:
            o = overheads.get(coll)
            reg = regimes_with_holdout(sub, coll, overhead_s=o or 0.0, temp_threshold=temp_threshold)
            rest = reg.pop("estimator")
            per[coll]["regimes"] = {
                "params": rest.params(),
                "n_regimes": rest.n_regimes_,
                "cv_error": rest.cv_error_,
                "quality": rest.quality_,
                "regime_quality": rest.regime_quality_,
                **reg,
                "overhead_source": (
                    "one-rank group, same call" if o is not None else "assumed 0 (no one-rank measurement in this run)"
                ),
                "passes": max(len(p.get("time_s_passes", [0])) for p in sub),
            }
    joint_pts = [p for p in pts if p["collective"] in PROFILE_COLLECTIVES]
    joint = None
    if len(joint_pts) >= 3:
        res = fit_with_holdout(joint_pts, per_collective_bandwidth=True)
        est = res.pop("estimator")
        joint = {
            "params": rounded_params(est.params()),
            "quality": est.quality_,
            **res,
            "bandwidth_factors": est.bandwidth_factors_,
            "collectives": est.collectives_,
            "bytes_range": list(est.bytes_range_),
            "group_size": joint_pts[0]["group_size"],
            "overhead_s": est.overhead_s_,
            "alpha_s": est.alpha_s_,
            "bus_bandwidth_B_per_s": est.bus_bandwidth_B_per_s_,
        }
    return {
        "per_collective": per,
        "joint": joint,
        "call_overhead_us": {c: round(v * 1e6, 3) for c, v in overheads.items()},
        "points": [
            {
                "collective": p["collective"],
                "bytes": p["bytes"],
                "time_s": p["time_s"],
                "group_size": p["group_size"],
                "time_s_passes": p.get("time_s_passes", [p["time_s"]]),
                "time_s_ci95": p.get("time_s_ci95"),
                "busbw_GB_per_s": p.get("busbw_GB_per_s"),
            }
            for p in pts
        ],
    }
