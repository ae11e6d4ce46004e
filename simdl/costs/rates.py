"""Achievable rates of one device for one precision: the compute side of the costs both engines share.

Achievable = peak times an efficiency, both from the cluster profile (datasheet peaks,
efficiencies from measurements or calibration; the profile says which). A calibrated profile
may add per-class memory bandwidths, call overheads, the host's page-fault cost, a compute
profile of measured rows or a GPU kernel model; :mod:`simdl.costs.tasks` prices rows and
tasks at these rates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..cluster import Cluster
from ..hosts import host_for

# Which peak a precision uses for matmul/convolution rows.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16-amp": "fp16"}

# Assumed: under autocast (bf16 / fp16-amp) activations are stored in 16 bits, so
# activation traffic and saved activations are about half of the fp32 table's. A few
# ops autocast keeps in fp32 (softmax, losses, norms' statistics) make this a lower bound.
MIXED_PRECISION_ACTIVATION_FACTOR = 0.5


@dataclass(frozen=True)
class Rates:
    """Achievable rates of one device for one precision, in SI units."""

    flops: float  # FLOP/s for matmul/convolution/attention
    memory_bandwidth: float  # bytes/s
    kernel_overhead: float  # s per kernel launch
    activation_factor: float  # bytes scale for activations under mixed precision
    # s of fixed setup per matmul/convolution call (a row's forward call, and each of its
    # backward input- and weight-gradient calls), on top of kernel_overhead: oneDNN on CPU
    # pays ~0.1 ms per convolution call (fitted by simdl calibrate); 0 unless the profile says.
    matmul_call_overhead: float = 0.0
    # Bytes/s of the memory-bound op classes that have their own rate, as ((class, rate), ...)
    # (hashable: rates key the row-time cache); other rows use memory_bandwidth.
    class_memory_bandwidth: tuple = ()
    # Fraction of a row's shorter part (FLOPs or bytes time) hidden under its longer part:
    # 1 = the roofline's max, 0 = their sum (Efficiency.compute_memory_overlap).
    compute_memory_overlap: float = 1.0
    # s of fixed cost per call of a memory-bound class's row, on top of its kernels' launches,
    # as ((class, s), ...) (Efficiency.call_overhead_by_class; off in calibrated profiles).
    class_call_overhead: tuple = ()
    # Bytes/s at which a convolution's backward accumulates its weight gradient, once per
    # sample (Efficiency.conv_weight_grad_bandwidth); 0: no such term (the roofline).
    conv_weight_grad_bandwidth: float = 0.0
    # Streaming ops on whole parameter-sized tensors (optimizer, FSDP/DDP copies): bytes/s
    # and s per call (0: memory_bandwidth and kernel_overhead, the roofline's rates).
    stream_bandwidth: float = 0.0
    stream_call_overhead: float | None = None
    copy_bandwidth: float = 0.0
    # How many times its idle time a buffer copy takes inside a step (Efficiency.copy_in_step_factor).
    copy_factor: float = 1.0
    # Host devices: s per byte of page faults on a buffer above the C allocator's mmap
    # threshold (mapped fresh at each allocation), and that threshold (bytes).
    page_fault_per_byte: float = 0.0
    mmap_threshold: float = float("inf")
    # Measured row times of profiled models (simdl.analytic.measured), and the factor from
    # the device share they were measured at to this prediction's share.
    measured: Any = None
    measured_scale: float = 1.0
    # The GPU's fitted kernel model (simdl.costs.gpu_profile.KernelProfile) and the
    # precision it prices at; None: the roofline above.
    kernels: Any = None
    precision: str = "fp32"
    # The model's memory format (simdl.workload.workload.MEMORY_FORMATS) the kernel model prices.
    memory_format: str = "contiguous"
    # Host seconds per row that the plan's framework work (DDP hooks and launches, FSDP's
    # per-unit steps) adds to the eager host stream, as (forward, backward) tuples of one value
    # per row (simdl.costs.gpu_framework); empty: none.
    framework_host: tuple = ()


@lru_cache(maxsize=1024)
def device_rates(cluster: Cluster, precision: str, memory_format: str = "contiguous") -> Rates:
    # per_rank_*: ranks sharing one device (the cpu-local preset) each get their share.
    eff = cluster.spec.efficiency
    peak = PEAK_KEY[precision]
    # A profile may give the matmul efficiency per peak (matmul_tf32, matmul_fp16, ...): the
    # fraction of peak reached differs by precision (fits to published figures, simdl.calibrate.published:
    # A100 TF32 0.24, AMP 0.43).
    matmul = eff.matmul_by_precision.get(peak, eff.matmul)
    return Rates(
        flops=cluster.per_rank_peak_flops(peak) * matmul.value,
        memory_bandwidth=cluster.per_rank_memory_bandwidth * eff.memory_bandwidth.value,
        kernel_overhead=eff.kernel_launch.value,
        activation_factor=MIXED_PRECISION_ACTIVATION_FACTOR if precision in ("bf16", "fp16-amp") else 1.0,
        matmul_call_overhead=eff.matmul_call_overhead.value if eff.matmul_call_overhead else 0.0,
        class_memory_bandwidth=tuple(
            (c, cluster.per_rank_memory_bandwidth * v.value) for c, v in eff.memory_bandwidth_by_class.items()
        ),
        compute_memory_overlap=eff.compute_memory_overlap.value if eff.compute_memory_overlap else 1.0,
        class_call_overhead=tuple((c, v.value) for c, v in eff.call_overhead_by_class.items()),
        conv_weight_grad_bandwidth=(
            cluster.per_rank_memory_bandwidth * eff.conv_weight_grad_bandwidth.value
            if eff.conv_weight_grad_bandwidth
            else 0.0
        ),
        stream_bandwidth=(
            cluster.per_rank_memory_bandwidth * eff.stream_bandwidth.value if eff.stream_bandwidth else 0.0
        ),
        stream_call_overhead=eff.stream_call_overhead.value if eff.stream_call_overhead else None,
        copy_bandwidth=(cluster.per_rank_memory_bandwidth * eff.copy_bandwidth.value if eff.copy_bandwidth else 0.0),
        copy_factor=eff.copy_in_step_factor.value if eff.copy_in_step_factor else 1.0,
        **host_rates(cluster),
        **_measured(cluster, precision),
        **_kernels(cluster, precision, memory_format),
    )


def _kernels(cluster: Cluster, precision: str, memory_format: str) -> dict:
    """The GPU kernel model, where the device is a GPU whose file has a ``kernels:`` block, as
    this precision prices it (its native BatchNorm rates where the host runs those kernels; the
    memory format prices only here: a CPU device's model has no layout term)."""
    k = cluster.spec.gpu.kernels
    if k is None or cluster.spec.gpu.is_cpu:
        return {}
    if k.native_batch_norm is not None and not host_for(cluster).native_batch_norm(precision):
        # BatchNorm takes cuDNN at this precision: the norm class's curve prices it.
        k = dataclasses.replace(k, native_batch_norm=None)
    return {"kernels": k, "precision": precision, "memory_format": memory_format}


def host_rates(cluster: Cluster) -> dict:
    """The host's page-fault cost (s per byte) and mmap threshold (bytes), as ``Rates``
    fields; empty when the host pays none (GPU memory: PyTorch's caching allocator)."""
    threshold = host_for(cluster).mapped_threshold()
    fault = cluster.spec.host.page_fault_per_byte
    if threshold is None or fault is None:
        return {}
    return {"page_fault_per_byte": fault.value, "mmap_threshold": threshold}


def _measured(cluster: Cluster, precision: str) -> dict:
    """The cluster's compute profile, if any, for the precision it was measured in."""
    path = cluster.spec.compute_profile
    if not path:
        return {}
    from .measured import load_compute_profile

    prof = load_compute_profile(path)
    if prof.precision != precision:
        return {}
    # Measured with ranks_sharing_device ranks on one device; this prediction's ranks each
    # get cluster.device_share of it (1 on devices that are not shared).
    measured_share = 1.0 / prof.ranks_sharing_device if cluster.spec.shared_device else 1.0
    return {"measured": prof, "measured_scale": measured_share / cluster.device_share}
