"""Notes a prediction carries where an option does less, or other, than its name suggests.

Each says what the prediction did with the option, so that a number never silently means
something else than the user asked: a precision the GPU has no faster path for, CPU
offload (host memory and the copies the step does not include), SSP with a bound of 0.
"""

from __future__ import annotations

from .units import format_bytes

# simdl.analytic.costs.PEAK_KEY: the peak each precision's matmuls run at.
_PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16-amp": "fp16"}


def precision_note(gpu, precision: str) -> str | None:
    """When ``precision`` has no faster peak than fp32 on ``gpu`` (tf32 and bf16 on a V100)."""
    if precision == "fp32":
        return None
    key = _PEAK_KEY.get(precision)
    own, fp32 = gpu.peak_flops.get(key), gpu.peak_flops.get("fp32")
    if own is None or fp32 is None or own.value > fp32.value:
        return None
    return (
        f"--precision {precision} on {gpu.name}: no faster {key} path than fp32 "
        f"({own.value / 1e12:g} TFLOP/s, {own.kind}: {own.source}); its matmuls are timed at the fp32 rate"
    )


def offload_note(workload, plan, spec, ranks_per_node: int) -> str | None:
    """FSDP CPU offload: the host memory it takes, and the copies the step does not include."""
    d = getattr(plan, "details", {}) or {}
    if not d.get("cpu_offload"):
        return None
    shard = max(int(d.get("shard_size") or 1), 1)
    p = workload.param_bytes / shard
    # FSDP2 CPUOffloadPolicy keeps the sharded fp32 parameters, their gradients and the
    # optimizer state in host memory (torch/distributed/fsdp/_fully_shard/_fsdp_api.py).
    host = p * (2 + workload.optimizer_state_copies)
    pcie = spec.intra_node.pcie_bandwidth.value
    # Per step the shard goes host -> device before each all-gather (forward, and backward
    # again when resharded) and the reduced gradient shard device -> host.
    copies = (2 * p + p) / pcie if pcie > 0 else 0.0
    return (
        f"CPU offload: host memory {format_bytes(host)} per rank, {format_bytes(host * ranks_per_node)} per node "
        f"(sharded fp32 parameters, gradients, {workload.optimizer_state_copies} optimizer state cop"
        f"{'y' if workload.optimizer_state_copies == 1 else 'ies'}); the step time does not include the "
        f"host-device copies (about {copies * 1e3:.3g} ms per step over PCIe at "
        f"{pcie / 1e9:g} GB/s) nor the optimizer step on the CPU"
    )


def ssp_bound_zero_note(engine: str) -> str:
    """ps-ssp with bound 0: a barrier as in ps-sync, but not the same server work."""
    how = (
        "the SimPy engine lets one worker's update overlap the others' transfers"
        if engine == "sim"
        else "the analytic engine applies the N updates in series after the pushes"
    )
    return (
        "ps-ssp with staleness bound 0 waits at a barrier like ps-sync, but its server applies each worker's "
        "gradient as it arrives (N optimizer updates of one gradient each, validate/train.py) where ps-sync "
        "sums the N gradients and applies one update: its step differs from ps-sync's by that work; "
        + how
        + " (measured bound-0 steps on the CPU hosts lie nearer the series form: docs/bad_inputs.md, "
        "'ps-ssp with bound 0')"
    )
