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
import tempfile
from pathlib import Path
from typing import Any

from ..cluster.spec import CLUSTER_DIR, cluster_names, is_cpu_device_name, load_cluster, load_gpu, raw_preset
from . import fit as F
from .compute import STEP_ANCHOR
from .jitter import StepJitterFit, local_step_series
from .profile_collectives import collective_sections
from .profile_parts import (  # noqa: F401  (re-exported: tests and callers import them from here)
    _ALLOCATOR_THRESHOLDS,
    _RPC_TRANSPORTS,
    GPU_NAME_MAP,
    _allocator_thresholds,
    _blocking_fit,
    _busy,
    _busy_note,
    _copy_fit,
    _dates,
    _faults_warmup,
    _idle_costs,
    _in_step,
    _logged_calls,
    _others_by_stage,
    _regimes_section,
    _spmd_variant,
    _step_kwargs,
    _strategy_fit,
    _subgroup_sections,
    _val,
    gpu_file_for,
    provenance,
)
from .profile_write import (  # noqa: F401
    _Dumper,
    _kept_from_base,
    _plain,
    _regime_summary,
    _represent_list,
    _summary,
    write_profile,
)
from .records import STAGES


def base_preset_for(gpu: str) -> dict[str, Any]:
    """Raw YAML of a shipped preset on the same device (for the sections not calibrated)."""
    if is_cpu_device_name(gpu):
        return raw_preset(CLUSTER_DIR / "cpu-local.yaml")
    for name in cluster_names():
        raw = raw_preset(name)
        if raw.get("gpu") == gpu:
            return raw
    return raw_preset(CLUSTER_DIR / "a100-80gb-pcie.yaml")


# Price blocking collectives by their logged calls (simdl.calibrate.in_step.BlockingFit) where
# a run logged them: on a calibration's own leave-one-model-out step errors it cut the worst
# model's error from 55.3 % to 23.7 % at 2 ranks and from 50.3 % to 33.3 % at 4, against the
# load factors alone (lab/CALIBRATION.md, "Blocking collectives"). False gives the latter.
BLOCKING_FROM_CALLS = True
# Fit FSDP2's host time per unit (strategies.fsdp.unit_overhead_us, u) with the other step
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
    intra, eff, joint = collective_sections(coll, base, shared=shared, tag=tag, prov=prov, ran=ran,
                                            per_node=per_node, nodes=nodes)

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

