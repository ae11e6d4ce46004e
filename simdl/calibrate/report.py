"""Human summary of a calibration fit: values, R2, residuals and held-out errors per group."""

from __future__ import annotations

from .jitter import noise_warning
from .report_collectives import collectives_lines, format_regimes  # noqa: F401  (re-exported: check imports it)
from .report_compute import compute_lines, stream_lines
from .report_numbers import abs_pct
from .report_strategies import (
    faults_and_blocking_lines,
    in_step_lines,
    strategy_fit_lines,
    strategy_steps_lines,
    zero_fit_lines,
)


def _provenance(report: dict, profile: dict) -> list[str]:
    """The first line: where and on what the calibration ran, and how busy the machine was."""
    lines: list[str] = []
    prov = report["provenance"]
    lines.append(
        f"profile {profile['name']}: {prov['ranks']} rank(s) on {', '.join(prov['host'])} "
        f"({', '.join(prov['devices'])}, {prov['backend']}, torch {prov['versions'].get('torch')})"
        + ("; other processes were busy when it started" if prov.get("machine_busy") else "")
        + (
            f"; load before: {', '.join(str(b['loadavg'][0]) for b in prov.get('loadavg_before', []))}"
            if prov.get("loadavg_before")
            else ""
        )
        + (
            "; other processes' cores by stage: "
            + ", ".join(f"{k} {v:.2f}" for k, v in prov["others_cores_by_stage"].items())
            if prov.get("others_cores_by_stage")
            else ""
        )
    )
    return lines


def _parameter_server(ps: dict | None) -> list[str]:
    """The parameter-server transport fit (rpc or process-group round trips)."""
    lines: list[str] = []
    if not ps:
        return lines
    upd = f"update {ps['update_bandwidth_GB_per_s'] or float('nan'):.3f} GB/s"
    if ps.get("transport") == "rpc":
        qa, qt = ps["quality"]["rpc_alone"], ps["quality"]["rpc_together"]
        lines.append(
            f"parameter server (rpc): latency {ps['latency_us']:.1f} us  one worker "
            f"{ps['worker_bandwidth_GB_per_s']:.3f} GB/s (R2 {qa['r2']}, max|err| {abs_pct(qa['max_abs_rel_error'])})  "
            + (
                f"server side, {ps['rpc_workers'][0]} at once {ps['bandwidth_GB_per_s']:.3f} GB/s "
                f"(R2 {qt['r2']}, max|err| {abs_pct(qt['max_abs_rel_error'])})"
                if ps.get("server_side_measured", True)
                else "server side not measured (one worker), taken as the worker's link"
            )
            + f"  fresh receive buffers "
            f"{ps['receive_fault_ns_per_byte']:.3f} ns/B  answer copy {ps['response_copy_ns_per_byte']:.3f} ns/B  {upd}"
        )
        pp = ps["pingpong"]
        lines.append(
            f"  ping-pong ({pp['bytes_range'][0]}-{pp['bytes_range'][1]} B, process group): latency "
            f"{pp['latency_us']:.1f} us  bandwidth {pp['bandwidth_GB_per_s']:.3f} GB/s  R2 {pp['quality']['r2']}"
        )
    else:
        q = ps["quality"]["roundtrip"]
        lines.append(
            f"parameter server: latency {ps['latency_us']:.1f} us  bandwidth {ps['bandwidth_GB_per_s']:.3f} GB/s  "
            f"R2 {q['r2']}  {upd}"
        )
    return lines


def _closing(report: dict, profile: dict) -> list[str]:
    """The measurement-noise warning, if any, and the profile's efficiency values."""
    lines: list[str] = []
    eff = profile["efficiency"]
    why = noise_warning(((report.get("strategies") or {}).get("compute_jitter") or {}).get("sigma"))
    if why:
        lines.append(f"warning: {why}")
    lines.append(
        "profile efficiency: "
        + ", ".join(f"{k}={v['value']}" for k, v in eff.items() if "value" in v)
        + (
            "; collective_regimes_intra for " + ", ".join(eff["collective_regimes_intra"]["collectives"])
            if "collective_regimes_intra" in eff
            else ""
        )
        + "".join(
            f"; collective_regimes_subgroups[{d}] for " + ", ".join(sec["collectives"])
            for d, sec in eff.get("collective_regimes_subgroups", {}).items()
        )
    )
    return lines


def format_report(report: dict, profile: dict) -> str:
    """The calibration summary printed after a fit, one section per stage."""
    comp = report.get("compute") or {}
    st = report.get("strategies", {})
    lines = _provenance(report, profile)
    lines += collectives_lines(report)
    lines += compute_lines(comp)
    lines += _parameter_server(report.get("ps"))
    lines += stream_lines(comp)
    lines += strategy_steps_lines(st)
    lines += strategy_fit_lines(st.get("fit"))
    lines += zero_fit_lines(st.get("zero"), st.get("zero_kept"))
    lines += faults_and_blocking_lines(st)
    lines += in_step_lines(st)
    lines += _closing(report, profile)
    return "\n".join(lines)
