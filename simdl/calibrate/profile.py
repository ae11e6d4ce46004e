"""Turn a calibration run into a cluster profile in the preset format.

Every fitted number is written ``{value, kind: calibrated, source}``; the source names the
run, the stage, the measurement range and the fit residual. Numbers calibration does not
measure (device memory overheads, the data loader) are copied from a base preset with
their own kind and source. The free-form ``calibration`` section records provenance
(host, devices, torch/NCCL/gloo versions, date, load average, settings, ranges) and the
fit quality of every parameter group, including the held-out checks.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ..cluster.host import device_file_for
from ..cluster.spec import CLUSTER_DIR, FrozenMap, cluster_names, is_cpu_device_name, load_cluster, load_gpu, raw_preset
from ..errors import SimdlError
from ..units import MiB
from . import fit as F
from .compute import STEP_ANCHOR
from .records import STAGES
from .jitter import StepJitterFit, local_step_series
from .overlap import StrategyStepFit

# calibration/ps.py's RPC_TRANSPORTS (the stage's scripts are not a package to import from).
_RPC_TRANSPORTS = ("uv",)

GPU_NAME_MAP = (  # substring of torch.cuda.get_device_name() -> shipped GPU file
    ("A100-SXM4-80GB", "A100-SXM4-80GB"), ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100 80GB PCIe", "A100-PCIe-80GB"), ("A100-PCIE-80GB", "A100-PCIe-80GB"),
    ("H200", "H200"), ("H100 PCIe", "H100-PCIe"), ("H100", "H100-SXM"), ("A10G", "A10G"), ("V100", "V100-SXM2"),
)


def gpu_file_for(device: str, caches: dict[str, str] | None = None) -> str:
    """The device file a calibration on ``device`` is measured against: for a host CPU, the
    one whose ``host`` block matches its model name and ``caches`` (simdl.cluster.host)."""
    if device.startswith("cpu"):
        return device_file_for(device, caches)
    for needle, name in GPU_NAME_MAP:
        if needle.lower() in device.lower():
            return name
    raise SimdlError(f"no GPU file matches device {device!r}; give --gpu NAME (one of the files in "
                     "simdl/cluster/data/gpus) or a path to a GPU YAML with its peaks")


def base_preset_for(gpu: str) -> dict[str, Any]:
    """Raw YAML of a shipped preset on the same device (for the sections not calibrated)."""
    if is_cpu_device_name(gpu):
        return raw_preset(CLUSTER_DIR / "cpu-local.yaml")
    for name in cluster_names():
        raw = raw_preset(name)
        if raw.get("gpu") == gpu:
            return raw
    return raw_preset(CLUSTER_DIR / "a100-80gb-pcie.yaml")


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
        + (f", held-out sizes {r['held_out']['within_10pct']}/{r['held_out']['n']} within 10 % (median "
           f"{r['held_out']['median_abs_rel_error']:.3f}, max {r['held_out']['max_abs_rel_error']:.3f})"
           if r.get("held_out") else "") for c, r in fits.items())
    source = (f"{tag}: {prov['backend']} {', '.join(fits)} at {n} ranks, {lo}-{hi} B, {v0['passes']} pass(es); "
              "a size's time is the 25th percentile of its chunks; piecewise ring alpha-beta fitted per collective "
              "(simdl.calibrate.regimes: Huber NNLS per regime, regimes by dynamic programming, their number by "
              "cross-validation), regime looked up by bytes per ring step (m/n; m for broadcast), overhead = the "
              "same call on a one-rank group; "
              + ("all_gather and reduce_scatter step at the 32 MiB mmap threshold where a gap holds it (gloo's "
                 "whole-message temporary, simdl.collectives.regimes); " if prov["backend"] == "gloo" else "")
              + f"held-out check refits without every third size and the largest: {quality}")
    return {"kind": "calibrated", "source": source, "link_GB_per_s": link_GB_per_s,
            "collectives": {c: {"overhead_us": r["params"]["overhead_us"], "regimes": r["params"]["regimes"]}
                            for c, r in fits.items()}}


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
            section["source"] = (f"groups of {d} consecutive ranks, the node's {groups} groups calling at once; "
                                 + section["source"])
            out[str(d)] = section
    return out


def provenance(stages: dict, settings: dict, run_dir: Path) -> dict[str, Any]:
    headers = [h for st in stages.values() for h in st.headers.values()]
    if not headers:
        raise SimdlError(f"{run_dir}: no measurements found")
    h0 = headers[0]
    loads = [h["loadavg"][0] for h in headers if h.get("loadavg")]
    # When each stage was measured (a resumed run, or a stage measured again, spans days).
    stage_dates = {name: min(h["date"] for h in st.headers.values() if h.get("date"))
                   for name, st in stages.items() if any(h.get("date") for h in st.headers.values())}
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
        "ranks": h0.get("world"), "nodes": h0.get("nodes"), "ranks_per_node": h0.get("local_world"),
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
        said = (f"other processes used {', '.join(f'{o:.2f}' for o in others)} cores over the seconds before the "
                f"ranks started (simdl.calibrate.host_load; 1-min load average {loads})")
        text = (f" The machine was busy when calibration started: {said}; timings include contention."
                if prov["machine_busy"] else f" The machine was otherwise idle when calibration started: {said}.")
    elif before:
        text = (" Other processes were using the machine when calibration started (1-min load average "
                "above 0.5 before the ranks started): timings include contention." if prov["machine_busy"]
                else f" The machine was otherwise idle when calibration started (1-min load average {loads} "
                     "before the ranks started).")
    else:
        text = ""
    from .host_load import BUSY_CORES

    busy = {k: v for k, v in (prov.get("others_cores_by_stage") or {}).items() if v > BUSY_CORES}
    if busy:
        text += (" Other processes took CPU during the measurements: "
                 + ", ".join(f"{v:.2f} cores on average during the {k} stage" for k, v in busy.items())
                 + "; those stages' timings include that contention.")
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
            out[key] = {"value": round(int(env[var]) / MiB, 6), "kind": "framework",
                        "source": f"the ranks' environment in run {run}: {var}={env[var]} (mallopt(3))"}
    return out


def _busy(settings: dict, loads: list[float], h0: dict) -> bool:
    """Other processes were busy when the measurements started: they kept more than a quarter
    of a core busy (simdl.calibrate.host_load), or, in runs that did not measure it, the
    1-minute load average was above 0.5 (which lags a minute behind)."""
    from .host_load import BUSY_CORES

    measured = [(b.get("host_cpu") or {}).get("others_cores") for b in settings.get("loadavg_before", [])]
    if measured and all(m is not None for m in measured):
        return max(measured) > BUSY_CORES
    before = [b["loadavg"][0] for b in settings.get("loadavg_before", [])]
    if before:
        return max(before) > 0.5
    return bool(loads and max(loads) > 0.5 + (h0.get("local_world") or 1))


def _step_kwargs(m: dict, ranks: int) -> dict:
    """predict() arguments of one measured strategy step (calibration/strategies.py)."""
    from ..strategies import registry

    name, fixed = registry.split_label(m["variant"])
    family = registry.get(name)
    kw = dict(model=m["model"], strategy=name, gpus=ranks, dataset=m["dataset"],
              batch_size=m["batch"], optimizer="momentum", precision="fp32", loader_workers=0, **fixed)
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
        pts.append({"key": key, "model": m["model"], "measured_s": max(m["copies_s"] - local, 0.0),
                    "predicted_s": predicted})
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
        pts.append({"key": key, "variant": v, "model": m["model"], "batch": m["batch"], "measured_s": m["step_s"],
                    "measured_local_s": local, "kwargs": _step_kwargs(m, ranks)})
    if not pts:
        return None, []
    cache: dict = {}

    def spec_for(theta):
        key = k, f, far, h, a, u = tuple(float(f"{float(x):.9g}") for x in theta)
        if key not in cache:
            def src(what):
                return Sourced(what, "assumed", "candidate of the strategy fit")
            eff = dataclasses.replace(spec.efficiency, comm_compute_interference=src(k),
                                      collective_load_factor=src(f), collective_load_factor_all_reduce=src(far),
                                      collective_load_half_size=src(h), collective_load_overhead=src(a))
            cache[key] = dataclasses.replace(spec, efficiency=eff, strategies=spec.strategies.with_fsdp(
                unit_overhead=src(u) if u else None))
        return cache[key]

    def pred(theta, p):
        return predict(cluster=spec_for(theta), **p["kwargs"]).iteration_time_s

    est = StrategyStepFit(fixed=fixed).fit(pts, pred)
    for p, r, b in zip(pts, est.residuals_, est.errors_before_):
        p.pop("kwargs")
        p.update(rel_error_fitted=round(float(r), 4), rel_error_defaults=round(float(b), 4))
    return est, pts


# Price blocking collectives by their logged calls (simdl.calibrate.in_step.BlockingFit) where
# a run logged them: on a calibration's own leave-one-model-out step errors it cut the worst
# model's error from 55.3 % to 23.7 % at 2 ranks and from 50.3 % to 33.3 % at 4, against the
# load factors alone (lab/CALIBRATION.md, "Blocking collectives"). False gives the latter.
BLOCKING_FROM_CALLS = True
# Fit FSDP2's host time per unit (efficiency.fsdp_unit_overhead_us, u) with the other step
# parameters; False holds u at 0.
FIT_FSDP_UNIT_OVERHEAD = True
# Write how much slower the strategies' buffer copies run inside a step
# (efficiency.copy_in_step_factor, fitted from the profiled strategy steps before the step
# fit) into the profile. The fit and its leave-one-model-out check are always made and
# printed; the factor is not used, because one factor does not carry over between models
# (leave-one-model-out error of the models' copy time up to 67.7 % on an AMD EPYC): the extra
# time is mostly page faults of FSDP2's flat buffers, which depend on glibc's heap history
# (lab/CALIBRATION.md, "The in-step copy factor"). The part with a rule, FSDP's sharded
# gradients trimmed and faulted in again every step, is priced by the plan
# (simdl.hosts.cpu_glibc GlibcCpuHost.refault_limit). True writes it (what-if: copies slowed as fitted).
COPY_FACTOR_FROM_PROFILED_STEPS = False


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
    idle_eff = dataclasses.replace(spec.efficiency, collective_load_factor=None, collective_load_factor_all_reduce=None,
                                   collective_load_half_size=None, collective_load_overhead=None,
                                   collective_blocking_factors=FrozenMap(), collective_blocking_wait=None)
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
            rows.append({"model": model, "key": key, "calls": c,
                         "compute_s": statistics.median(r["step_s"] for r in local)})
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
        out[key] = {"faulted_bytes_per_step": faulted,
                    "warmup_over_step": [statistics.median(x) for x in zip(*warm)] if warm and warm[0] else []}
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
        out[key] = summarise(calls, lambda c, n: idle.time(c, n, ranks, "world"),
                             lambda c, n: charged.time(c, n, ranks, "world"))
        out[key]["steps"] = calls["steps"]
    return out


def build_profile(run_dir: Path, settings: dict, *, name: str, gpu: str | None = None) -> tuple[dict, dict]:
    """(profile YAML dict, full fit report) for a run directory."""
    run_dir = Path(run_dir)
    stages = F.load_all(run_dir)
    prov = provenance(stages, settings, run_dir)
    device = prov["devices"][0]
    gpu = gpu or gpu_file_for(device, prov.get("cpu_caches"))
    gpu_spec = load_gpu(gpu)
    base = base_preset_for(gpu)
    per_node = int(prov["ranks_per_node"] or 1)
    nodes = int(prov["nodes"] or 1)
    shared = gpu_spec.is_cpu
    share = 1.0 / per_node if shared else 1.0
    tag = f"simdl calibrate run {run_dir.name} ({_dates(prov)}, {', '.join(prov['host'])})"
    report: dict[str, Any] = {"provenance": prov}
    # Stages this calibration ran; what the others measure is kept from the base profile.
    ran = set(settings.get("stages") or STAGES)

    # -- collectives ------------------------------------------------------------------------
    coll = F.fit_collectives(stages["collectives"]) if "collectives" in ran and stages["collectives"].measurements else {}
    report["collectives"] = coll
    scope = "intra" if "intra" in coll else "world"
    c = coll.get(scope, {})
    joint = c.get("joint")
    p2p = c.get("per_collective", {}).get("send_recv")
    intra = copy.deepcopy(base["intra_node"])
    eff = copy.deepcopy(base["efficiency"])
    if joint:
        lo, hi = joint["bytes_range"]
        q = joint["quality"]
        ho = joint.get("held_out", {})
        rng = f"{len(joint['collectives'])} collectives, each its own bus bandwidth, ({', '.join(joint['collectives'])}) x {lo}-{hi} B over {joint['group_size']} ranks"
        fitq = (f"R2 {q['r2']}, R2(log) {q['r2_log']}, median |rel err| {q['median_abs_rel_error']}"
                + (f"; held-out sizes max |err| {ho['max_abs_rel_error']}" if ho else ""))
        bus = joint["bus_bandwidth_B_per_s"]
        if shared:
            # The 'link' of processes on one host is what send/recv achieves; the collective
            # efficiency is the joint fit's bus bandwidth relative to it (<= 1).
            link_bw = max(p2p["params"]["bus_bandwidth_GB_per_s"] * 1e9 if p2p else bus, bus)
            intra["link"] = "shm"
            for k in ("pcie_GB_per_s", "pcie_latency_us", "mesh"):
                intra.pop(k, None)
            intra["bandwidth_GB_per_s"] = _val(link_bw / 1e9, f"{tag}: {prov['backend']} send/recv bandwidth "
                                               f"(ring, every rank sends and receives), alpha-beta fit"
                                               + (f" R2 {p2p['quality']['r2']}" if p2p else ""))
            if p2p and "ps" in ran:  # the ps stage's ping-pong replaces it below; without that stage, keep the base's
                intra["latency_us"] = _val(p2p["params"]["alpha_us"] + p2p["params"]["overhead_us"],
                                           f"{tag}: {prov['backend']} send/recv latency (alpha + overhead of the fit)")
        else:
            link_bw = load_cluster(base["name"]).intra_node.bandwidth.value if "name" in base else bus
        e = min(bus / link_bw, 1.0)
        regimes = _regimes_section(c.get("per_collective", {}), tag, prov, float(f"{link_bw / 1e9:.4g}"))
        covered = sorted(regimes["collectives"]) if regimes else []
        note = (f"; the collectives with size regimes ({', '.join(covered)}) are priced by "
                "collective_regimes_intra instead, this line remains the simulator's base rate" if covered else "")
        eff["collective_bandwidth_intra"] = _val(e, f"{tag}: joint alpha-beta fit of {rng}: all_reduce bus bandwidth "
                                                 f"{bus / 1e9:.4g} GB/s / link {link_bw / 1e9:.4g} GB/s; {fitq}{note}")
        for cname, f in sorted(joint["bandwidth_factors"].items()):
            eff.pop(f"collective_bandwidth_factor_{cname}", None)
            if cname != "all_reduce" and cname not in covered:
                eff[f"collective_bandwidth_factor_{cname}"] = _val(
                    f, f"{tag}: {cname} bus bandwidth relative to all_reduce's in the joint fit ({rng}); {fitq}")
        eff.pop("collective_regimes_intra", None)
        if regimes:
            eff["collective_regimes_intra"] = regimes
        eff.pop("collective_regimes_subgroups", None)
        subgroups = _subgroup_sections(coll, tag, prov, float(f"{link_bw / 1e9:.4g}"))
        if subgroups:
            eff["collective_regimes_subgroups"] = subgroups
        eff["collective_latency_intra_us"] = _val(joint["alpha_s"] * 1e6, f"{tag}: joint fit alpha per ring step; {fitq}")
        eff["collective_overhead_us"] = _val(joint["overhead_s"] * 1e6, f"{tag}: joint fit fixed cost per call; {fitq}")

    inter_fit = (coll.get("inter") or {}).get("joint")
    if inter_fit and base.get("inter_node") and "name" in base:
        # Several nodes: the per-rank raw rate of an 'inter' group on the base preset's network
        # (simdl.cluster.allocate), and the fitted bus bandwidth over it. Not exercised here
        # (a single 2-core machine; calibration/README.md, "Multi-node").
        from ..cluster import allocate

        raw = allocate(load_cluster(base["name"]), per_node * nodes, nodes).group_bandwidth("inter")
        q = inter_fit["quality"]
        src = (f"{tag}: alpha-beta fit of one-rank-per-node groups ({', '.join(inter_fit['collectives'])}, "
               f"{inter_fit['bytes_range'][0]}-{inter_fit['bytes_range'][1]} B); R2 {q['r2']}")
        eff["collective_bandwidth_inter"] = _val(min(inter_fit["bus_bandwidth_B_per_s"] / raw, 1.0),
                                                 f"{src}; bus / raw {raw / 1e9:.4g} GB/s of the base preset's NICs")
        eff["collective_latency_inter_us"] = _val(inter_fit["alpha_s"] * 1e6, src)

    # -- parameter server ------------------------------------------------------------------------
    ps = F.fit_ps(stages["ps"]) if "ps" in ran and stages["ps"].measurements else None
    if shared and ps:
        # One-way latency between two processes of this host: half the push/pull ping-pong
        # (the send/recv ring above sends and receives at once, which costs more than one hop).
        pp = ps["pingpong"]
        intra["latency_us"] = _val(pp["latency_us"], f"{tag}: half the round trip of a {prov['backend']} "
                                   f"send then recv between two ranks (ping-pong, {pp['bytes_range'][0]}-"
                                   f"{pp['bytes_range'][1]} B), alpha-beta fit R2 {pp['quality']['r2']}")

    # -- compute ---------------------------------------------------------------------------
    held_out = list(settings.get("compute_held_out", []))
    comp_st = stages["compute"]
    comp = F.fit_compute(comp_st, gpu_spec.peak("fp32") * share, gpu_spec.memory_bandwidth.value * share,
                         held_out, profile_only=settings.get("compute_profile_only", [])) \
        if "compute" in ran and comp_st.measurements else {}
    est = comp.pop("estimator", None)
    report["compute"] = comp
    if est is not None:
        q = comp["quality"]["steps"]
        ho = comp.get("held_out")
        batches = "; ".join(f"{m} b{','.join(map(str, b))}" for m, b in comp["batches"].items())
        fitq = (f"fit on {', '.join(comp['fit_models'])}: step R2 {q['r2']}, max |step err| {q['max_abs_rel_error']}"
                + (f"; held-out {', '.join(ho['models'])}: max |step err| {ho['steps']['max_abs_rel_error']}" if ho else ""))
        share_note = f" per rank ({per_node} ranks share the device)" if shared else ""
        eff["matmul"] = _val(est.matmul_efficiency_, f"{tag}: per-row roofline fit of fwd/bwd times ({batches}) "
                             f"against the workload tables, of the fp32 peak{share_note}; {fitq}")
        eff["memory_bandwidth"] = _val(est.memory_bandwidth_efficiency_, f"{tag}: same roofline fit, fraction of the "
                                       f"memory bandwidth{share_note}; {fitq}")
        eff["kernel_launch_us"] = (
            _val(est.kernel_launch_s_ * 1e6, f"{tag}: tiny-op microbenchmark (a 16-element add, eager dispatch + "
                 f"launch), median over ranks; held fixed in the roofline fit", kind="measured")
            if comp.get("kernel_launch_measured") else
            _val(est.kernel_launch_s_ * 1e6, f"{tag}: same roofline fit, seconds per kernel (eager dispatch + launch); "
                 f"{fitq}"))
        eff["matmul_call_overhead_us"] = (
            _val(est.matmul_call_overhead_s_ * 1e6, f"{tag}: tiny-convolution microbenchmark (forward and both "
                 f"gradients, 3 calls; its fixed part over 3, less one kernel launch), median over ranks; held fixed "
                 f"in the roofline fit", kind="measured")
            if comp.get("matmul_call_measured") else
            _val(est.matmul_call_overhead_s_ * 1e6, f"{tag}: same roofline fit, fixed seconds per matmul/convolution "
                 f"call (fwd, and each bwd gradient); {fitq}"))
        eff["compute_memory_overlap"] = _val(est.compute_memory_overlap_, f"{tag}: same roofline fit, fraction of a "
                                             f"row's shorter part (FLOPs or bytes time) hidden under its longer part "
                                             f"(1 = max, 0 = sum); {fitq}")
        for c, v in est.class_bandwidth_efficiency_.items():
            eff[f"memory_bandwidth_{c}"] = _val(v, f"{tag}: same roofline fit, fraction of the memory bandwidth"
                                                f"{share_note} that {c} rows stream their bytes at; {fitq}")
        for c, v in est.class_call_overhead_s_.items():
            eff[f"call_overhead_{c}_us"] = _val(v * 1e6, f"{tag}: same roofline fit, fixed seconds per call of a "
                                                f"{c} row (fwd and bwd), on top of its kernels' launches; {fitq}")
        if est.conv_weight_grad_efficiency_:
            eff["conv_weight_grad_bandwidth"] = _val(
                est.conv_weight_grad_efficiency_, f"{tag}: same roofline fit, fraction of the memory bandwidth"
                f"{share_note} at which a convolution's backward accumulates its weight gradient once per sample; {fitq}")

    per_rank_bw = gpu_spec.memory_bandwidth.value * share
    for key, what, ops in (("stream", "stream_bandwidth", "momentum-SGD optimizer steps over 16-32 Mi parameters in "
                            "tensors of 16 Ki to 16 Mi elements (8 passes per parameter byte)"),
                           ("copy", "copy_bandwidth", "tensor copies of 32-256 MiB (read + written bytes)")):
        st_fit = comp.get(key) if comp else None
        if not st_fit:
            continue
        st_fit.pop("estimator", None)
        ho = st_fit["held_out"]
        src = (f"{tag}: {ops}, every rank at once, t = bytes / B + calls x c fitted on {st_fit['n']} sizes; "
               f"R2 {st_fit['quality']['r2']}"
               + (f", held-out sizes max |err| {ho['max_abs_rel_error']}" if ho else ""))
        # Fractions of the GPU file's memory bandwidth (per rank when ranks share the device);
        # not capped at 1: a datasheet or one-off measurement may understate what a kernel reaches.
        eff[what] = _val(st_fit["bandwidth_GB_per_s"] * 1e9 / per_rank_bw,
                         f"{src}: {st_fit['bandwidth_GB_per_s']:.4g} GB/s per rank")
        if key == "stream":
            eff["stream_call_overhead_us"] = _val(st_fit["call_us"], src)
    pf = comp.get("page_fault") if comp else None
    host_extra: dict[str, Any] = {}
    if pf and shared:
        host_extra["page_fault_ns_per_byte"] = _val(
            pf["s_per_byte"] * 1e9, f"{tag}: fill of a fresh buffer minus the same fill of a reused one, per byte, "
            f"median over {len(pf['sizes_bytes'])} sizes ({', '.join(f'{b / 2**20:.0f} MiB' for b in pf['sizes_bytes'])}) "
            "above the mmap threshold")
        host_extra["mmap_threshold_MiB"] = {
            "value": 32, "kind": "framework",
            "source": "glibc malloc: DEFAULT_MMAP_THRESHOLD_MAX = 4 MiB x sizeof(long) on 64-bit (malloc/malloc.c, "
                      "mallopt(3)); the dynamic threshold rises to it, so larger buffers are mmapped at every allocation"}
        host_extra.update(_allocator_thresholds(prov.get("allocator_env") or {}, run_dir.name))
    rows = comp.get("measured_rows") if comp else None
    compute_profile = None
    if rows:
        compute_profile = {
            "file": None, "kind": "calibrated",
            "source": f"{tag}: per-row forward/backward times of "
                      + "; ".join(f"{r['model']} ({r['dataset']}) b{','.join(map(str, r['batches']))}" for r in rows)
                      + f", {per_node} ranks measuring at once, each model's rows rescaled to its "
                      + f"{STEP_ANCHOR} unhooked step (simdl.calibrate.compute.STEP_ANCHOR)",
            "data": {"schema": "simdl-compute-profile/1", "precision": "fp32",
                     "ranks_sharing_device": per_node if shared else 1,
                     "source": f"simdl calibrate run {run_dir.name} ({prov['stage_dates'].get('compute', prov['date'])})",
                     "models": rows}}

    # -- parameter server (fitted above) ------------------------------------------------------
    report["ps"] = ps
    ps_section = copy.deepcopy(base.get("ps_servers")) if base.get("ps_servers") else None
    if ps:
        lo, hi = ps["bytes_range"]
        ps_section = ps_section or {"count": 1}
        for k in ("worker_link_Gb_per_s", "receive_fault_ns_per_byte", "response_copy_ns_per_byte"):
            ps_section.pop(k, None)
        if ps["transport"] == "rpc":
            qa, qt = ps["quality"]["rpc_alone"], ps["quality"]["rpc_together"]
            how = (f"torch.distributed.rpc (TensorPipe {'/'.join(_RPC_TRANSPORTS)}) as validate/train.py runs its "
                   f"server, fp32 tensors of {lo}-{hi} B received into fresh buffers")
            alone = (f"{tag}: one worker's pushes and pulls, the others idle, {how}: t = latency + bytes / B_worker "
                     f"+ fresh x receive_fault (x2 for a pull) + pull bytes x response_copy, fresh = bytes above the "
                     f"mmap threshold (32 MiB), simdl.calibrate.ps; R2 {qa['r2']}, max |rel err| {qa['max_abs_rel_error']}")
            if ps.get("server_side_measured", True):
                server_src = (f"{tag}: server side of the PS link: {ps['rpc_workers'][0]} workers push at once, then "
                              f"pull at once (per repeat the slowest one's time = latency + workers x bytes / B + the "
                              f"one-worker fit's fault and copy terms; no slower than one worker's link), {how}; "
                              f"R2 {qt['r2']}, max |rel err| {qt['max_abs_rel_error']}")
            else:
                server_src = (f"{tag}: server side of the PS link not measured (one worker: nothing to share the "
                              f"server with), taken as one worker's link, so N workers at once take N times one "
                              f"worker's transfer, as the 4-rank calibrations measured it (simdl.calibrate.ps); {how}")
            ps_section["nic_Gb_per_s"] = _val(ps["bandwidth_GB_per_s"] * 8, server_src)
            ps_section["worker_link_Gb_per_s"] = _val(ps["worker_bandwidth_GB_per_s"] * 8, alone)
            ps_section["latency_us"] = _val(ps["latency_us"], alone)
            ps_section["receive_fault_ns_per_byte"] = _val(ps["receive_fault_ns_per_byte"], alone)
            ps_section["response_copy_ns_per_byte"] = _val(ps["response_copy_ns_per_byte"], alone)
        else:
            q = ps["quality"]["roundtrip"]
            src = (f"{tag}: push+pull round trip {lo}-{hi} B between a worker and a server rank "
                   f"({prov['backend']} send/recv), alpha-beta fit R2 {q['r2']}")
            ps_section["nic_Gb_per_s"] = _val(ps["bandwidth_GB_per_s"] * 8, src)
            ps_section["latency_us"] = _val(ps["latency_us"], src)
        ps_section["cpu_cores"] = _val(prov["cpu_count"] or 1, f"{tag}: os.cpu_count() on the server host", "measured")
        if ps["update_bandwidth_GB_per_s"]:
            uq = ps["quality"].get("update", {})
            ps_section["update_bandwidth_GB_per_s"] = _val(
                ps["update_bandwidth_GB_per_s"], f"{tag}: momentum-SGD update on a flat fp32 tensor, 8 passes "
                f"streamed per parameter byte, fit R2 {uq.get('r2')}")

    profile: dict[str, Any] = {
        "name": name,
        "description": f"Calibrated by simdl calibrate on {', '.join(prov['host'])}: {nodes} node(s) x {per_node} "
                       f"rank(s), {device}, {prov['backend']}",
        "gpu": gpu,
        "gpus_per_node": per_node,
        "nodes": nodes,
        "max_nodes": base.get("max_nodes", 1) if nodes == 1 else None,
    }
    if shared:
        profile["shared_device"] = True
    if prov.get("backend"):  # the backend the collectives were measured with
        profile["collective_backend"] = prov["backend"]
    profile["intra_node"] = intra
    if nodes > 1 or base.get("inter_node"):
        if "inter_node" in base:
            profile["inter_node"] = copy.deepcopy(base["inter_node"])
    if ps_section:
        profile["ps_servers"] = ps_section
    profile["efficiency"] = eff
    if base.get("strategies"):  # strategy costs not refitted below stay the base's, as eff's do
        profile["strategies"] = copy.deepcopy(base["strategies"])
    profile["memory"] = copy.deepcopy(base["memory"])
    host = copy.deepcopy(base["host"])
    if prov.get("cpu_count"):
        host["cpu_cores"] = _val(prov["cpu_count"], f"{tag}: os.cpu_count()", "measured")
    host.update(host_extra)
    profile["host"] = host
    if compute_profile:
        profile["compute_profile"] = compute_profile
    elif "compute" not in ran and base.get("compute_profile"):
        # Kept from the base preset with the rest of the compute stage's values; its file is
        # named relative to the preset's folder, so the new profile names it absolutely.
        cp = base["compute_profile"]
        f = cp["file"] if isinstance(cp, dict) else cp
        profile["compute_profile"] = dict(cp if isinstance(cp, dict) else {"file": f},
                                          file=str((CLUSTER_DIR / f).resolve()) if not Path(f).is_absolute() else f)
    if profile["max_nodes"] is not None and profile["max_nodes"] > 1 and "inter_node" not in profile:
        profile["max_nodes"] = 1
    if nodes == 1 and "inter_node" not in profile:
        profile["max_nodes"] = 1
        for k in ("collective_bandwidth_inter", "collective_latency_inter_us"):
            eff.pop(k, None)

    # -- overlap (needs the provisional profile) -----------------------------------------------
    strat = F.strategy_points(stages["strategies"]) if "strategies" in ran and stages["strategies"].measurements else {}
    report["strategies"] = {"measured": strat}
    # Blocking collectives (FSDP2 on CPU) priced as their logged calls ran (simdl.calibrate.in_step);
    # f, the load factor of all-gathers and reduce-scatters, then prices none of the steps.
    fixed = {} if FIT_FSDP_UNIT_OVERHEAD else {5: 0.0}
    logged = _logged_calls(stages["strategies"]) if strat and nodes == 1 else {}
    if logged and eff.get("collective_regimes_intra") and BLOCKING_FROM_CALLS:
        bf = _blocking_fit(stages["strategies"], logged, profile, per_node * nodes)
        if bf is not None:
            worst = max((abs(v["rel_error"]) for h in bf.held_out_.values() for v in h.values()), default=None)
            report["strategies"]["blocking"] = {"factors": bf.factors_, "wait": bf.wait_, "calls": bf.n_calls_,
                                                "held_out": bf.held_out_, "held_out_max_abs_rel_error": worst}
            src = (f"{tag}: in-step time of every logged FSDP collective call ({bf.n_calls_} calls; "
                   f"{', '.join(sorted(bf.held_out_) or ['one model'])} at {per_node * nodes} ranks) from the last "
                   f"rank's entry to the exit, less the idle fixed cost, over the idle curves' wire time of the "
                   f"same calls"
                   + (f"; a model's in-call time per step predicted from the other models' factors and wait within "
                      f"{worst:.1%}" if worst is not None else ""))
            for c, g in bf.factors_.items():
                eff[f"collective_blocking_factor_{c}"] = _val(g, src)
            eff["collective_blocking_wait"] = _val(bf.wait_, src.replace(
                "from the last rank's entry to the exit, less the idle fixed cost, over the idle curves' wire time "
                "of the same calls",
                "before the last rank's entry (waiting for a peer still computing), per second of the model's "
                "local step, pooled"))
            if {"all_gather", "reduce_scatter"} <= set(bf.factors_):
                fixed[1] = 1.0
                eff.pop("collective_load_factor", None)
    # Strategies' buffer copies inside a step, from the profiled steps: before the step fit,
    # whose parameters would otherwise absorb them (u, per unit, took most of it).
    # Host devices only: on a GPU the profiler's host-side copy ops are launches, not copies.
    if strat:
        eff.pop("copy_in_step_factor", None)
    if strat and shared:
        with tempfile.TemporaryDirectory() as td:
            cf = _copy_fit(profile, strat, per_node * nodes, Path(td))
        if cf is not None:
            worst = max((abs(e) for h in cf.held_out_.values() for e in h["rel_errors"].values()), default=None)
            report["strategies"]["copies"] = {
                "factor": cf.factor_, "points": [dict(p, rel_error=round(r, 4)) for p, r in zip(cf.points_, cf.residuals_)],
                "held_out": cf.held_out_, "held_out_max_abs_rel_error": worst,
                "written": COPY_FACTOR_FROM_PROFILED_STEPS}
        if cf is not None and COPY_FACTOR_FROM_PROFILED_STEPS:
            eff["copy_in_step_factor"] = _val(cf.factor_, (
                f"{tag}: copy ops (copy_, _chunk_cat, cat, ...) on the training thread of one profiled step of each "
                f"DDP/FSDP variant ({len(cf.points_)} steps of {', '.join(sorted({p['model'] for p in cf.points_}))} "
                f"at {per_node * nodes} ranks), less the same model's local step's, over the plan's copies at the "
                f"idle copy bandwidth and page-fault cost; least squares on relative errors"
                + (f"; a model's copies predicted from the other models' factor within {worst:.1%}"
                   if worst is not None else "")))
    if strat and (est is not None or rows) and (joint or eff.get("collective_regimes_intra")):
        with tempfile.TemporaryDirectory() as td:
            sf, pts = _strategy_fit(profile, strat, per_node * nodes, Path(td), fixed)
        if sf is not None:
            ho = sf.held_out_
            worst = max((abs(e) for h in ho.values() for e in h["rel_errors"].values()), default=None)
            report["strategies"]["fit"] = {"params": sf.params(), "points": pts, "held_out": ho,
                                           "held_out_max_abs_rel_error": worst,
                                           "at_bounds": sf.at_bounds_,
                                           "held": [name for i, name in ((1, "collective_load_factor"),
                                                                         (5, "fsdp_unit_overhead_us"))
                                                    if i in fixed]}
            models = sorted({p["model"] for p in pts})
            src = (f"{tag}: least-squares fit of k (interference), "
                   + ("f_ar, h and a (all_reduce's load factor for small messages, the message size where the "
                      "slowdown halves, and delay per call; blocking all-gathers and reduce-scatters priced as "
                      "logged) " if 1 in fixed else
                      "f, f_ar, h and a (collective load factor for small messages, all_reduce's own, the message "
                      "size where the slowdown halves, and delay per call) ")
                   + ("" if 5 in fixed else "and u (FSDP2's host time per unit per step) ")
                   + f"to {len(pts)} measured DDP/FSDP steps of {', '.join(models)} at {per_node * nodes} ranks; "
                   f"step errors at k=0, f=f_ar=1, a=0: {', '.join(f'{x:+.0%}' for x in sf.errors_before_)} -> fitted "
                   f"{', '.join(f'{x:+.0%}' for x in sf.residuals_)}"
                   + (f"; leave-one-model-out max |err| {worst:.1%}" if worst is not None else ""))
            eff["comm_compute_interference"] = _val(sf.interference_, src)
            if 1 not in fixed:
                eff["collective_load_factor"] = _val(sf.load_factor_, src)
            eff["collective_load_factor_all_reduce"] = _val(sf.load_factor_all_reduce_, src)
            eff["collective_load_half_size_MiB"] = _val(sf.load_half_size_bytes_ / 2**20, src)
            eff["collective_load_overhead_us"] = _val(sf.load_overhead_s_ * 1e6, src)
            if 5 not in fixed:
                profile.setdefault("strategies", {}).setdefault("fsdp", {})["unit_overhead_us"] = _val(
                    sf.unit_overhead_s_ * 1e6, src)

    # -- page faults and warm-up of the measured steps: a record, nothing fitted yet -----------
    if strat:
        report["strategies"]["faults_warmup"] = _faults_warmup(stages["strategies"])

    # -- collectives inside the measured steps (simdl.calibrate.in_step): a check -------------
    if logged and eff.get("collective_regimes_intra"):
        report["strategies"]["in_step"] = _in_step(logged, profile, per_node * nodes)

    # -- step-to-step spread of compute (simdl.calibrate.jitter) ------------------------------
    if "strategies" in ran and stages["strategies"].measurements:
        series = local_step_series(stages["strategies"])
        if series:
            jf = StepJitterFit().fit(series)
            report["strategies"]["compute_jitter"] = {"sigma": jf.sigma_, "sd": jf.sd_, "series": jf.n_series_,
                                                      "steps": jf.n_steps_, "per_series": jf.per_series_}
            eff["compute_jitter"] = _val(jf.sigma_, (
                f"{tag}: spread of log(step time) of local training (every rank its own copy, all "
                f"{per_node * nodes} at once, no communication), 1.4826 x the median absolute deviation of each "
                f"series about its median, pooled over {jf.n_series_} rank x model series ({jf.n_steps_} steps; "
                f"per series {min(jf.per_series_.values()):.3f}-{max(jf.per_series_.values()):.3f}); plain standard "
                f"deviation {jf.sd_:.3f}"
                + (", inflated by occasional stalled steps (simdl.calibrate.jitter)" if jf.sd_ > 1.5 * jf.sigma_ else "")))

    kept = [st for st in STAGES if st not in ran]
    kept_from = _kept_from_base(base, kept)
    kept_note = ""
    if kept_from:
        bp = kept_from["provenance"]
        kept_note = (f" Only the {', '.join(st for st in STAGES if st in ran)} stage(s) ran here; the values the "
                     f"{', '.join(kept)} stage(s) measure are kept from the base profile "
                     f"'{kept_from['profile']}'" + (f" (calibrated {bp.get('date')} on {', '.join(bp.get('devices', []))})"
                                                    if bp else "") + ", with their fit records (calibration.kept_from_base).")
    if kept_from:
        bp = kept_from["provenance"]
        profile["description"] += (f"; {', '.join(st for st in STAGES if st in ran)} stage(s) only, the "
                                   f"{', '.join(kept)} values kept from '{kept_from['profile']}'"
                                   + (f" ({', '.join(bp.get('devices', []))})" if bp else ""))
    threads = f" Each rank ran {prov['threads_per_rank']} thread(s)" + (f" ({prov['threads_note']})" if prov["threads_note"] else "") + "."
    profile["notes"] = (f"Written by `simdl calibrate` from {run_dir}. Values of kind 'calibrated' were fitted to "
                        f"measurements of this machine; others come from the base preset '{base.get('name', '?')}'."
                        + kept_note + threads + _busy_note(prov))
    profile["calibration"] = _summary(report)
    base_cal = base.get("calibration") or {}
    if kept_from:
        # Values of stages not run here came from the base profile: so do their fit records.
        for key, stage in (("collectives", "collectives"), ("compute", "compute"), ("ps", "ps"),
                           ("strategy_fit", "strategies"), ("strategy_steps_measured", "strategies")):
            if stage in kept and key in base_cal:
                profile["calibration"][key] = copy.deepcopy(base_cal[key])
        profile["calibration"]["kept_from_base"] = kept_from
    # The profile must load: validate now, with a one-line error naming the bad key.
    with tempfile.TemporaryDirectory() as td:
        load_cluster(str(write_profile(profile, Path(td) / "check.yaml")))
    return profile, report


def _kept_from_base(base: dict, kept: list[str]) -> dict | None:
    """Where the values of the stages not run here come from: the base profile's run, or, when
    the base itself kept those stages from an earlier run, that run."""
    base_cal = base.get("calibration") or {}
    if not kept or not base_cal:
        return None
    prior = base_cal.get("kept_from_base") or {}
    if prior and set(kept) <= set(prior.get("stages", [])):
        return dict(copy.deepcopy(prior), stages=kept)
    return {"profile": base.get("name"), "stages": kept, "provenance": copy.deepcopy(base_cal.get("provenance", {}))}


def _summary(report: dict) -> dict:
    """The compact part of the report that goes into the profile's calibration section."""
    out: dict[str, Any] = {"provenance": report["provenance"]}
    coll = {}
    for scope, c in report.get("collectives", {}).items():
        j = c.get("joint") or {}
        coll[scope] = {
            "joint": {k: j.get(k) for k in ("params", "quality", "collectives", "bytes_range")} | (
                {"held_out": {k: j["held_out"][k] for k in ("sizes_bytes", "max_abs_rel_error", "median_abs_rel_error", "within_10pct", "n")}}
                if j.get("held_out") else {}),
            "per_collective": {k: {"params": v["params"], "r2": v["quality"]["r2"], "r2_log": v["quality"]["r2_log"],
                                   "max_abs_rel_residual": v["quality"]["max_abs_rel_error"],
                                   "held_out_max_abs_rel_error": v.get("held_out", {}).get("max_abs_rel_error")}
                               for k, v in c.get("per_collective", {}).items()},
            # The piecewise (size-regime) fits: what efficiency.collective_regimes_intra holds.
            "regimes": {k: _regime_summary(v["regimes"]) for k, v in c.get("per_collective", {}).items()
                        if v.get("regimes")},
            "call_overhead_us": c.get("call_overhead_us", {}),
            # The measured points the fits were made on, [bytes, us] per size (the 25th percentile
            # of its chunks), so that `python -m simdl.calibrate.check` can redo the held-out
            # check from the shipped profile alone.
            "group_size": (c.get("points") or [{}])[0].get("group_size") or j.get("group_size"),
            "points_us": {coll: [[p["bytes"], float(f"{p['time_s'] * 1e6:.5g}")] for p in c.get("points", [])
                                 if p["collective"] == coll]
                          for coll in sorted({p["collective"] for p in c.get("points", [])})},
        }
    out["collectives"] = coll
    comp = report.get("compute") or {}
    if comp.get("params"):
        out["compute"] = {
            "params": comp["params"], "fit_models": comp["fit_models"], "batches": comp["batches"],
            "fit_steps": comp["quality"]["steps"], "fit_rows_r2": comp["quality"]["rows"]["r2"],
            "fit_by_class": comp["quality"]["by_class"],
        }
        if comp.get("held_out"):
            ho = comp["held_out"]
            out["compute"]["held_out"] = {"models": ho["models"], "steps": ho["steps"], "by_class": ho["by_class"],
                                          "runs": [{k: r[k] for k in ("run", "measured_step_ms", "predicted_step_ms",
                                                                       "step_rel_error")} for r in ho["runs"]],
                                          "configs": ho.get("configs", [])}
        out["compute"]["micro"] = comp.get("micro", {})
    if comp.get("stream"):
        st = comp["stream"]
        out["stream"] = {"bandwidth_GB_per_s": st["bandwidth_GB_per_s"], "call_us": st["call_us"],
                         "quality": st["quality"], "held_out": st["held_out"]}
    if comp.get("page_fault"):
        out["page_fault"] = comp["page_fault"]
    if comp.get("measured_rows"):
        out["compute_profiles"] = [{"model": r["model"], "dataset": r["dataset"], "batches": r["batches"],
                                    "measured_step_s": r["step_s"]} for r in comp["measured_rows"]]
    if report.get("ps"):
        out["ps"] = {k: report["ps"].get(k) for k in ("latency_us", "bandwidth_GB_per_s", "worker_bandwidth_GB_per_s",
                                                      "transport", "update_bandwidth_GB_per_s", "quality")}
        if report["ps"].get("transport") == "rpc":
            # Whether the server side was fitted or is the worker's link (one worker at once,
            # simdl.calibrate.ps.PSFit), as data a reader or a check can test, not only as prose.
            out["ps"]["rpc_workers"] = report["ps"]["rpc_workers"]
            out["ps"]["server_side_measured"] = report["ps"]["server_side_measured"]
    if report.get("strategies", {}).get("fit"):
        o = report["strategies"]["fit"]
        out["strategy_fit"] = {"params": o["params"], "points": o["points"], "held_out": o["held_out"],
                               "held_out_max_abs_rel_error": o["held_out_max_abs_rel_error"]}
    if report.get("strategies", {}).get("copies"):
        out["copy_fit"] = report["strategies"]["copies"]
    out["strategy_steps_measured"] = report.get("strategies", {}).get("measured", {})
    return _plain(out)


def _regime_summary(r: dict) -> dict:
    ho = r.get("held_out") or {}
    return {
        "params": r["params"], "n_regimes": r["n_regimes"], "cv_error_by_n_regimes": r["cv_error"],
        "fit": {k: r["quality"][k] for k in ("n", "r2_log", "median_abs_rel_error", "max_abs_rel_error")},
        "fit_by_regime": [{"step_bytes": q["step_bytes"], "n": q["n"], "median_abs_rel_error": q["median_abs_rel_error"],
                           "max_abs_rel_error": q["max_abs_rel_error"]} for q in r["regime_quality"]],
        "held_out": {k: ho[k] for k in ("sizes_bytes", "within_10pct", "n", "median_abs_rel_error", "max_abs_rel_error")}
        | {"errors": {e["bytes"]: e["rel_error"] for e in ho.get("errors", [])}} if ho else {},
        "overhead_source": r["overhead_source"], "passes": r["passes"],
    }


def _plain(x):
    """Plain YAML types (numpy scalars and tuples out), floats to 5 significant digits."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float):
        return float(f"{x:.5g}") if x == x else None
    return x


class _Dumper(yaml.SafeDumper):
    """safe_dump, but a short list of numbers on one line (``step_bytes: [2048, 11863296]``)."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    flow = len(data) <= 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def write_profile(profile: dict, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Cluster profile written by `simdl calibrate` on {datetime.date.today().isoformat()}.\n"
              "# Fitted values have kind 'calibrated'; `calibration` holds provenance and fit quality.\n"
              f"# Use it with: simdl predict --cluster {path}\n")
    cp = profile.get("compute_profile")
    if isinstance(cp, dict) and "data" in cp:
        # The measured rows go to a JSON file beside the YAML (thousands of numbers), which
        # the YAML names (simdl.analytic.measured).
        from ..analytic.measured import write_compute_profile

        side = path.with_name(f"{path.stem}.compute.json")
        write_compute_profile(cp["data"], side)
        profile = {**profile, "compute_profile": {"file": side.name, "kind": cp["kind"], "source": cp["source"]}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(header + yaml.dump(profile, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True))
    os.replace(tmp, path)
    return path
