"""The collective calls logged inside the measured steps, against a calibrated profile: the
blocking factors fitted to them, the idle machine's and the profile's price of the same calls,
and the page faults and warm-up of the steps (simdl.calibrate.in_step)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from ..cluster.spec import FrozenMap, load_cluster
from .profile_write import write_profile


def _logged_calls(stage) -> dict:
    """key -> (model, in_step_collectives(...)) of every measurement whose calls block."""
    from .in_step import in_step_collectives

    out = {}
    for key in sorted(stage.keys_all_ranks()):
        recs = [r for r in stage.records(key) if not r.get("skipped")]
        if recs and recs[0].get("collective_calls") and recs[0].get("calls_block"):
            out[key] = (recs[0]["model"], in_step_collectives(recs))
    return out


def _idle_costs(profile: dict, ranks: int):
    """CommCosts of the profile without its in-step factors: the idle machine."""
    import dataclasses

    from ..analytic.costs import CommCosts
    from ..cluster import allocate

    with tempfile.TemporaryDirectory() as td:
        spec = load_cluster(str(write_profile(profile, Path(td) / "idle.yaml")))
    idle_eff = dataclasses.replace(
        spec.efficiency,
        collective_load_factor=None,
        collective_load_factor_all_reduce=None,
        collective_load_half_size=None,
        collective_load_overhead=None,
        collective_blocking_factors=FrozenMap(),
        collective_blocking_wait=None,
    )
    return CommCosts(allocate(dataclasses.replace(spec, efficiency=idle_eff), ranks, 1))


def _blocking_fit(stage, logged: dict, profile: dict, ranks: int):
    from ..collectives import collective_time
    from .in_step import BlockingFit

    calls = {k: v for k, v in logged.items() if v[1] is not None}
    if not calls:
        return None
    idle = _idle_costs(profile, ranks)

    def idle_parts(coll, nbytes):
        o, alpha, bw, algo = idle.parts(coll, nbytes, ranks, "world")
        return o, collective_time(coll, nbytes, ranks, bw, alpha, algo)

    rows = []
    for key, (model, c) in calls.items():
        local = [r for r in stage.records(f"local/{model}/{key.rsplit('/', 1)[1]}") if r.get("step_s")]
        if local:
            rows.append(
                {"model": model, "key": key, "calls": c, "compute_s": statistics.median(r["step_s"] for r in local)}
            )
    return BlockingFit().fit(rows, idle_parts) if rows else None


def _faults_warmup(stage) -> dict:
    """Per strategy measurement that logged them: bytes faulted in per timed step (median
    step of each rank, median over ranks; calibration/strategies.py ``ru_minflt`` x page
    size) and the untimed warm-up steps in units of the median timed step."""
    out = {}
    for key in sorted(stage.keys_all_ranks()):
        recs = [r for r in stage.records(key) if r.get("minor_faults_per_step") and r.get("step_s")]
        if not recs:
            continue
        faulted = statistics.median(statistics.median(r["minor_faults_per_step"]) * r["page_bytes"] for r in recs)
        warm = [[t / r["step_s"] for t in r.get("warmup_times_s", [])] for r in recs]
        out[key] = {
            "faulted_bytes_per_step": faulted,
            "warmup_over_step": [statistics.median(x) for x in zip(*warm)] if warm and warm[0] else [],
        }
    return out


def _in_step(logged: dict, profile: dict, ranks: int) -> dict:
    """Every FSDP measurement's logged collective calls against the profile's idle curves and
    against what the profile charges them in a step (simdl.calibrate.in_step)."""
    from ..analytic.costs import CommCosts
    from ..cluster import allocate
    from .in_step import summarise

    with tempfile.TemporaryDirectory() as td:
        spec = load_cluster(str(write_profile(profile, Path(td) / "in_step.yaml")))
    charged = CommCosts(allocate(spec, ranks, 1), blocking=True)
    idle = _idle_costs(profile, ranks)
    out = {}
    for key, (_, calls) in logged.items():
        if calls is None:
            out[key] = {"error": "the ranks logged different collective calls"}
            continue
        out[key] = summarise(
            calls, lambda c, n: idle.time(c, n, ranks, "world"), lambda c, n: charged.time(c, n, ranks, "world")
        )
        out[key]["steps"] = calls["steps"]
    return out
