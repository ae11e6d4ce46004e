"""The per-node sections of a cluster file, each declared once (:mod:`.declare`): device
``memory`` overheads of a process and the ``host`` CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..provenance import Sourced
from .declare import COUNT, FRACTION0, NONNEG, POSITIVE, dump, knob, parse


@dataclass(frozen=True)
class MemoryOverheads:
    """Per-process device memory that is not tensors of the model."""

    context_bytes: Sourced = knob(
        "context_MiB",
        NONNEG,
        """CUDA context and library handles (for the CPU
                                  device: the process baseline)""",
        required=True,
    )
    allocator_fragmentation: Sourced = knob(
        "allocator_fragmentation",
        FRACTION0,
        """fraction of reserved memory
                                            lost to fragmentation""",
        required=True,
    )
    workspace_bytes: Sourced = knob("workspace_MiB", NONNEG, "cuBLAS workspace kept per handle/stream", required=True)
    conv_backward_scratch: Sourced | None = knob(
        "conv_backward_scratch",
        NONNEG,
        """scratch a convolution's
        backward allocates while it runs, per byte of its input plus its output gradient (oneDNN on the CPU
        reorders both); absent: none, as on CUDA, where cuDNN's workspace is part of workspace_MiB""",
    )

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


@dataclass(frozen=True)
class Host:
    """The host CPU of one node."""

    cpu_cores: Sourced = knob("cpu_cores", COUNT, "cores of one node's host", required=True)
    dataloader_sample: Sourced = knob(
        "dataloader_sample_us",
        NONNEG,
        """time of one CPU core to load and
                                      augment one sample""",
        required=True,
    )
    page_fault_per_byte: Sourced | None = knob(
        "page_fault_ns_per_byte",
        NONNEG,
        """devices whose tensors live in
        host memory (cpu): a buffer above the C allocator's mmap threshold is mapped fresh at every allocation
        and pays a page fault per page on first touch; GPUs keep freed blocks in PyTorch's caching allocator:
        absent = 0""",
    )
    mmap_threshold_bytes: Sourced | None = knob(
        "mmap_threshold_MiB",
        POSITIVE,
        """the C allocator's mmap
        threshold (absent: glibc's dynamic one, simdl.cluster.allocator)""",
    )
    trim_threshold_bytes: Sourced | None = knob(
        "trim_threshold_MiB",
        POSITIVE,
        """free bytes at the heap's top
        at which glibc gives them back (absent: twice the mmap threshold, glibc's dynamic setting); set where the
        ranks ran with MALLOC_TRIM_THRESHOLD_ (simdl.cluster.host.allocator_env)""",
    )

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


def _parse_memory(raw: Mapping[str, Any], where: str) -> MemoryOverheads:
    return parse(MemoryOverheads, raw, where)


def _parse_host(raw: Mapping[str, Any], where: str) -> Host:
    return parse(Host, raw, where)
