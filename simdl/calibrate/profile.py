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
from .profile_collectives import _regimes_section, _subgroup_sections, collective_sections  # noqa: F401  (re-exported)
from .profile_compute import (
    bandwidth_efficiencies,
    fit_compute_stage,
    measured_compute_profile,
    page_fault_host,
    roofline_efficiencies,
)
from .profile_context import CalibrationRun
from .profile_in_step import _blocking_fit, _faults_warmup, _idle_costs, _in_step, _logged_calls  # noqa: F401
from .profile_parts import _RPC_TRANSPORTS, _val  # noqa: F401  (re-exported: tests and callers import them from here)
from .profile_provenance import (  # noqa: F401  (re-exported)
    _ALLOCATOR_THRESHOLDS,
    GPU_NAME_MAP,
    _allocator_thresholds,
    _busy,
    _busy_note,
    _dates,
    _others_by_stage,
    gpu_file_for,
    provenance,
)
from .profile_ps import pingpong_latency, ps_servers_section
from .profile_steps import strategy_sections
from .profile_strategy_fit import _copy_fit, _spmd_variant, _step_kwargs, _strategy_fit  # noqa: F401  (re-exported)
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


def _read_run(run_dir: Path, settings: dict, gpu: str | None) -> CalibrationRun:
    stages = F.load_all(run_dir)
    prov = provenance(stages, settings, run_dir)
    gpu = gpu or gpu_file_for(prov["devices"][0], prov.get("cpu_caches"))
    gpu_spec = load_gpu(gpu)
    per_node = int(prov["ranks_per_node"] or 1)
    shared = gpu_spec.is_cpu
    return CalibrationRun(
        run_dir=run_dir,
        stages=stages,
        prov=prov,
        ran=set(settings.get("stages") or STAGES),
        gpu=gpu,
        gpu_spec=gpu_spec,
        base=base_preset_for(gpu),
        per_node=per_node,
        nodes=int(prov["nodes"] or 1),
        shared=shared,
        share=1.0 / per_node if shared else 1.0,
        tag=f"simdl calibrate run {run_dir.name} ({_dates(prov)}, {', '.join(prov['host'])})",
    )


def _provisional_profile(
    run: CalibrationRun,
    name: str,
    intra: dict,
    eff: dict,
    ps_section: dict | None,
    host_extra: dict,
    compute_profile: dict | None,
) -> dict[str, Any]:
    """The profile the strategies stage is fitted against: this run's sections, the rest the base's."""
    prov, base, nodes, per_node = run.prov, run.base, run.nodes, run.per_node
    profile: dict[str, Any] = {
        "name": name,
        "description": f"Calibrated by simdl calibrate on {', '.join(prov['host'])}: {nodes} node(s) x {per_node} "
        f"rank(s), {prov['devices'][0]}, {prov['backend']}",
        "gpu": run.gpu,
        "gpus_per_node": per_node,
        "nodes": nodes,
        "max_nodes": base.get("max_nodes", 1) if nodes == 1 else None,
    }
    if run.shared:
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
        host["cpu_cores"] = _val(prov["cpu_count"], f"{run.tag}: os.cpu_count()", "measured")
    host.update(host_extra)
    profile["host"] = host
    if compute_profile:
        profile["compute_profile"] = compute_profile
    elif "compute" not in run.ran and base.get("compute_profile"):
        # Kept from the base preset with the rest of the compute stage's values; its file is
        # named relative to the preset's folder, so the new profile names it absolutely.
        cp = base["compute_profile"]
        f = cp["file"] if isinstance(cp, dict) else cp
        profile["compute_profile"] = dict(
            cp if isinstance(cp, dict) else {"file": f},
            file=str((CLUSTER_DIR / f).resolve()) if not Path(f).is_absolute() else f,
        )
    if profile["max_nodes"] is not None and profile["max_nodes"] > 1 and "inter_node" not in profile:
        profile["max_nodes"] = 1
    if nodes == 1 and "inter_node" not in profile:
        profile["max_nodes"] = 1
        for k in ("collective_bandwidth_inter", "collective_latency_inter_us"):
            eff.pop(k, None)
    return profile


def _finish(run: CalibrationRun, profile: dict, report: dict) -> None:
    """Description, notes and the calibration record, with what was kept from the base profile."""
    prov, base, ran = run.prov, run.base, run.ran
    kept = [st for st in STAGES if st not in ran]
    kept_from = _kept_from_base(base, kept)
    kept_note = ""
    if kept_from:
        bp = kept_from["provenance"]
        kept_note = (
            f" Only the {', '.join(st for st in STAGES if st in ran)} stage(s) ran here; the values the "
            f"{', '.join(kept)} stage(s) measure are kept from the base profile "
            f"'{kept_from['profile']}'"
            + (f" (calibrated {bp.get('date')} on {', '.join(bp.get('devices', []))})" if bp else "")
            + ", with their fit records (calibration.kept_from_base)."
        )
        profile["description"] += (
            f"; {', '.join(st for st in STAGES if st in ran)} stage(s) only, the "
            f"{', '.join(kept)} values kept from '{kept_from['profile']}'"
            + (f" ({', '.join(bp.get('devices', []))})" if bp else "")
        )
    threads = (
        f" Each rank ran {prov['threads_per_rank']} thread(s)"
        + (f" ({prov['threads_note']})" if prov["threads_note"] else "")
        + "."
    )
    profile["notes"] = (
        f"Written by `simdl calibrate` from {run.run_dir}. Values of kind 'calibrated' were fitted to "
        f"measurements of this machine; others come from the base preset '{base.get('name', '?')}'."
        + kept_note
        + threads
        + _busy_note(prov)
    )
    profile["calibration"] = _summary(report)
    base_cal = base.get("calibration") or {}
    if kept_from:
        # Values of stages not run here came from the base profile: so do their fit records.
        for key, stage in (
            ("collectives", "collectives"),
            ("compute", "compute"),
            ("ps", "ps"),
            ("strategy_fit", "strategies"),
            ("strategy_steps_measured", "strategies"),
        ):
            if stage in kept and key in base_cal:
                profile["calibration"][key] = copy.deepcopy(base_cal[key])
        profile["calibration"]["kept_from_base"] = kept_from


def build_profile(run_dir: Path, settings: dict, *, name: str, gpu: str | None = None) -> tuple[dict, dict]:
    """(profile YAML dict, full fit report) for a run directory."""
    run = _read_run(Path(run_dir), settings, gpu)
    report: dict[str, Any] = {"provenance": run.prov}
    coll = F.fit_collectives(run.stages["collectives"]) if run.measured("collectives") else {}
    report["collectives"] = coll
    intra, eff, joint = collective_sections(
        coll,
        run.base,
        shared=run.shared,
        tag=run.tag,
        prov=run.prov,
        ran=run.ran,
        per_node=run.per_node,
        nodes=run.nodes,
    )
    ps = F.fit_ps(run.stages["ps"]) if run.measured("ps") else None
    if run.shared and ps:
        intra["latency_us"] = pingpong_latency(run, ps)
    comp, est = fit_compute_stage(run, settings)
    report["compute"] = comp
    if est is not None:
        roofline_efficiencies(run, comp, est, eff)
    bandwidth_efficiencies(run, comp, eff)
    host_extra = page_fault_host(run, comp)
    rows = comp.get("measured_rows") if comp else None
    compute_profile = measured_compute_profile(run, rows)
    report["ps"] = ps
    profile = _provisional_profile(run, name, intra, eff, ps_servers_section(run, ps), host_extra, compute_profile)
    strategy_sections(
        run,
        profile,
        report,
        compute_fitted=est is not None or bool(rows),
        joint=joint,
        blocking_from_calls=BLOCKING_FROM_CALLS,
        fit_unit_overhead=FIT_FSDP_UNIT_OVERHEAD,
        write_copy_factor=COPY_FACTOR_FROM_PROFILED_STEPS,
    )
    _finish(run, profile, report)
    # The profile must load: validate now, with a one-line error naming the bad key.
    with tempfile.TemporaryDirectory() as td:
        load_cluster(str(write_profile(profile, Path(td) / "check.yaml")))
    return profile, report
