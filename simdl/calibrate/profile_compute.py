"""The compute stage's part of a calibrated profile: the roofline efficiencies, the stream and
copy bandwidths, the host's page-fault cost and the measured per-row compute profile."""

from __future__ import annotations

from typing import Any

from . import fit as F
from .compute import STEP_ANCHOR
from .profile_context import CalibrationRun
from .profile_parts import _val
from .profile_provenance import _allocator_thresholds


def fit_compute_stage(run: CalibrationRun, settings: dict) -> tuple[dict, Any]:
    """(the compute fit's record, its roofline estimator or None) where the stage ran."""
    held_out = list(settings.get("compute_held_out", []))
    comp_st = run.stages["compute"]
    spec = run.gpu_spec
    comp = (
        F.fit_compute(
            comp_st,
            spec.peak("fp32") * run.share,
            spec.memory_bandwidth.value * run.share,
            held_out,
            profile_only=settings.get("compute_profile_only", []),
        )
        if run.measured("compute")
        else {}
    )
    return comp, comp.pop("estimator", None)


def roofline_efficiencies(run: CalibrationRun, comp: dict, est: Any, eff: dict) -> None:
    """The roofline fit's efficiencies and per-call costs into eff."""
    tag = run.tag
    q = comp["quality"]["steps"]
    ho = comp.get("held_out")
    batches = "; ".join(f"{m} b{','.join(map(str, b))}" for m, b in comp["batches"].items())
    fitq = f"fit on {', '.join(comp['fit_models'])}: step R2 {q['r2']}, max |step err| {q['max_abs_rel_error']}" + (
        f"; held-out {', '.join(ho['models'])}: max |step err| {ho['steps']['max_abs_rel_error']}" if ho else ""
    )
    share_note = f" per rank ({run.per_node} ranks share the device)" if run.shared else ""
    eff["matmul"] = _val(
        est.matmul_efficiency_,
        f"{tag}: per-row roofline fit of fwd/bwd times ({batches}) "
        f"against the workload tables, of the fp32 peak{share_note}; {fitq}",
    )
    eff["memory_bandwidth"] = _val(
        est.memory_bandwidth_efficiency_,
        f"{tag}: same roofline fit, fraction of the memory bandwidth{share_note}; {fitq}",
    )
    eff["kernel_launch_us"] = (
        _val(
            est.kernel_launch_s_ * 1e6,
            f"{tag}: tiny-op microbenchmark (a 16-element add, eager dispatch + "
            f"launch), median over ranks; held fixed in the roofline fit",
            kind="measured",
        )
        if comp.get("kernel_launch_measured")
        else _val(
            est.kernel_launch_s_ * 1e6,
            f"{tag}: same roofline fit, seconds per kernel (eager dispatch + launch); {fitq}",
        )
    )
    eff["matmul_call_overhead_us"] = (
        _val(
            est.matmul_call_overhead_s_ * 1e6,
            f"{tag}: tiny-convolution microbenchmark (forward and both "
            f"gradients, 3 calls; its fixed part over 3, less one kernel launch), median over ranks; held fixed "
            f"in the roofline fit",
            kind="measured",
        )
        if comp.get("matmul_call_measured")
        else _val(
            est.matmul_call_overhead_s_ * 1e6,
            f"{tag}: same roofline fit, fixed seconds per matmul/convolution call (fwd, and each bwd gradient); {fitq}",
        )
    )
    eff["compute_memory_overlap"] = _val(
        est.compute_memory_overlap_,
        f"{tag}: same roofline fit, fraction of a "
        f"row's shorter part (FLOPs or bytes time) hidden under its longer part "
        f"(1 = max, 0 = sum); {fitq}",
    )
    for c, v in est.class_bandwidth_efficiency_.items():
        eff[f"memory_bandwidth_{c}"] = _val(
            v,
            f"{tag}: same roofline fit, fraction of the memory bandwidth"
            f"{share_note} that {c} rows stream their bytes at; {fitq}",
        )
    for c, v in est.class_call_overhead_s_.items():
        eff[f"call_overhead_{c}_us"] = _val(
            v * 1e6,
            f"{tag}: same roofline fit, fixed seconds per call of a "
            f"{c} row (fwd and bwd), on top of its kernels' launches; {fitq}",
        )
    if est.conv_weight_grad_efficiency_:
        eff["conv_weight_grad_bandwidth"] = _val(
            est.conv_weight_grad_efficiency_,
            f"{tag}: same roofline fit, fraction of the memory bandwidth"
            f"{share_note} at which a convolution's backward accumulates its weight gradient once per sample; {fitq}",
        )


def bandwidth_efficiencies(run: CalibrationRun, comp: dict, eff: dict) -> None:
    """The optimizer-stream and copy microbenchmarks' bandwidths (and the stream's per-call cost) into eff."""
    per_rank_bw = run.gpu_spec.memory_bandwidth.value * run.share
    for key, what, ops in (
        (
            "stream",
            "stream_bandwidth",
            "momentum-SGD optimizer steps over 16-32 Mi parameters in "
            "tensors of 16 Ki to 16 Mi elements (8 passes per parameter byte)",
        ),
        ("copy", "copy_bandwidth", "tensor copies of 32-256 MiB (read + written bytes)"),
    ):
        st_fit = comp.get(key) if comp else None
        if not st_fit:
            continue
        st_fit.pop("estimator", None)
        ho = st_fit["held_out"]
        src = (
            f"{run.tag}: {ops}, every rank at once, t = bytes / B + calls x c fitted on {st_fit['n']} sizes; "
            f"R2 {st_fit['quality']['r2']}" + (f", held-out sizes max |err| {ho['max_abs_rel_error']}" if ho else "")
        )
        # Fractions of the GPU file's memory bandwidth (per rank when ranks share the device);
        # not capped at 1: a datasheet or one-off measurement may understate what a kernel reaches.
        eff[what] = _val(
            st_fit["bandwidth_GB_per_s"] * 1e9 / per_rank_bw, f"{src}: {st_fit['bandwidth_GB_per_s']:.4g} GB/s per rank"
        )
        if key == "stream":
            eff["stream_call_overhead_us"] = _val(st_fit["call_us"], src)


def page_fault_host(run: CalibrationRun, comp: dict) -> dict[str, Any]:
    """Host entries of a shared (CPU) device: page-fault cost, glibc's mmap threshold, allocator thresholds."""
    pf = comp.get("page_fault") if comp else None
    host_extra: dict[str, Any] = {}
    if pf and run.shared:
        host_extra["page_fault_ns_per_byte"] = _val(
            pf["s_per_byte"] * 1e9,
            f"{run.tag}: fill of a fresh buffer minus the same fill of a reused one, per "
            f"byte, median over {len(pf['sizes_bytes'])} sizes "
            f"({', '.join(f'{b / 2**20:.0f} MiB' for b in pf['sizes_bytes'])}) above the mmap threshold",
        )
        host_extra["mmap_threshold_MiB"] = {
            "value": 32,
            "kind": "framework",
            "source": "glibc malloc: DEFAULT_MMAP_THRESHOLD_MAX = 4 MiB x sizeof(long) on 64-bit (malloc/malloc.c, "
            "mallopt(3)); the dynamic threshold rises to it, so larger buffers are mmapped at every allocation",
        }
        host_extra.update(_allocator_thresholds(run.prov.get("allocator_env") or {}, run.run_dir.name))
    return host_extra


def measured_compute_profile(run: CalibrationRun, rows: list | None) -> dict[str, Any] | None:
    """The profile's compute_profile section from the measured per-row times, or None without rows."""
    if not rows:
        return None
    prov = run.prov
    return {
        "file": None,
        "kind": "calibrated",
        "source": f"{run.tag}: per-row forward/backward times of "
        + "; ".join(f"{r['model']} ({r['dataset']}) b{','.join(map(str, r['batches']))}" for r in rows)
        + f", {run.per_node} ranks measuring at once, each model's rows rescaled to its "
        + f"{STEP_ANCHOR} unhooked step (simdl.calibrate.compute.STEP_ANCHOR)",
        "data": {
            "schema": "simdl-compute-profile/1",
            "precision": "fp32",
            "ranks_sharing_device": run.per_node if run.shared else 1,
            "source": f"simdl calibrate run {run.run_dir.name} ({prov['stage_dates'].get('compute', prov['date'])})",
            "models": rows,
        },
    }
