"""Human-readable output: compact tables with units."""

from __future__ import annotations

from ..result import MEMORY_CATEGORIES, Result
from ..strategies import registry
from ..units import GB, GiB, format_bytes, format_seconds


def _fit_limit() -> float:
    from ..memory.cuda import FIT_MARGIN

    return 1.0 - FIT_MARGIN


def format_result(r: Result) -> str:
    lines = [_headline(r)]
    lines += _time_lines(r) + _memory_lines(r) + _staleness_lines(r)
    lines += [f"  note: {note}" for note in r.notes]
    lines += _assumed_lines(r.config)
    return "\n".join(lines)


def _row(label: str, value: str, extra: str = "") -> str:
    """One table row: the label, the value right-aligned, then what qualifies it."""
    return f"  {label:<18}{value:>12}   {extra}".rstrip()


def _headline(r: Result) -> str:
    c = r.config
    mesh = f" ({c['replicas']} replicas x {c['shard_group']} shards)" if c.get("shard_group") else ""
    return (
        f"{c.get('model')} on {c.get('input') or str(c.get('dataset')) + ' (' + str(c.get('input_shape')) + ')'}, "
        f"{c.get('label')}{mesh}, "
        f"{c.get('gpus')} x {c.get('gpu')} ({c.get('cluster')}, {c.get('nodes')} node{'s' if c.get('nodes', 1) > 1 else ''}), "
        f"batch {c.get('batch_size')}/GPU, {c.get('precision')}, {c.get('optimizer')}  [{r.engine}]"
    )


def _time_lines(r: Result) -> list[str]:
    """The step, epoch and run times, the throughput, the utilization and the bytes sent."""
    c = r.config
    lines = [
        _row(
            "iteration",
            format_seconds(r.iteration_time_s),
            f"compute {format_seconds(r.compute_time_s)}, communication {format_seconds(r.comm_time_s)}, "
            f"exposed {format_seconds(r.exposed_comm_time_s)}",
        )
    ]
    if r.iteration_time_band_s:
        lo, hi = r.iteration_time_band_s
        lines.append(f"    band: {format_seconds(lo)} to {format_seconds(hi)} ({c.get('iteration_time_band', '')})")
    elif c.get("iteration_time_band"):
        lines.append(f"    band: {c['iteration_time_band']}")
    if r.step_split_s:
        # where the step goes (simdl.analytic.engine.step_split), largest first; zeros left out
        split = sorted(((v, k) for k, v in r.step_split_s.items() if v > 0), reverse=True)
        lines.append("    step: " + " | ".join(f"{k.replace('_', ' ')} {format_seconds(v)}" for v, k in split))
    return lines + [
        _row("epoch", format_seconds(r.epoch_time_s), f"{r.iterations_per_epoch:,} iterations"),
        _row(f"total ({c.get('epochs')} ep)", format_seconds(r.total_time_s)),
        _row("throughput", f"{r.throughput_samples_per_s:,.0f}", "samples/s"),
        _row(
            "GPU utilization",
            f"{100 * r.gpu_utilization:.0f} %",
            f"compute stream; {100 * r.gpu_utilization_any_kernel:.0f} % any kernel",
        ),
        _row("comm per GPU", f"{r.comm_bytes_per_iteration / GB:.3f} GB", "sent per iteration"),
    ]


def _memory_lines(r: Result) -> list[str]:
    """The peak, its categories, the allocator's view, a strategy's buffers and host memory."""
    c = r.config
    fits = "fits" if r.fits_in_memory else "DOES NOT FIT"
    lines = [
        _row(
            "peak memory",
            format_bytes(r.peak_memory_bytes),
            f"of {r.memory_capacity_bytes / GiB:.0f} GiB ({fits}); tensors {format_bytes(r.peak_tensor_bytes)}",
        )
    ]
    parts = [f"{k.replace('_', ' ')} {format_bytes(r.memory_breakdown_bytes[k])}" for k in MEMORY_CATEGORIES]
    lines.append("    " + " | ".join(parts))
    if r.max_memory_reserved_bytes is not None:
        dm = r.device_memory_bytes
        lines.append(
            f"    allocator: max allocated {format_bytes(r.max_memory_allocated_bytes or 0.0)}, max reserved "
            f"{format_bytes(r.max_memory_reserved_bytes)} | CUDA context "
            f"{format_bytes(dm.get('cuda_context', 0.0))} | NCCL buffers {format_bytes(dm.get('nccl_buffers', 0.0))}"
            f" | fits when the total leaves {100 * (1 - _fit_limit()):.0f} % of memory free"
        )
    # A strategy's own named buffers (its registry echo: buffers_bytes, host_buffers_bytes)
    named = [f"{k} {format_bytes(v)}" for k, v in (c.get("buffers_bytes") or {}).items() if v > 0]
    if named:
        lines.append("    buffers: " + " | ".join(named))
    if c.get("host_memory_bytes"):
        lines.append(
            _row(
                "host memory",
                format_bytes(c["host_memory_bytes"]),
                f"per rank; PCIe {format_bytes(c.get('pcie_bytes_per_iteration', 0.0))} per iteration",
            )
        )
    return lines


def _staleness_lines(r: Result) -> list[str]:
    """A client-server strategy's staleness, and the pulls an SSP bound held back."""
    s = r.staleness
    lines = []
    if registry.is_client_server(r.config.get("strategy", "")):
        if s.p50 is None or s.p99 is None or s.max is None:
            lines.append(
                _row(
                    "staleness",
                    f"{s.mean:.2f}",
                    "mean updates (this engine models the mean only; --engine sim gives percentiles)",
                )
            )
        else:
            lines.append(
                _row("staleness", f"{s.mean:.2f}", f"mean updates; p50 {s.p50:.1f}, p99 {s.p99:.1f}, max {s.max:.0f}")
            )
    if s.held_pulls is not None:
        lines.append(
            _row(
                "SSP bound",
                f"{100 * s.held_pulls:.0f} %",
                f"of pulls held back; {1e3 * (s.held_wait_s or 0.0):.1f} ms mean wait per pull",
            )
        )
    return lines


def _assumed_lines(c: dict) -> list[str]:
    """The settings not given on the command line, each with why it was assumed."""
    assumed = c.get("assumed") or {}
    if not assumed:
        return []
    lines = ["  assumed (not given on the command line):"]
    width = max(len(f"{k}={c.get(k, '')}") for k in assumed)
    for k, why in assumed.items():
        lines.append(f"    {f'{k}={c.get(k, chr(45))}':<{width}}  {why}")
    return lines


def format_cluster_list(specs) -> str:
    rows = [("preset", "GPU", "GPUs/node", "nodes", "intra-node", "network", "PS")]
    for s in specs:
        intra = f"{s.intra_node.link} {s.intra_node.bandwidth.value / GB:.0f} GB/s"
        if s.inter_node is not None:
            n = int(s.inter_node.nics_per_node.value)
            net = f"{n} x {s.inter_node.nic_bandwidth.value * 8 / GB:.0f} Gb/s"
        else:
            net = "-"
        nodes = f"{s.nodes}" + ("" if s.max_nodes == s.nodes else f" (max {s.max_nodes or 'any'})")
        ps = f"{s.ps_servers.count}" if s.ps_servers is not None else "-"
        rows.append((s.name, s.gpu.name, str(s.gpus_per_node), nodes, intra, net, ps))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def format_cluster(spec) -> str:
    """The preset as its YAML form: every value with its kind and source."""
    import yaml

    head = f"# {spec.name}: {spec.description}\n# file: {spec.source_path}\n"
    return head + yaml.safe_dump(spec.to_dict(), sort_keys=False, width=120)
