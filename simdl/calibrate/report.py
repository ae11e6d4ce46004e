"""Human summary of a calibration fit: values, R2, residuals and held-out errors per group."""

from __future__ import annotations

import numpy as np

from .jitter import noise_warning


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _apct(x) -> str:
    return "n/a" if x is None else f"{abs(x):.1%}"


def _bytes(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{n:.0f} B"


def format_regimes(per_collective: dict) -> list[str]:
    """The size-regime fits of one scope: per collective the regimes, the fit quality, and the
    held-out check beside the one-line (single alpha-beta) fit's."""
    lines: list[str] = []
    regs = {k: v["regimes"] for k, v in per_collective.items() if v.get("regimes")}
    if regs:
        lines.append(
            "  size regimes (piecewise ring alpha-beta; held-out = refit without every third size "
            "and the largest, then predict them)"
        )
        lines.append(
            f"    {'collective':<15} {'regimes':>7} {'overhead':>9}  {'fit med|err|':>12} {'max':>6}  "
            f"{'held-out <=10%':>14} {'median':>7} {'max':>7}   (one line: {'held-out <=10%':>14} {'max':>7})"
        )
        for coll, r in regs.items():
            ho = r.get("held_out") or {}
            ab = per_collective[coll].get("held_out") or {}
            q = r["quality"]
            lines.append(
                f"    {coll:<15} {r['n_regimes']:>7} {r['params']['overhead_us']:>6.1f} us  "
                f"{_apct(q['median_abs_rel_error']):>12} {_apct(q['max_abs_rel_error']):>6}  "
                f"{(str(ho.get('within_10pct')) + '/' + str(ho.get('n'))) if ho else 'n/a':>14} "
                f"{_apct(ho.get('median_abs_rel_error')):>7} {_apct(ho.get('max_abs_rel_error')):>7}   "
                f"(one line: {(str(ab.get('within_10pct')) + '/' + str(ab.get('n'))) if ab else 'n/a':>14} "
                f"{_apct(ab.get('max_abs_rel_error')):>7})"
            )
            for g, rq in zip(r["params"]["regimes"], r["regime_quality"]):
                lo, hi = g["step_bytes"]
                lines.append(
                    f"      step {_bytes(lo):>9} .. {_bytes(hi):<9} alpha {g['alpha_us']:8.1f} us  "
                    f"bus {g['bus_GB_per_s']:8.3f} GB/s  fit med|err| {_apct(rq['median_abs_rel_error'])} "
                    f"max {_apct(rq['max_abs_rel_error'])} (n={rq['n']})"
                )
        from .fit import PROFILE_COLLECTIVES

        for label, names in (("profile's collectives", PROFILE_COLLECTIVES), ("all", tuple(regs))):
            tot = [regs[c]["held_out"] for c in names if c in regs and regs[c].get("held_out")]
            one = [per_collective[c]["held_out"] for c in names if c in regs and per_collective[c].get("held_out")]
            if tot:
                lines.append(
                    f"    {label}: held-out {sum(h['within_10pct'] for h in tot)}/{sum(h['n'] for h in tot)} "
                    f"within 10 %, max {_apct(max(h['max_abs_rel_error'] for h in tot))}"
                    + (
                        f" (one line per collective: {sum(h['within_10pct'] for h in one)}/{sum(h['n'] for h in one)})"
                        if one
                        else ""
                    )
                )
                if all("within_10pct_or_ci95" in h for h in tot):
                    lines.append(
                        f"      within 10 % or inside the held-out point's own 95 % measurement interval: "
                        f"{sum(h['within_10pct_or_ci95'] for h in tot)}/{sum(h['n'] for h in tot)}; "
                        f"median interval half-width {_apct(float(np.median([h['median_ci95_halfwidth'] for h in tot])))}"
                    )
            if set(names) == set(regs):
                break
    return lines


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


def _collectives(report: dict) -> list[str]:
    """Per scope the alpha-beta fit of each collective, the joint fit and its size regimes."""
    lines: list[str] = []
    for scope, c in report.get("collectives", {}).items():
        j = c.get("joint")
        lines.append(f"collectives [{scope}]")
        for coll, v in c.get("per_collective", {}).items():
            p, q = v["params"], v["quality"]
            ho = v.get("held_out", {})
            lines.append(
                f"  {coll:<15} bus {p['bus_bandwidth_GB_per_s']:8.3f} GB/s  alpha {p['alpha_us']:8.1f} us  "
                f"overhead {p['overhead_us']:8.1f} us  R2 {q['r2']:.3f} R2(log) {q['r2_log']:.3f}  "
                f"max|res| {_apct(q['max_abs_rel_error'])}  held-out max|err| {_apct(ho.get('max_abs_rel_error'))}"
            )
        if j:
            p, q = j["params"], j["quality"]
            ho = j.get("held_out", {})
            lines.append(
                f"  {'joint (profile)':<15} bus {p['bus_bandwidth_GB_per_s']:8.3f} GB/s  alpha {p['alpha_us']:8.1f} us  "
                f"overhead {p['overhead_us']:8.1f} us  R2 {q['r2']:.3f} R2(log) {q['r2_log']:.3f}  "
                f"median|res| {_apct(q['median_abs_rel_error'])}  held-out max|err| {_apct(ho.get('max_abs_rel_error'))}"
                + (f" ({ho['within_10pct']}/{ho['n']} within 10%)" if ho else "")
            )
            if p.get("bandwidth_factors"):
                lines.append(
                    "    bandwidth relative to all_reduce: "
                    + ", ".join(f"{k} {v:.3f}" for k, v in p["bandwidth_factors"].items())
                )
        lines += format_regimes(c.get("per_collective", {}))
    return lines


def _compute(comp: dict) -> list[str]:
    """The roofline fit: its parameters, per-run step errors, held-out models and microbenchmarks."""
    lines: list[str] = []
    if not comp.get("params"):
        return lines
    p, q = comp["params"], comp["quality"]
    lines.append(f"compute (roofline, fit on {', '.join(comp['fit_models'])})")
    lines.append(
        f"  matmul {p['matmul']:.4f}  memory_bandwidth {p['memory_bandwidth']:.4f}  "
        f"kernel_launch {p['kernel_launch_us']:.2f} us  matmul_call_overhead {p['matmul_call_overhead_us']:.1f} us"
        f"   step R2 {q['steps']['r2']}  "
        f"max|step err| {_apct(q['steps']['max_abs_rel_error'])}  row R2 {q['rows']['r2']}"
    )
    per_class = {k[len("memory_bandwidth_") :]: v for k, v in p.items() if k.startswith("memory_bandwidth_")}
    calls = {
        k[len("call_overhead_") : -len("_us")]: v
        for k, v in p.items()
        if k.startswith("call_overhead_") and k.endswith("_us")
    }
    if calls or "conv_weight_grad_bandwidth" in p:
        lines.append(
            "  "
            + "  ".join(
                [f"call_overhead {c} {v:.1f} us" for c, v in calls.items()]
                + (
                    [f"conv_weight_grad_bandwidth {p['conv_weight_grad_bandwidth']:.3f}"]
                    if "conv_weight_grad_bandwidth" in p
                    else []
                )
            )
        )
    if comp.get("conv_call_microbenchmark_us") is not None:
        lines.append(
            f"  tiny-conv microbenchmark: {comp['conv_call_microbenchmark_us']:.1f} us per call "
            + (
                "(held fixed in the fit)"
                if comp.get("matmul_call_measured")
                else f"(fitted matmul_call_overhead {p['matmul_call_overhead_us']:.1f} us)"
            )
        )
    if "compute_memory_overlap" in p:
        lines.append(
            f"  compute_memory_overlap {p['compute_memory_overlap']:.3f}"
            + (
                "  memory_bandwidth by class: " + ", ".join(f"{c} {v:.3f}" for c, v in per_class.items())
                if per_class
                else ""
            )
        )
    lines += _run_lines(q["runs"])
    lines += _compute_held_out(comp.get("held_out"))
    for cls, m in comp.get("micro", {}).items():
        rate = (
            f"{m['achieved_GFLOP_per_s']} GFLOP/s (eff {m['matmul_efficiency']})"
            if m["achieved_GFLOP_per_s"]
            else f"{m['achieved_GB_per_s']} GB/s (eff {m['memory_bandwidth_efficiency']})"
            if m["achieved_GB_per_s"]
            else ""
        )
        lines.append(
            f"  micro {cls:<12} {rate}  overhead {m['overhead_us']} us  max|res| {_apct(m['max_abs_rel_residual'])}"
        )
    return lines


def _compute_held_out(ho: dict | None) -> list[str]:
    """The roofline fit's errors on the models it was not fitted on."""
    lines: list[str] = []
    if not ho:
        return lines
    lines.append(
        f"  held-out model(s) {', '.join(ho['models'])}: max|step err| {_apct(ho['steps']['max_abs_rel_error'])}"
    )
    lines += _run_lines(ho["runs"])
    cfg = ho.get("configs") or []
    if cfg:
        within = sum(abs(c["step_rel_error"]) <= 0.10 for c in cfg)
        lines.append(
            f"    per configuration (mean of its ranks' steps), {within}/{len(cfg)} within 10%: "
            + ", ".join(f"{c['config']} {_pct(c['step_rel_error'])}" for c in cfg)
        )
    lines.append("    by op class: " + ", ".join(f"{c} {_pct(v['rel_error'])}" for c, v in ho["by_class"].items()))
    return lines


def _run_lines(runs: list[dict]) -> list[str]:
    """One line per run: its measured and predicted step and the relative error."""
    return [
        f"    {r['run']:<28} measured {r['measured_step_ms']:9.2f} ms  predicted "
        f"{r['predicted_step_ms']:9.2f} ms  {_pct(r['step_rel_error'])}"
        for r in runs
    ]


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
            f"{ps['worker_bandwidth_GB_per_s']:.3f} GB/s (R2 {qa['r2']}, max|err| {_apct(qa['max_abs_rel_error'])})  "
            + (
                f"server side, {ps['rpc_workers'][0]} at once {ps['bandwidth_GB_per_s']:.3f} GB/s "
                f"(R2 {qt['r2']}, max|err| {_apct(qt['max_abs_rel_error'])})"
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


def _streams(comp: dict) -> list[str]:
    """Stream bandwidths (optimizer step, buffer copies), page faults and measured compute rows."""
    lines: list[str] = []
    for key, what in (("stream", "optimizer step (in place)"), ("copy", "buffer copies")):
        sf = comp.get(key)
        if sf:
            ho = sf.get("held_out")
            lines.append(
                f"stream {what}: {sf['bandwidth_GB_per_s']:.2f} GB/s per rank, {sf['call_us']:.2f} us per call, "
                f"R2 {sf['quality']['r2']}"
                + (
                    ", held-out sizes: "
                    + ", ".join(f"{n.split('/', 1)[1]} {_pct(e)}" for n, e in zip(ho["points"], ho["rel_errors"]))
                    if ho
                    else ""
                )
            )
    if comp.get("page_fault"):
        pf = comp["page_fault"]
        lines.append(
            f"page faults of fresh buffers: {pf['s_per_byte'] * 1e9:.3f} ns/byte (per size, ns/byte: "
            + ", ".join(f"{int(b) / 2**20:.0f} MiB {v}" for b, v in pf["per_size"].items())
            + ")"
        )
    for r in comp.get("measured_rows") or []:
        lines.append(
            f"compute profile {r['model']} ({r['dataset']}): batches {r['batches']}, measured steps "
            + ", ".join(f"{s * 1e3:.1f} ms" for s in r["step_s"])
        )
    return lines


def _strategy_steps(st: dict) -> list[str]:
    """The measured strategy steps and the buffer-copy factor inside them."""
    lines: list[str] = []
    if st.get("measured"):

        def step(m):
            return "skipped" if m.get("skipped") else f"{m['step_s'] * 1e3:.2f}"

        lines.append("strategy steps (median, ms): " + ", ".join(f"{k}: {step(m)}" for k, m in st["measured"].items()))
    if st.get("copies"):
        c = st["copies"]
        ho = [abs(e) for h in c["held_out"].values() for e in h["rel_errors"].values()]
        lines.append(
            f"buffer copies inside the steps (profiled step, less the local step's): {c['factor']:.2f}x their "
            f"idle-machine time"
            + (f"; leave-one-model-out max {max(ho):.1%}, mean {sum(ho) / len(ho):.1%} ({len(ho)} steps)" if ho else "")
            + (
                "; written as copy_in_step_factor"
                if c.get("written")
                else "; a check, not written to the profile (simdl.calibrate.profile.COPY_FACTOR_FROM_PROFILED_STEPS)"
            )
        )
        for pt in c["points"]:
            lines.append(
                f"    {pt['key']:<34} measured {pt['measured_s'] * 1e3:8.1f} ms  idle-machine "
                f"{pt['predicted_s'] * 1e3:8.1f} ms  fitted {_pct(pt['rel_error'])}"
            )
    return lines


def _strategy_fit(o: dict | None) -> list[str]:
    """The strategy fit's parameters, bounds hit, and errors at defaults, fitted and held out."""
    lines: list[str] = []
    if not o:
        return lines
    p = o["params"]
    held = " (held: the blocking calls are priced as logged)" if "collective_load_factor" in o.get("held", ()) else ""
    lines.append(
        f"strategy fit: comm_compute_interference {p['comm_compute_interference']:.3f}, collective_load_factor "
        f"{p['collective_load_factor']:.3f}{held}, collective_load_factor_all_reduce "
        f"{p['collective_load_factor_all_reduce']:.3f}, collective_load_half_size "
        f"{p['collective_load_half_size_MiB']:.1f} MiB, collective_load_overhead "
        f"{p['collective_load_overhead_us']:.0f} us, fsdp_unit_overhead "
        + ("held at 0" if "fsdp_unit_overhead_us" in o.get("held", ()) else f"{p['fsdp_unit_overhead_us']:.0f} us")
    )
    if o.get("at_bounds"):
        lines.append(
            "  at a bound of the search (not pinned by the steps): "
            + ", ".join(f"{k} ({v})" for k, v in o["at_bounds"].items())
        )
    ho = [abs(e) for h in o["held_out"].values() for e in h["rel_errors"].values()]
    if ho:
        lines.append(
            f"  leave-one-model-out step error: max {max(ho):.1%}, mean {sum(ho) / len(ho):.1%} ({len(ho)} steps)"
        )
    for pt in o["points"]:
        lines.append(
            f"    {pt['key']:<34} measured {pt['measured_s'] * 1e3:8.1f} ms  error at defaults "
            f"{_pct(pt['rel_error_defaults'])} -> fitted {_pct(pt['rel_error_fitted'])}"
        )
    for m, h in o["held_out"].items():
        lines.append(
            f"  held out {m} (fit on {', '.join(h['fitted_on'])}): "
            + ", ".join(f"{v} {_pct(e)}" for v, e in h["rel_errors"].items())
        )
    return lines


def _faults_and_blocking(st: dict) -> list[str]:
    """Page faults and warm-up of the measured steps, and the blocking-collective factors."""
    lines: list[str] = []
    if st.get("faults_warmup"):
        lines.append(
            "page faults and warm-up of the measured steps (faulted = memory touched for the first time since "
            "the allocator got it from the OS, per timed step; warm-up = the untimed first steps / the median "
            "step)"
        )
        for key, v in st["faults_warmup"].items():
            lines.append(
                f"    {key:<34} faulted {v['faulted_bytes_per_step'] / 2**20:8.1f} MiB/step  warm-up "
                + " ".join(f"{x:.2f}x" for x in v["warmup_over_step"])
            )
    if st.get("blocking"):
        b = st["blocking"]
        lines.append(
            "blocking collectives (FSDP calls, measured): "
            + ", ".join(f"{c} {g:.3f}x idle" for c, g in b["factors"].items())
            + f", wait {b['wait']:.3f} s per s of compute ({b['calls']} calls)"
        )
        for m, h in b["held_out"].items():
            lines.append(
                f"  held out {m}: in-call time per step "
                + ", ".join(
                    f"{k.split('/')[0]} {v['measured_s'] * 1e3:.0f} ms {_pct(v['rel_error'])}" for k, v in h.items()
                )
            )
    return lines


def _in_step(st: dict) -> list[str]:
    """The collectives inside the FSDP steps beside what the profile charges for them."""
    lines: list[str] = []
    if st.get("in_step"):
        lines.append(
            "collectives inside the FSDP steps (per step, ms; in the call = exposed communication on a "
            "host that blocks; transfer = from the last rank's entry; idle = the collective curves; "
            "charged = what the profile predicts for the same calls, without the wait for peers, which the engines "
            "add per second of compute)"
        )
        lines.append(
            f"    {'step':<34} {'calls':>5} {'in call':>8} {'waiting':>8} {'transfer':>8} {'idle':>8} "
            f"{'charged':>8}  transfer/idle  charged/in call"
        )
        for key, v in st["in_step"].items():
            if "error" in v:
                lines.append(f"    {key:<34} {v['error']}")
                continue
            t = v["total"]
            lines.append(
                f"    {key:<34} {t['calls']:5.0f} {t['in_call_s'] * 1e3:8.1f} {t['waiting_s'] * 1e3:8.1f} "
                f"{t['transfer_s'] * 1e3:8.1f} {t['idle_s'] * 1e3:8.1f} {t['model_s'] * 1e3:8.1f}  "
                f"{_ratio(t['transfer_over_idle']):>13}  {_ratio(t['model_over_in_call']):>15}"
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
    lines += _collectives(report)
    lines += _compute(comp)
    lines += _parameter_server(report.get("ps"))
    lines += _streams(comp)
    lines += _strategy_steps(st)
    lines += _strategy_fit(st.get("fit"))
    lines += _faults_and_blocking(st)
    lines += _in_step(st)
    lines += _closing(report, profile)
    return "\n".join(lines)


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}x"
