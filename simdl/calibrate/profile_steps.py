"""The strategies stage's part of a calibrated profile, fitted against the provisional
profile: blocking collectives priced by their logged calls, the in-step copy factor, the step
fit (interference, collective load, FSDP's per-unit overhead), DeepSpeed ZeRO's host costs and
the compute jitter, with the records (page faults and warm-up, collectives inside the steps)
that are checks only."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from . import fit as F
from .jitter import StepJitterFit, local_step_series
from .profile_context import CalibrationRun
from .profile_in_step import _blocking_fit, _faults_warmup, _in_step, _logged_calls
from .profile_parts import _val
from .profile_strategy_fit import _copy_fit, _strategy_fit, _zero_fit, _zero_variant


def _blocking(run: CalibrationRun, profile: dict, eff: dict, rep: dict, logged: dict, fixed: dict) -> None:
    """Blocking collectives (FSDP2 on CPU) priced as their logged calls ran (simdl.calibrate.in_step);
    f, the load factor of all-gathers and reduce-scatters, then prices none of the steps."""
    bf = _blocking_fit(run.stages["strategies"], logged, profile, run.ranks)
    if bf is None:
        return
    worst = max((abs(v["rel_error"]) for h in bf.held_out_.values() for v in h.values()), default=None)
    rep["blocking"] = {
        "factors": bf.factors_,
        "wait": bf.wait_,
        "calls": bf.n_calls_,
        "held_out": bf.held_out_,
        "held_out_max_abs_rel_error": worst,
    }
    src = (
        f"{run.tag}: in-step time of every logged FSDP collective call ({bf.n_calls_} calls; "
        f"{', '.join(sorted(bf.held_out_) or ['one model'])} at {run.ranks} ranks) from the last "
        f"rank's entry to the exit, less the idle fixed cost, over the idle curves' wire time of the "
        f"same calls"
        + (
            f"; a model's in-call time per step predicted from the other models' factors and wait within {worst:.1%}"
            if worst is not None
            else ""
        )
    )
    for c, g in bf.factors_.items():
        eff[f"collective_blocking_factor_{c}"] = _val(g, src)
    eff["collective_blocking_wait"] = _val(
        bf.wait_,
        src.replace(
            "from the last rank's entry to the exit, less the idle fixed cost, over the idle curves' wire time "
            "of the same calls",
            "before the last rank's entry (waiting for a peer still computing), per second of the model's "
            "local step, pooled",
        ),
    )
    if {"all_gather", "reduce_scatter"} <= set(bf.factors_):
        fixed[1] = 1.0
        eff.pop("collective_load_factor", None)


def _copies(run: CalibrationRun, profile: dict, eff: dict, rep: dict, strat: dict, write: bool) -> None:
    """Strategies' buffer copies inside a step, from the profiled steps: before the step fit,
    whose parameters would otherwise absorb them (u, per unit, took most of it). Host devices
    only: on a GPU the profiler's host-side copy ops are launches, not copies."""
    with tempfile.TemporaryDirectory() as td:
        cf = _copy_fit(profile, strat, run.ranks, Path(td))
    if cf is None:
        return
    worst = max((abs(e) for h in cf.held_out_.values() for e in h["rel_errors"].values()), default=None)
    rep["copies"] = {
        "factor": cf.factor_,
        "points": [dict(p, rel_error=round(r, 4)) for p, r in zip(cf.points_, cf.residuals_)],
        "held_out": cf.held_out_,
        "held_out_max_abs_rel_error": worst,
        "written": write,
    }
    if write:
        eff["copy_in_step_factor"] = _val(
            cf.factor_,
            (
                f"{run.tag}: copy ops (copy_, _chunk_cat, cat, ...) on the training thread of one profiled step of each "
                f"DDP/FSDP variant ({len(cf.points_)} steps of {', '.join(sorted({p['model'] for p in cf.points_}))} "
                f"at {run.ranks} ranks), less the same model's local step's, over the plan's copies at the "
                f"idle copy bandwidth and page-fault cost; least squares on relative errors"
                + (
                    f"; a model's copies predicted from the other models' factor within {worst:.1%}"
                    if worst is not None
                    else ""
                )
            ),
        )


def _step_fit(run: CalibrationRun, profile: dict, eff: dict, rep: dict, strat: dict, fixed: dict) -> None:
    """Interference, collective load and FSDP2's per-unit host time, fitted to the measured steps."""
    with tempfile.TemporaryDirectory() as td:
        sf, pts = _strategy_fit(profile, strat, run.ranks, Path(td), fixed)
    if sf is None:
        return
    ho = sf.held_out_
    worst = max((abs(e) for h in ho.values() for e in h["rel_errors"].values()), default=None)
    rep["fit"] = {
        "params": sf.params(),
        "points": pts,
        "held_out": ho,
        "held_out_max_abs_rel_error": worst,
        "at_bounds": sf.at_bounds_,
        "held": [name for i, name in ((1, "collective_load_factor"), (5, "fsdp_unit_overhead_us")) if i in fixed],
    }
    models = sorted({p["model"] for p in pts})
    src = (
        f"{run.tag}: least-squares fit of k (interference), "
        + (
            "f_ar, h and a (all_reduce's load factor for small messages, the message size where the "
            "slowdown halves, and delay per call; blocking all-gathers and reduce-scatters priced as "
            "logged) "
            if 1 in fixed
            else "f, f_ar, h and a (collective load factor for small messages, all_reduce's own, the message "
            "size where the slowdown halves, and delay per call) "
        )
        + ("" if 5 in fixed else "and u (FSDP2's host time per unit per step) ")
        + f"to {len(pts)} measured DDP/FSDP steps of {', '.join(models)} at {run.ranks} ranks; "
        f"step errors at k=0, f=f_ar=1, a=0: {', '.join(f'{x:+.0%}' for x in sf.errors_before_)} -> fitted "
        f"{', '.join(f'{x:+.0%}' for x in sf.residuals_)}"
        + (f"; leave-one-model-out max |err| {worst:.1%}" if worst is not None else "")
    )
    eff["comm_compute_interference"] = _val(sf.interference_, src)
    if 1 not in fixed:
        eff["collective_load_factor"] = _val(sf.load_factor_, src)
    eff["collective_load_factor_all_reduce"] = _val(sf.load_factor_all_reduce_, src)
    eff["collective_load_half_size_MiB"] = _val(sf.load_half_size_bytes_ / 2**20, src)
    eff["collective_load_overhead_us"] = _val(sf.load_overhead_s_ * 1e6, src)
    if 5 not in fixed:
        profile.setdefault("strategies", {}).setdefault("fsdp", {})["unit_overhead_us"] = _val(
            sf.unit_overhead_s_ * 1e6, src
        )


def _zero(run: CalibrationRun, profile: dict, rep: dict, strat: dict) -> None:
    """DeepSpeed ZeRO's host time per parameter, per module call and per parameter of stage 1's
    extra pass (strategies.zero), fitted to the measured ZeRO steps with the rest of the profile
    as fitted; where no ZeRO step was measured, the reason (calibration/zero_steps.py: deepspeed
    does not import) is the record and the base's three values stay."""
    note = (run.prov.get("settings") or {}).get("zero_steps", {}).get("note", "")
    with tempfile.TemporaryDirectory() as td:
        zf, pts = _zero_fit(profile, strat, run.ranks, Path(td))
    if zf is None:
        failed = [
            m.get("error", "") for m in strat.values() if m.get("skipped") and _zero_variant(m.get("variant", ""))
        ]
        rep["zero"] = {
            "skipped": note or (f"the ZeRO steps failed: {failed[0]}" if failed else "no ZeRO step measured")
        }
        # for the report line only (the profile itself carries them; its zero_fit record is rep["zero"])
        rep["zero_kept"] = {
            k: v.get("value") if isinstance(v, dict) else v
            for k, v in (profile.get("strategies", {}).get("zero") or {}).items()
        }
        return
    worst = max((abs(e) for h in zf.held_out_.values() for e in h["rel_errors"].values()), default=None)
    loop_worst = max(
        (abs(e) for h in zf.held_out_.values() for k, e in h["rel_errors"].items() if k.startswith("zero1/")),
        default=None,
    )
    rep["zero"] = {
        "params": zf.params(),
        "points": pts,
        "held": zf.held_,
        "held_out": zf.held_out_,
        "held_out_max_abs_rel_error": worst,
        "loop": {
            "pairs": zf.loop_pairs_,
            "raw_us": zf.loop_raw_s_ * 1e6,
            "clamped": zf.loop_clamped_,
            "note": zf.loop_note(),
            "held_out_max_abs_rel_error_zero1": loop_worst,
        },
    }
    if (run.prov.get("settings") or {}).get("quick") and not zf.loop_pairs_:
        rep["zero"]["loop"]["note"] += " (--quick runs no zero1 step: calibration/zero_steps.py)"
    _write_zero(run, profile, zf, pts, worst, loop_worst)


def _write_zero(run: CalibrationRun, profile: dict, zf, pts: list[dict], worst, loop_worst) -> None:
    """strategies.zero of the profile from the ZeRO fit: each fitted cost with its source, each
    held one removed (a base's value was measured on its own host, not this one)."""
    src = (
        f"{run.tag}: least-squares fit of DeepSpeed's host time per parameter (stages 1-3) and per module call "
        f"(stage 3) to {len(pts)} measured ZeRO steps ({', '.join(p['key'] for p in pts)}) at {run.ranks} ranks, "
        f"the rest of the profile as fitted; step errors at 0: {', '.join(f'{x:+.0%}' for x in zf.errors_before_)} "
        f"-> fitted {', '.join(f'{x:+.0%}' for x in zf.residuals_)}"
        + (f"; held-out max |err| {worst:.1%}" if worst is not None else "")
    )
    section = profile.setdefault("strategies", {}).setdefault("zero", {})
    section["param_overhead_us"] = _val(zf.param_s_ * 1e6, src)
    if "module_overhead_us" in zf.held_:
        section.pop("module_overhead_us", None)
    else:
        section["module_overhead_us"] = _val(zf.module_s_ * 1e6, src)
    if "stage1_loop_overhead_us" in zf.held_:
        section.pop("stage1_loop_overhead_us", None)
        return
    pairs = "; ".join(
        f"{r['model']}/{r['batch']}: {r['measured_diff_s'] * 1e3:+.1f} ms measured, "
        f"{r['predicted_diff_at_0_s'] * 1e3:+.1f} ms predicted at 0, {r['params']:.0f} parameters"
        for r in zf.loop_pairs_
    )
    section["stage1_loop_overhead_us"] = _val(
        zf.loop_s_ * 1e6,
        (
            f"{run.tag}: stage 1's extra pass (stage_1_and_2.py reduce_gradients after backward, its gradient "
            f"hooks still firing), least squares through 0 of the measured ZeRO-1 minus ZeRO-2 step less the "
            f"engine's difference at 0, per parameter ({pairs}), the other costs as fitted"
            + (
                f"; came out at {zf.loop_raw_s_ * 1e6:+.1f} us, below 0 (noise), clamped to 0"
                if zf.loop_clamped_
                else ""
            )
            + (f"; held-out zero1 max |err| {loop_worst:.1%}" if loop_worst is not None else "")
        ),
    )


def _jitter(run: CalibrationRun, eff: dict, rep: dict) -> None:
    """Step-to-step spread of compute (simdl.calibrate.jitter), from the local steps."""
    series = local_step_series(run.stages["strategies"])
    if not series:
        return
    jf = StepJitterFit().fit(series)
    rep["compute_jitter"] = {
        "sigma": jf.sigma_,
        "sd": jf.sd_,
        "series": jf.n_series_,
        "steps": jf.n_steps_,
        "per_series": jf.per_series_,
    }
    eff["compute_jitter"] = _val(
        jf.sigma_,
        (
            f"{run.tag}: spread of log(step time) of local training (every rank its own copy, all "
            f"{run.ranks} at once, no communication), 1.4826 x the median absolute deviation of each "
            f"series about its median, pooled over {jf.n_series_} rank x model series ({jf.n_steps_} steps; "
            f"per series {min(jf.per_series_.values()):.3f}-{max(jf.per_series_.values()):.3f}); plain standard "
            f"deviation {jf.sd_:.3f}"
            + (", inflated by occasional stalled steps (simdl.calibrate.jitter)" if jf.sd_ > 1.5 * jf.sigma_ else "")
        ),
    )


def strategy_sections(
    run: CalibrationRun,
    profile: dict,
    report: dict[str, Any],
    *,
    compute_fitted: bool,
    joint: Any,
    blocking_from_calls: bool,
    fit_unit_overhead: bool,
    write_copy_factor: bool,
) -> None:
    """Fit the strategies stage against the provisional profile; its values go into profile's
    efficiency (and strategies) sections, its records into report["strategies"]."""
    eff = profile["efficiency"]
    strat = F.strategy_points(run.stages["strategies"]) if run.measured("strategies") else {}
    rep: dict[str, Any] = {"measured": strat}
    report["strategies"] = rep
    fixed: dict[int, float] = {} if fit_unit_overhead else {5: 0.0}
    logged = _logged_calls(run.stages["strategies"]) if strat and run.nodes == 1 else {}
    if logged and eff.get("collective_regimes_intra") and blocking_from_calls:
        _blocking(run, profile, eff, rep, logged, fixed)
    if strat:
        eff.pop("copy_in_step_factor", None)
    if strat and run.shared:
        _copies(run, profile, eff, rep, strat, write_copy_factor)
    if strat and compute_fitted and (joint or eff.get("collective_regimes_intra")):
        _step_fit(run, profile, eff, rep, strat, fixed)
        _zero(run, profile, rep, strat)
    # Page faults and warm-up of the measured steps: a record, nothing fitted yet.
    if strat:
        rep["faults_warmup"] = _faults_warmup(run.stages["strategies"])
    # Collectives inside the measured steps (simdl.calibrate.in_step): a check.
    if logged and eff.get("collective_regimes_intra"):
        rep["in_step"] = _in_step(logged, profile, run.ranks)
    if run.measured("strategies"):
        _jitter(run, eff, rep)
