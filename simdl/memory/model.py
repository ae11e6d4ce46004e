"""Peak memory per rank, with its breakdown at the moment of the peak.

The peak comes from the allocation timeline (:mod:`simdl.memory.timeline`) of one
steady-state iteration. Figures reported:

* **tensor bytes** (``peak_tensor_bytes``): the live tensors at the timeline's peak (what
  PyTorch's MemTracker counts), plus on CUDA the 512-byte rounding (``kMinBlockSize``) of
  the parameter-sized tensors.
* On a CUDA device, the rank's allocation sequence replayed through the caching
  allocator model (:mod:`simdl.memory.cuda`): ``max_allocated_bytes`` and
  ``max_reserved_bytes`` as ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
  would report them, and **process bytes** (``peak_bytes``) as nvidia-smi shows them:
  reserved + CUDA context + NCCL's buffers (the GPU file's ``device_memory:`` block).
  It fits when the allocator never runs out and the total leaves ``FIT_MARGIN`` free.
* On the CPU device (glibc heap): tensors plus the cluster profile's ``memory:`` terms
  (context_MiB: the process baseline, workspace_MiB, allocator_fragmentation as a
  fraction of the tensor peak).

Breakdown keys (:data:`simdl.result.MEMORY_CATEGORIES`): params, grads, optimizer,
activations (saved activations *and* the temporaries of the running op: activation
gradients, forward outputs), comm_buffers, other (context + workspace + fragmentation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ..cluster import Cluster
from ..result import MEMORY_CATEGORIES
from ..strategies.plan import PSPlan, SpmdPlan
from ..workload.table import WorkloadTable
from ..workload.workload import Workload
from .timeline import CATEGORIES, MemoryOptions, Timeline, build_timeline

if TYPE_CHECKING:
    from .cuda import CudaMemory

# c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize = 512, every allocation is rounded up to it.
CUDA_BLOCK_BYTES = 512


@dataclass(frozen=True)
class MemoryEstimate:
    peak_tensor_bytes: float
    peak_bytes: float  # process total: tensors + context + workspace + fragmentation
    breakdown: dict[str, float]
    capacity_bytes: float
    detail: dict[str, float] = field(default_factory=dict)  # timeline categories + overheads, at the peak
    notes: tuple[str, ...] = ()
    cuda: "CudaMemory | None" = None  # the caching allocator's replay (CUDA devices only)

    @property
    def fits(self) -> bool:
        if self.cuda is not None:
            return self.cuda.fits
        return self.peak_bytes <= self.capacity_bytes

    @property
    def max_allocated_bytes(self) -> float | None:
        return self.cuda.max_allocated_bytes if self.cuda is not None else None

    @property
    def max_reserved_bytes(self) -> float | None:
        return self.cuda.max_reserved_bytes if self.cuda is not None else None

    @property
    def device_parts(self) -> dict[str, float]:
        """What the process total is made of (CUDA: tensors, rounding, cache, context, NCCL)."""
        if self.cuda is not None:
            return dict(self.cuda.parts)
        return {k: self.detail[k] for k in ("context", "workspace", "fragmentation")} | {
            "tensors": self.peak_tensor_bytes
        }


@lru_cache(maxsize=256)
def _param_rounding(table: WorkloadTable, block: int, shard: int) -> float:
    """Bytes the allocator adds rounding each parameter-sized tensor (one copy) up to ``block``."""
    if block <= 1:
        return 0.0
    sizes = np.array([p.numel for p in table.params], dtype=float) * 4.0 / shard
    return float((np.ceil(sizes / block) * block - sizes).sum())


@lru_cache(maxsize=8192)
def _peak(timeline: Timeline, shard: int) -> tuple[float, tuple[float, ...], int]:
    tl = timeline.with_shard_size(shard) if shard != timeline.shard_size else timeline
    total, bd, k = tl.peak()
    return total, tuple(bd[c] for c in CATEGORIES), k


def block_bytes(cluster: Cluster) -> int:
    """Allocation granularity of the device: 512 B on CUDA, none for the CPU device."""
    return 1 if cluster.spec.gpu.is_cpu else CUDA_BLOCK_BYTES


def memory_options(workload: Workload, plan: SpmdPlan | PSPlan, cluster: Cluster) -> MemoryOptions:
    """Options from the workload (activation checkpointing), the plan's strategy settings
    (CPU offload, DDP bucket views), the device (foreach optimizers only on GPUs) and the
    communication backend (its scratch during FSDP's collectives)."""
    from ..collectives.backends import get_backend
    from ..hosts import host_for

    d = plan.details
    backend = get_backend(cluster.spec.collective_backend)
    host = host_for(cluster)
    return MemoryOptions(
        activation_checkpointing=workload.activation_checkpointing,
        cpu_offload=bool(d.get("cpu_offload", False)),
        foreach=not cluster.spec.gpu.is_cpu,
        gradient_as_bucket_view=bool(d.get("gradient_as_bucket_view", False)),
        all_gather_scratch=backend.scratch_factor("all_gather"),
        reduce_scatter_scratch=backend.scratch_factor("reduce_scatter"),
        conv_backward_scratch=(
            cluster.spec.memory.conv_backward_scratch.value if cluster.spec.memory.conv_backward_scratch else 0.0
        ),
        autocast_fp32_types=host.autocast_fp32_types(),
        dropout_mask_bytes=host.dropout_mask_bytes(),
    )


def timeline_for(
    workload: Workload, plan: SpmdPlan | PSPlan, cluster: Cluster, options: MemoryOptions | None = None
) -> Timeline:
    """The rank's timeline with the options :func:`memory_options` derives."""
    return build_timeline(workload, plan, options or memory_options(workload, plan, cluster))


def estimate_memory(
    workload: Workload,
    plan: SpmdPlan | PSPlan,
    cluster: Cluster,
    act_factor: float | None = None,
    options: MemoryOptions | None = None,
    curves: bool = False,
    allocator=None,
) -> MemoryEstimate:
    """Peak memory of the busiest rank. ``act_factor`` is accepted for compatibility: the
    timeline takes the precision from the workload. ``curves``: keep the caching
    allocator's allocated/reserved curves (CUDA; for plots). ``allocator``: a
    :class:`simdl.memory.allocator.AllocatorConfig` (``expandable_segments``,
    ``max_split_size_bytes``, ``roundup_power2_divisions``; CUDA only)."""
    del act_factor
    tl = timeline_for(workload, plan, cluster, options)
    total, cats, _ = _peak(tl, tl.shard_size)
    timeline_peak = total
    detail = dict(zip(CATEGORIES, cats))
    # Allocator rounding of the parameter-sized tensors the rank holds: its parameters,
    # each optimizer state copy, and the share of the gradients alive at the peak.
    block = block_bytes(cluster)
    if block > 1 and not plan.details.get("cpu_offload", False):
        shard = tl.shard_size
        r = _param_rounding(workload.table, block, shard)
        local = workload.param_bytes / shard
        detail["params"] += r
        detail["optimizer"] += workload.optimizer_state_copies * r if detail["optimizer"] > 0 else 0.0
        detail["grads"] += r * min(detail["grads"] / local, 1.0) if local else 0.0
        total = sum(detail.values())
    spec = cluster.spec.memory
    cuda = None
    if block > 1 and not isinstance(plan, PSPlan):
        from .cuda import cuda_memory

        cuda = cuda_memory(
            workload,
            plan,
            cluster,
            tl,
            options or memory_options(workload, plan, cluster),
            timeline_peak,
            curves,
            allocator,
        )
        other = max(cuda.device_bytes - total, 0.0)
        fragmentation = cuda.parts["allocator_cache"]
        context, workspace = cuda.parts["cuda_context"], cuda.parts["nccl_buffers"]
    else:
        fragmentation = spec.allocator_fragmentation.value * total
        context, workspace = spec.context_bytes.value, spec.workspace_bytes.value
        other = context + workspace + fragmentation
    bd = dict.fromkeys(MEMORY_CATEGORIES, 0.0)
    bd.update(
        params=detail["params"],
        grads=detail["grads"],
        optimizer=detail["optimizer"],
        activations=detail["activations"] + detail["temporaries"],
        comm_buffers=detail["comm_buffers"],
        other=other,
    )
    detail.update(context=context, workspace=workspace, fragmentation=fragmentation)
    capacity = cluster.spec.gpu.memory_bytes.value if cuda is None else cuda.capacity_bytes
    notes: tuple[str, ...] = ()
    if isinstance(plan, PSPlan):
        from ..units import format_bytes

        notes = (
            f"parameter-server host memory per shard: {format_bytes(ps_server_bytes(workload, plan))} "
            "(parameters, optimizer state, gradient buffers)",
        )
    if cuda is not None:
        notes += cuda.notes
    return MemoryEstimate(total, total + other, bd, capacity, detail, notes, cuda)


def ps_server_bytes(workload: Workload, plan: PSPlan) -> float:
    """Host memory of one parameter-server shard: its parameters, optimizer state, and
    one gradient buffer per worker push being aggregated (ps-sync) or one (async)."""
    shard = workload.param_bytes / plan.servers
    pushes = plan.workers if plan.synchronous else 1
    return shard * (1 + workload.optimizer_state_copies + pushes)
