"""The strategy step fits of a calibrated profile: each measured DDP/FSDP step predicted with
the provisional profile, the in-step copy factor and the interference and collective-load fit
(simdl.calibrate.overlap, simdl.calibrate.in_step); then DeepSpeed ZeRO's host costs on the
ZeRO steps (simdl.calibrate.zero_fit)."""

from __future__ import annotations

from pathlib import Path

from ..cluster.spec import load_cluster
from ..errors import SimdlError
from .overlap import StrategyStepFit
from .profile_write import write_profile


def _step_kwargs(m: dict, ranks: int) -> dict:
    """predict() arguments of one measured strategy step (calibration/strategies.py)."""
    from ..strategies import registry

    name, fixed = registry.split_label(m["variant"])
    family = registry.get(name)
    kw = dict(
        model=m["model"],
        strategy=name,
        gpus=ranks,
        dataset=m["dataset"],
        batch_size=m["batch"],
        optimizer="momentum",
        precision="fp32",
        loader_workers=0,
        **fixed,
    )
    kw.update(family.calibration_step(fixed))
    return kw


def _spmd_variant(v: str) -> bool:
    """A measured step of a strategy whose ranks are peers (a registered label; not the
    ``local`` single-process steps, nor a parameter server)."""
    from ..strategies import registry

    try:
        name, _ = registry.split_label(v)
    except SimdlError:
        return False
    return not registry.is_client_server(v) and registry.get(name).family != "zero"


def _zero_variant(v: str) -> bool:
    """A measured DeepSpeed ZeRO step (calibration/zero_steps.py): fitted on its own
    (simdl.calibrate.zero_fit), after the DDP/FSDP steps."""
    from ..strategies import registry

    try:
        name, _ = registry.split_label(v)
    except SimdlError:
        return False
    return registry.get(name).family == "zero"


def _copy_fit(profile: dict, strat: dict[str, dict], ranks: int, tmp: Path):
    """Fit efficiency.copy_in_step_factor to the profiled strategy steps' copies
    (simdl.calibrate.in_step.CopyFit); None without profiled steps."""
    from ..predict import predict
    from .in_step import CopyFit

    spec = load_cluster(str(write_profile(profile, tmp / "provisional-copies.yaml")))
    pts = []
    for key, m in sorted(strat.items()):
        v = m.get("variant", "")
        local = strat.get(f"local/{m.get('model')}/{m.get('batch')}", {}).get("copies_s")
        if m.get("skipped") or m.get("copies_s") is None or local is None or not _spmd_variant(v):
            continue
        predicted = predict(cluster=spec, **_step_kwargs(m, ranks)).step_split_s["copies"]
        pts.append(
            {"key": key, "model": m["model"], "measured_s": max(m["copies_s"] - local, 0.0), "predicted_s": predicted}
        )
    try:
        return CopyFit().fit(pts) if pts else None
    except ValueError:
        return None


def _strategy_fit(profile: dict, strat: dict[str, dict], ranks: int, tmp: Path, fixed=None):
    """Fit comm_compute_interference and the collective load factor/overhead to the measured
    DDP/FSDP steps, predicting each with the provisional profile (simdl.calibrate.overlap)."""
    import dataclasses

    from ..predict import predict
    from ..provenance import Sourced

    spec = load_cluster(str(write_profile(profile, tmp / "provisional.yaml")))
    pts = []
    for key, m in sorted(strat.items()):
        v = m.get("variant", "")
        if m.get("skipped") or not _spmd_variant(v):
            continue
        local = strat.get(f"local/{m['model']}/{m['batch']}", {}).get("step_s")
        pts.append(
            {
                "key": key,
                "variant": v,
                "model": m["model"],
                "batch": m["batch"],
                "measured_s": m["step_s"],
                "measured_local_s": local,
                "kwargs": _step_kwargs(m, ranks),
            }
        )
    if not pts:
        return None, []
    cache: dict = {}

    def spec_for(theta):
        key = k, f, far, h, a, u = tuple(float(f"{float(x):.9g}") for x in theta)
        if key not in cache:

            def src(what):
                return Sourced(what, "assumed", "candidate of the strategy fit")

            eff = dataclasses.replace(
                spec.efficiency,
                comm_compute_interference=src(k),
                collective_load_factor=src(f),
                collective_load_factor_all_reduce=src(far),
                collective_load_half_size=src(h),
                collective_load_overhead=src(a),
            )
            cache[key] = dataclasses.replace(
                spec, efficiency=eff, strategies=spec.strategies.with_fsdp(unit_overhead=src(u) if u else None)
            )
        return cache[key]

    def pred(theta, p):
        return predict(cluster=spec_for(theta), **p["kwargs"]).iteration_time_s

    est = StrategyStepFit(fixed=fixed).fit(pts, pred)
    for p, r, b in zip(pts, est.residuals_, est.errors_before_):
        p.pop("kwargs")
        p.update(rel_error_fitted=round(float(r), 4), rel_error_defaults=round(float(b), 4))
    return est, pts


def _zero_fit(profile: dict, strat: dict[str, dict], ranks: int, tmp: Path):
    """Fit strategies.zero's per-parameter, per-call and stage-1 pass host time to the measured
    ZeRO steps, predicting each with the profile as fitted so far (simdl.calibrate.zero_fit);
    (None, []) without ZeRO steps. Every candidate replaces all three costs: none of the base's
    (measured on its own host) enters the fit."""
    import dataclasses

    from ..predict import predict
    from ..provenance import Sourced
    from ..strategies.zero import stage_of
    from .zero_fit import ZeROHostFit

    pts = [
        {
            "key": key,
            "variant": m["variant"],
            "stage": stage_of(m["variant"]),
            "model": m["model"],
            "batch": m["batch"],
            "measured_s": m["step_s"],
            "kwargs": _step_kwargs(m, ranks),
        }
        for key, m in sorted(strat.items())
        if not m.get("skipped") and m.get("step_s") and _zero_variant(m.get("variant", ""))
    ]
    if not pts:
        return None, []
    spec = load_cluster(str(write_profile(profile, tmp / "provisional-zero.yaml")))
    cache: dict = {}

    def pred(theta, p):
        key = tuple(float(f"{float(x):.9g}") for x in theta)
        if key not in cache:

            def src(v):
                return Sourced(v, "assumed", "candidate of the ZeRO fit") if v else None

            zero = dict(param_overhead=src(key[0]), module_overhead=src(key[1]), loop_overhead=src(key[2]))
            cache[key] = dataclasses.replace(spec, strategies=spec.strategies.with_zero(**zero))
        return predict(cluster=cache[key], **p["kwargs"]).iteration_time_s

    est = ZeROHostFit().fit(pts, pred)
    for p, r, b in zip(pts, est.residuals_, est.errors_before_):
        p.pop("kwargs")
        p.update(rel_error_fitted=round(float(r), 4), rel_error_defaults=round(float(b), 4))
    return est, pts
