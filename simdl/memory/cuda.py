"""GPU memory as ``nvidia-smi`` shows it: the caching allocator's reserved memory plus the
CUDA context and NCCL's buffers.

The rank's allocation sequence (:mod:`.sequence`, with the cuBLAS/cuBLASLt workspaces of
:mod:`.device` taken first) is replayed through the allocator model
(:mod:`.allocator`; :mod:`.allocator.fast` runs it, the same figures in one loop) with the
memory the allocator may use: the device's memory less the fit margin, the context and
NCCL's buffers. ``max_allocated`` and ``max_reserved`` are what
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` would report after two
steps; the device total is reserved + context + NCCL.

``FIT_MARGIN``: a run is said to fit when its device total leaves this share of the
device's memory free, room for what the model does not hold: cuDNN's convolution
workspaces (opportunistic, :mod:`.device`), the driver's own reservations (cudaMemGetInfo
reports less than the HBM size), allocator states of later steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from .allocator import AllocatorConfig
from .allocator.fast import replay_fast
from .allocator.replay import ALLOC
from .device import DeviceMemory, device_memory
from .sequence import DEFAULT_STREAM, allocation_sequence

FIT_MARGIN = 0.05


@dataclass(frozen=True)
class CudaMemory:
    max_allocated_bytes: float
    max_reserved_bytes: float
    device_bytes: float  # reserved + context + NCCL: what nvidia-smi shows at the peak
    parts: dict[str, float]  # the device total's parts (add up to device_bytes)
    fit_limit_bytes: float
    out_of_memory: bool  # the allocator ran out even after releasing its cache
    fragmentation: float
    allocated: np.ndarray = field(repr=False)  # bytes after each op
    reserved: np.ndarray = field(repr=False)
    event_of_op: np.ndarray = field(repr=False)  # timeline event index (steady iteration) of each op, -1: none
    notes: tuple[str, ...] = ()
    capacity_bytes: float = 0.0  # the memory the fit test measures against (before its margin)

    @property
    def fits(self) -> bool:
        return not self.out_of_memory and self.device_bytes <= self.fit_limit_bytes


def communicators(plan, cluster) -> int:
    """NCCL communicators a rank opens: one per process group that runs collectives."""
    if cluster.spec.collective_backend != "nccl" or plan.world_size <= 1:
        return 0
    from ..strategies import registry

    return registry.of_plan(plan).communicators(plan)


def _fallback(cluster) -> tuple[float, float, str]:
    """Context and workspace from the cluster's ``memory:`` block, for a GPU file without
    ``device_memory:``."""
    m = cluster.spec.memory
    return (
        m.context_bytes.value,
        m.workspace_bytes.value,
        f"{cluster.spec.gpu.name} has no device_memory block: context and workspace from the cluster's "
        "memory: block (assumed), no NCCL buffers counted",
    )


def cuda_memory(
    workload,
    plan,
    cluster,
    steady,
    options,
    tensor_peak: float,
    curves: bool = False,
    allocator: AllocatorConfig | None = None,
) -> CudaMemory:
    """The replay's figures. ``tensor_peak``: the timeline's peak (live tensors); ``curves``:
    also allocated/reserved after each op (for plots); ``allocator``: ``PYTORCH_CUDA_ALLOC_CONF``
    options (its capacity is replaced by the memory the allocator may use)."""
    from .model import timeline_for

    dm = device_memory(cluster.spec.gpu, cluster.spec.cuda or None)
    first = timeline_for(workload, plan, cluster, replace(options, first_iteration=True))
    d = plan.details
    buckets = tuple(d.get("bucket_bytes") or ()) if d.get("comm_buffer_bytes") else ()
    key = (steady, first, workspaces(dm, cluster), buckets, d.get("wrap", "block"), "shard_size" in d)
    memory = cluster.spec.gpu.memory_bytes.value
    if dm is not None and dm.cuda_total is not None:
        memory = dm.cuda_total.value
    if dm is not None:
        context, nccl = dm.context_bytes.value, dm.nccl_bytes(communicators(plan, cluster))
        notes: tuple[str, ...] = ()
    else:
        context, _, note = _fallback(cluster)
        nccl, notes = 0.0, (note,)
    limit = memory * (1.0 - FIT_MARGIN)
    usable = int(max(limit - context - nccl, 0))
    conf = allocator or AllocatorConfig()
    res, events = _replay(*key, workload.table, replace(conf, capacity_bytes=usable), curves)
    oom = res.oom_at is not None
    if oom:  # the figures of an unbounded device, to say by how much it does not fit
        res, events = _replay(
            *key, workload.table, replace(conf, capacity_bytes=AllocatorConfig().capacity_bytes), curves
        )
    parts = {
        "tensors": tensor_peak,
        "allocator_rounding": res.max_allocated_bytes - tensor_peak,
        "allocator_cache": res.max_reserved_bytes - res.max_allocated_bytes,
        "cuda_context": context,
        "nccl_buffers": nccl,
    }
    device = res.max_reserved_bytes + context + nccl
    notes += (_peak_note(dm, cluster),)
    if oom:
        notes += (
            f"the caching allocator runs out of memory (after freeing its cache) with {usable / 2**30:.2f} GiB usable",
        )
    return CudaMemory(
        res.max_allocated_bytes,
        res.max_reserved_bytes,
        device,
        parts,
        limit,
        oom,
        res.fragmentation,
        res.allocated,
        res.reserved,
        events,
        notes,
        memory,
    )


def _peak_note(dm: DeviceMemory | None, cluster) -> str:
    """What the device total holds, which CUDA version it assumes and what it is tested against."""
    gpu = cluster.spec.gpu.name
    if dm is None:
        return (
            f"memory: peak = max reserved + the {gpu} context of the cluster's memory: block; it fits when "
            f"the allocator never runs out and the total leaves {FIT_MARGIN:.0%} of the memory free"
        )
    version = (
        f"CUDA {dm.cuda} (given: --cuda or the cluster's cuda)"
        if dm.cuda_source == "cluster"
        else f"CUDA {dm.cuda} (assumed: the {gpu} file's default_cuda; --cuda for the build's torch.version.cuda)"
    )
    against = (
        f"the {dm.cuda_total.value / 2**30:.2f} GiB CUDA gives processes ({dm.cuda_total.kind})"
        if dm.cuda_total is not None
        else f"the {gpu} file's memory_GiB"
    )
    return (
        f"memory: peak = max reserved + {version} context + NCCL buffers, as nvidia-smi's memory.used shows it; "
        f"it fits when the allocator never runs out and the total leaves {FIT_MARGIN:.0%} of {against} free"
    )


def workspaces(dm: DeviceMemory | None, cluster) -> tuple[tuple[str, float], ...]:
    if dm is not None:
        return tuple(dm.library_allocations())
    return (("cuBLAS workspace (cluster memory: block)", _fallback(cluster)[1]),)


@lru_cache(maxsize=4096)
def _replay(steady, first, libs, buckets, wrap, fsdp, table, cfg: AllocatorConfig, curves):
    details = {"bucket_bytes": list(buckets), "comm_buffer_bytes": sum(buckets), "wrap": wrap}
    if fsdp:
        details["shard_size"] = steady.shard_size
    ops = [(ALLOC, ("library", i), int(s), DEFAULT_STREAM) for i, (_, s) in enumerate(libs) if s > 0]
    seq, events = allocation_sequence(steady, first, table, details, with_events=True, plain=True)
    ops += seq
    events = np.concatenate([np.full(len(ops) - len(seq), -1), events])
    return replay_fast(ops, cfg, curves=curves), (events if curves else np.zeros(0, dtype=np.int64))
