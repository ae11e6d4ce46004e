"""Pieces of a calibrated profile: provenance, collective regime sections, the strategy
step fits and the helpers :func:`simdl.calibrate.profile.build_profile` combines."""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..cluster.host import device_file_for
from ..cluster.spec import FrozenMap, load_cluster
from ..errors import SimdlError
from ..units import MiB
from . import fit as F
from .overlap import StrategyStepFit
from .profile_write import write_profile

# calibration/ps.py's RPC_TRANSPORTS (the stage's scripts are not a package to import from).
_RPC_TRANSPORTS = ("uv",)

GPU_NAME_MAP = (  # substring of torch.cuda.get_device_name() -> shipped GPU file
    ("A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100 80GB PCIe", "A100-PCIe-80GB"),
    ("A100-PCIE-80GB", "A100-PCIe-80GB"),
    ("H200", "H200"),
    ("H100 PCIe", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("A10G", "A10G"),
    ("V100", "V100-SXM2"),
)


def gpu_file_for(device: str, caches: dict[str, str] | None = None) -> str:
    """The device file a calibration on ``device`` is measured against: for a host CPU, the
    one whose ``host`` block matches its model name and ``caches`` (simdl.cluster.host)."""
    if device.startswith("cpu"):
        return device_file_for(device, caches)
    for needle, name in GPU_NAME_MAP:
        if needle.lower() in device.lower():
            return name
    raise SimdlError(
        f"no GPU file matches device {device!r}; give --gpu NAME (one of the files in "
        "simdl/cluster/data/gpus) or a path to a GPU YAML with its peaks"
    )


def _val(value: float, source: str, kind: str = "calibrated") -> dict[str, Any]:
    v = float(f"{value:.4g}")
    if abs(v) < 1e-6:
        v = 0.0  # a bound reached by the fit, not a measured femtosecond
    return {"value": int(v) if v.is_integer() else v, "kind": kind, "source": source}


def _regimes_section(per: dict, tag: str, prov: dict, link_GB_per_s: float) -> dict[str, Any] | None:
    """``efficiency.collective_regimes_intra`` from the per-collective regime fits (the
    collectives DDP and FSDP call), with their fit quality and held-out errors in the source."""
    fits = {c: v["regimes"] for c, v in sorted(per.items()) if c in F.PROFILE_COLLECTIVES and v.get("regimes")}
    if not fits:
        return None
    v0 = next(iter(fits.values()))
    n = next(iter(per.values()))["group_size"]
    lo = min(per[c]["bytes_range"][0] for c in fits)
    hi = max(per[c]["bytes_range"][1] for c in fits)
    quality = "; ".join(
        f"{c}: {r['n_regimes']} regime(s), fit median |err| {r['quality']['median_abs_rel_error']:.3f}"
        + (
            f", held-out sizes {r['held_out']['within_10pct']}/{r['held_out']['n']} within 10 % (median "
            f"{r['held_out']['median_abs_rel_error']:.3f}, max {r['held_out']['max_abs_rel_error']:.3f})"
            if r.get("held_out")
            else ""
        )
        for c, r in fits.items()
    )
    source = (
        f"{tag}: {prov['backend']} {', '.join(fits)} at {n} ranks, {lo}-{hi} B, {v0['passes']} pass(es); "
        "a size's time is the 25th percentile of its chunks; piecewise ring alpha-beta fitted per collective "
        "(simdl.calibrate.regimes: Huber NNLS per regime, regimes by dynamic programming, their number by "
        "cross-validation), regime looked up by bytes per ring step (m/n; m for broadcast), overhead = the "
        "same call on a one-rank group; "
        + (
            "all_gather and reduce_scatter step at the 32 MiB mmap threshold where a gap holds it (gloo's "
            "whole-message temporary, simdl.collectives.regimes); "
            if prov["backend"] == "gloo"
            else ""
        )
        + f"held-out check refits without every third size and the largest: {quality}"
    )
    return {
        "kind": "calibrated",
        "source": source,
        "link_GB_per_s": link_GB_per_s,
        "collectives": {
            c: {"overhead_us": r["params"]["overhead_us"], "regimes": r["params"]["regimes"]} for c, r in fits.items()
        },
    }


def _subgroup_sections(coll: dict, tag: str, prov: dict, link_GB_per_s: float) -> dict[str, Any]:
    """``efficiency.collective_regimes_subgroups``: the regime curves of the calibration's
    ``sub<d>`` scopes (groups of d consecutive ranks of a node, all of the node's groups
    calling at once: calibration/collectives.py), by group size."""
    out: dict[str, Any] = {}
    for scope in sorted(coll, key=lambda sc: (len(sc), sc)):
        m = re.fullmatch(r"sub(\d+)", scope)
        if not m:
            continue
        section = _regimes_section(coll[scope].get("per_collective", {}), tag, prov, link_GB_per_s)
        if section:
            d = int(m.group(1))
            groups = int(prov["ranks_per_node"] or d) // d
            section["source"] = (
                f"groups of {d} consecutive ranks, the node's {groups} groups calling at once; " + section["source"]
            )
            out[str(d)] = section
    return out


def provenance(stages: dict, settings: dict, run_dir: Path) -> dict[str, Any]:
    headers = [h for st in stages.values() for h in st.headers.values()]
    if not headers:
        raise SimdlError(f"{run_dir}: no measurements found")
    h0 = headers[0]
    loads = [h["loadavg"][0] for h in headers if h.get("loadavg")]
    # When each stage was measured (a resumed run, or a stage measured again, spans days).
    stage_dates = {
        name: min(h["date"] for h in st.headers.values() if h.get("date"))
        for name, st in stages.items()
        if any(h.get("date") for h in st.headers.values())
    }
    dates = sorted(set(stage_dates.values()))
    return {
        "tool": "simdl calibrate",
        "run_dir": str(run_dir),
        "date": dates[0] if dates else h0.get("date"),
        "stage_dates": stage_dates,
        "host": sorted({h["host"] for h in headers}),
        "devices": sorted({h["device"] for h in headers}),
        "backend": h0.get("backend"),
        "versions": h0.get("versions"),
        "ranks": h0.get("world"),
        "nodes": h0.get("nodes"),
        "ranks_per_node": h0.get("local_world"),
        "threads_per_rank": h0.get("threads"),
        "threads_note": h0.get("threads_note") or "",
        "cpu_count": h0.get("cpu_count"),
        # Cache sizes per core (sysfs): with the model name, what tells two hosts apart.
        **({"cpu_caches": h0["cpu_caches"]} if h0.get("cpu_caches") else {}),
        # Family/model/stepping and ISA flags (where the run recorded them): which processor exactly.
        **({"cpu_identity": h0["cpu_identity"]} if h0.get("cpu_identity") else {}),
        # glibc malloc settings the ranks ran with (empty: glibc's defaults).
        **({"allocator_env": h0["allocator_env"]} if h0.get("allocator_env") else {}),
        # Readings at stage starts include this run's own ranks (up to one per core); the
        # reading taken before any rank started is the one that says whether others were busy.
        "loadavg_1min_at_stage_starts_incl_own_ranks": [round(x, 2) for x in loads],
        "loadavg_before": settings.get("loadavg_before", []),
        "machine_busy": _busy(settings, loads, h0),
        # What other processes took of the CPU during each stage (simdl.calibrate.host_load;
        # where the run measured it): the last attempt of each stage, in cores on average.
        **({"others_cores_by_stage": by_stage} if (by_stage := _others_by_stage(run_dir, stages)) else {}),
        "settings": settings,
    }


def _busy_note(prov: dict) -> str:
    """The profile notes' sentence on how busy the machine was (:func:`_busy`)."""
    before = prov.get("loadavg_before") or []
    loads = ", ".join(str(b["loadavg"][0]) for b in before)
    others = [(b.get("host_cpu") or {}).get("others_cores") for b in before]
    if before and all(o is not None for o in others):
        said = (
            f"other processes used {', '.join(f'{o:.2f}' for o in others)} cores over the seconds before the "
            f"ranks started (simdl.calibrate.host_load; 1-min load average {loads})"
        )
        text = (
            f" The machine was busy when calibration started: {said}; timings include contention."
            if prov["machine_busy"]
            else f" The machine was otherwise idle when calibration started: {said}."
        )
    elif before:
        text = (
            " Other processes were using the machine when calibration started (1-min load average "
            "above 0.5 before the ranks started): timings include contention."
            if prov["machine_busy"]
            else f" The machine was otherwise idle when calibration started (1-min load average {loads} "
            "before the ranks started)."
        )
    else:
        text = ""
    from .host_load import BUSY_CORES

    busy = {k: v for k, v in (prov.get("others_cores_by_stage") or {}).items() if v > BUSY_CORES}
    if busy:
        text += (
            " Other processes took CPU during the measurements: "
            + ", ".join(f"{v:.2f} cores on average during the {k} stage" for k, v in busy.items())
            + "; those stages' timings include that contention."
        )
    return text


def _others_by_stage(run_dir: Path, stages) -> dict[str, float]:
    out = {}
    for name in stages:
        try:
            attempts = json.loads((Path(run_dir) / name / "host_cpu.json").read_text())
        except (OSError, ValueError):
            continue
        if attempts and attempts[-1].get("others_cores") is not None:
            out[name] = attempts[-1]["others_cores"]
    return out


def _dates(prov: dict) -> str:
    """The measurement date, or each stage's when they were measured hours apart."""
    sd = prov.get("stage_dates") or {}
    days = {d[:13] for d in sd.values()}
    if len(days) <= 1:
        return str(prov["date"])
    return ", ".join(f"{stage} {d}" for stage, d in sorted(sd.items(), key=lambda kv: kv[1]))


# mallopt(3) environment variables and the host keys they set (bytes in the environment).
_ALLOCATOR_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": "mmap_threshold_MiB", "MALLOC_TRIM_THRESHOLD_": "trim_threshold_MiB"}


def _allocator_thresholds(env: dict[str, str], run: str) -> dict[str, Any]:
    """The host's mmap and trim thresholds where the ranks ran with them set (a setting fixes
    the threshold and turns glibc's dynamic adjustment off: mallopt(3))."""
    out: dict[str, Any] = {}
    for var, key in _ALLOCATOR_THRESHOLDS.items():
        if var in env:
            out[key] = {
                "value": round(int(env[var]) / MiB, 6),
                "kind": "framework",
                "source": f"the ranks' environment in run {run}: {var}={env[var]} (mallopt(3))",
            }
    return out


def _busy(settings: dict, loads: list[float], h0: dict) -> bool:
    """Other processes were busy when the measurements started: they kept more than a quarter
    of a core busy (simdl.calibrate.host_load), or, in runs that did not measure it, the
    1-minute load average was above 0.5 (which lags a minute behind)."""
    from .host_load import BUSY_CORES

    measured = [(b.get("host_cpu") or {}).get("others_cores") for b in settings.get("loadavg_before", [])]
    if measured and all(m is not None for m in measured):
        return max(float(m) for m in measured if m is not None) > BUSY_CORES
    before = [b["loadavg"][0] for b in settings.get("loadavg_before", [])]
    if before:
        return max(before) > 0.5
    return bool(loads and max(loads) > 0.5 + (h0.get("local_world") or 1))


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
    if family.applies("wrap", name):
        kw["wrap"] = "block"
    if family.applies("reshard_root", name):
        # calibration/strategies.py gives the root reshard_after_forward explicitly too.
        kw["reshard_root"] = fixed.get("sharding") == "full"
    return kw


def _spmd_variant(v: str) -> bool:
    """A measured step of a strategy whose ranks are peers (a registered label; not the
    ``local`` single-process steps, nor a parameter server)."""
    from ..strategies import registry

    try:
        registry.split_label(v)
    except SimdlError:
        return False
    return not registry.is_client_server(v)


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
