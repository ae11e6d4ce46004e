"""The compute part of the calibration summary: the roofline fit, its per-run and held-out
step errors, the microbenchmarks, the stream bandwidths, page faults and compute profiles."""

from __future__ import annotations

from .report_numbers import abs_pct, pct


def compute_lines(comp: dict) -> list[str]:
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
        f"max|step err| {abs_pct(q['steps']['max_abs_rel_error'])}  row R2 {q['rows']['r2']}"
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
            f"  micro {cls:<12} {rate}  overhead {m['overhead_us']} us  max|res| {abs_pct(m['max_abs_rel_residual'])}"
        )
    return lines


def _compute_held_out(ho: dict | None) -> list[str]:
    """The roofline fit's errors on the models it was not fitted on."""
    lines: list[str] = []
    if not ho:
        return lines
    lines.append(
        f"  held-out model(s) {', '.join(ho['models'])}: max|step err| {abs_pct(ho['steps']['max_abs_rel_error'])}"
    )
    lines += _run_lines(ho["runs"])
    cfg = ho.get("configs") or []
    if cfg:
        within = sum(abs(c["step_rel_error"]) <= 0.10 for c in cfg)
        lines.append(
            f"    per configuration (mean of its ranks' steps), {within}/{len(cfg)} within 10%: "
            + ", ".join(f"{c['config']} {pct(c['step_rel_error'])}" for c in cfg)
        )
    lines.append("    by op class: " + ", ".join(f"{c} {pct(v['rel_error'])}" for c, v in ho["by_class"].items()))
    return lines


def _run_lines(runs: list[dict]) -> list[str]:
    """One line per run: its measured and predicted step and the relative error."""
    return [
        f"    {r['run']:<28} measured {r['measured_step_ms']:9.2f} ms  predicted "
        f"{r['predicted_step_ms']:9.2f} ms  {pct(r['step_rel_error'])}"
        for r in runs
    ]


def stream_lines(comp: dict) -> list[str]:
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
                    + ", ".join(f"{n.split('/', 1)[1]} {pct(e)}" for n, e in zip(ho["points"], ho["rel_errors"]))
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
