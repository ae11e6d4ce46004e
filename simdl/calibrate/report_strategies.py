"""The strategies part of the calibration summary: the measured steps, the buffer-copy
factor, the strategy fit with its held-out models, page faults and warm-up, the blocking
collectives and the collectives inside the FSDP steps, DeepSpeed ZeRO's host costs."""

from __future__ import annotations

from .report_numbers import pct, ratio


def strategy_steps_lines(st: dict) -> list[str]:
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
                f"{pt['predicted_s'] * 1e3:8.1f} ms  fitted {pct(pt['rel_error'])}"
            )
    return lines


def strategy_fit_lines(o: dict | None) -> list[str]:
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
            f"{pct(pt['rel_error_defaults'])} -> fitted {pct(pt['rel_error_fitted'])}"
        )
    for m, h in o["held_out"].items():
        lines.append(
            f"  held out {m} (fit on {', '.join(h['fitted_on'])}): "
            + ", ".join(f"{v} {pct(e)}" for v, e in h["rel_errors"].items())
        )
    return lines


def faults_and_blocking_lines(st: dict) -> list[str]:
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
                    f"{k.split('/')[0]} {v['measured_s'] * 1e3:.0f} ms {pct(v['rel_error'])}" for k, v in h.items()
                )
            )
    return lines


def in_step_lines(st: dict) -> list[str]:
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
                f"{ratio(t['transfer_over_idle']):>13}  {ratio(t['model_over_in_call']):>15}"
            )
    return lines


def zero_fit_lines(z: dict | None, kept: dict | None = None) -> list[str]:
    """DeepSpeed ZeRO's fitted host costs and their held-out errors, or why none was fitted and
    which of the base's values (``kept``) the profile keeps."""
    if not z:
        return []
    if "skipped" in z:
        base = ", ".join(f"{k} {v:g}" for k, v in (kept or {}).items()) or "none (absent = 0)"
        return [f"ZeRO host costs: not fitted ({z['skipped']}); the base's kept: {base}"]
    p = z["params"]
    module = (
        "held at 0 (no stage-3 step)"
        if "module_overhead_us" in z.get("held", ())
        else (f"{p['module_overhead_us']:.0f} us per module call")
    )
    lines = [f"ZeRO host costs: {p['param_overhead_us']:.0f} us per parameter, {module}"]
    if "loop" in z:
        lines.append(f"  {z['loop']['note']}")
    for pt in z["points"]:
        lines.append(
            f"    {pt['key']:<34} measured {pt['measured_s'] * 1e3:8.1f} ms  error at 0 "
            f"{pct(pt['rel_error_defaults'])}  fitted {pct(pt['rel_error_fitted'])}"
        )
    for g, h in z.get("held_out", {}).items():
        errs = ", ".join(f"{k} {pct(e)}" for k, e in h["rel_errors"].items())
        loop = h["params"].get("stage1_loop_overhead_us")
        pas = f"; stage-1 pass {loop:.1f} us" if loop is not None and h.get("loop_pairs") else ""
        lines.append(f"  held out {g} (fitted on {', '.join(h['fitted_on'])}{pas}): {errs}")
    return lines
