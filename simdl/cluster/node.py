"""The per-node sections of a cluster file: device ``memory`` overheads of a process and the
``host`` CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..provenance import Sourced
from .readers import _check_keys, _fraction, _nonneg, _positive, _put, _sourced_count

_MEM_KEYS = ("context_MiB", "allocator_fragmentation", "workspace_MiB", "conv_backward_scratch")


@dataclass(frozen=True)
class MemoryOverheads:
    """Per-process device memory that is not tensors of the model."""

    context_bytes: Sourced  # CUDA context + library handles (for the CPU device: process baseline)
    allocator_fragmentation: Sourced  # fraction of reserved memory lost to fragmentation
    workspace_bytes: Sourced  # cuBLAS workspace kept per handle/stream
    # Scratch a convolution's backward allocates, per byte of its input plus its output
    # gradient, while it runs (oneDNN on the CPU reorders both; absent: none, as on CUDA,
    # where cuDNN's workspace is part of workspace_MiB).
    conv_backward_scratch: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "context_MiB", self.context_bytes)
        _put(out, "allocator_fragmentation", self.allocator_fragmentation)
        _put(out, "workspace_MiB", self.workspace_bytes)
        _put(out, "conv_backward_scratch", self.conv_backward_scratch)
        return out


_HOST_KEYS = ("cpu_cores", "dataloader_sample_us", "page_fault_ns_per_byte", "mmap_threshold_MiB",
              "trim_threshold_MiB")


@dataclass(frozen=True)
class Host:
    """The host CPU of one node."""

    cpu_cores: Sourced
    dataloader_sample: Sourced  # s of one CPU core to load and augment one sample
    # Devices whose tensors live in host memory (the cpu "GPU"): a buffer larger than the C
    # allocator's mmap threshold is mapped fresh at every allocation and unmapped at its
    # free, so each such allocation pays a page fault per page on first touch (s per byte).
    # GPUs keep freed blocks in PyTorch's caching allocator: absent = 0.
    page_fault_per_byte: Sourced | None = None
    mmap_threshold_bytes: Sourced | None = None
    # Free bytes at the heap's top at which glibc gives them back (absent: twice the mmap
    # threshold, glibc's dynamic setting; simdl.cluster.allocator.trim_threshold). Set where
    # the ranks ran with MALLOC_TRIM_THRESHOLD_ (simdl.cluster.host.allocator_env).
    trim_threshold_bytes: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "cpu_cores", self.cpu_cores)
        _put(out, "dataloader_sample_us", self.dataloader_sample)
        _put(out, "page_fault_ns_per_byte", self.page_fault_per_byte)
        _put(out, "mmap_threshold_MiB", self.mmap_threshold_bytes)
        _put(out, "trim_threshold_MiB", self.trim_threshold_bytes)
        return out


def _parse_memory(raw: Mapping[str, Any], where: str) -> MemoryOverheads:
    _check_keys(raw, _MEM_KEYS, where)
    return MemoryOverheads(
        context_bytes=_nonneg(raw, "context_MiB", where),
        allocator_fragmentation=_fraction(raw, "allocator_fragmentation", where, allow_zero=True),
        workspace_bytes=_nonneg(raw, "workspace_MiB", where),
        conv_backward_scratch=_nonneg(raw, "conv_backward_scratch", where, required=False),
    )


def _parse_host(raw: Mapping[str, Any], where: str) -> Host:
    _check_keys(raw, _HOST_KEYS, where)
    return Host(cpu_cores=_sourced_count(raw, "cpu_cores", where),
                dataloader_sample=_nonneg(raw, "dataloader_sample_us", where),
                page_fault_per_byte=_nonneg(raw, "page_fault_ns_per_byte", where, required=False),
                mmap_threshold_bytes=_positive(raw, "mmap_threshold_MiB", where, required=False),
                trim_threshold_bytes=_positive(raw, "trim_threshold_MiB", where, required=False))
