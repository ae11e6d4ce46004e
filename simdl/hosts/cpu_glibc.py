"""The CPU host backend: a host CPU as the device, its memory from glibc malloc.

* Fresh mappings fault in: glibc serves a request at or above its mmap threshold with a new
  mapping, unmapped again at free (simdl.cluster.allocator), so such a buffer faults its
  pages in every time it is allocated (``host.page_fault_ns_per_byte``).
* Heap trimming faults gradients in again: FSDP2 allocates each unit's reduce output in
  backward (foreach_reduce) and it stays the unit's gradient until
  ``zero_grad(set_to_none=True)``. Allocated last, they take the top of the heap; freed
  together at zero_grad they leave that much free at the top, and glibc trims the heap when
  it reaches the trim threshold, so the next backward gets the pages from the OS again.
  Measured (benchmarks/fsdp2_heap_trim_cpu.py): ViT-B/32 FSDP none, 2 ranks, the heap grows
  28-57 MB at each unit's backward, every byte a page fault, and zero_grad trims 510 MB.
* Collectives block: gloo has no side streams, so a collective holds the training thread.
* No foreach optimizer path: PyTorch picks foreach kernels for CUDA tensors only
  (torch/optim/optimizer.py, _default_to_fused_or_foreach).
* The ranks of a node share its cores (``shared_device`` profiles; simdl.sim.cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..cluster.allocator import mmap_threshold, trim_threshold


@dataclass(frozen=True)
class GlibcCpuHost:
    cluster: Any
    kind: str = "cpu"

    def collectives_block(self) -> bool:
        return True

    def foreach_optimizer(self) -> bool:
        return False

    def mapped_threshold(self) -> float | None:
        """glibc's mmap threshold where the profile prices page faults; None where it does not."""
        return mmap_threshold(self.cluster)

    def refault_limit(self, grad_bytes: Sequence[float]) -> float:
        """Bytes up to which a gradient allocated in backward (FSDP's sharded gradients, one
        per unit) faults in again every step: the mmap threshold once the step's gradients
        reach the trim threshold (larger ones are mapped fresh anyway: their ``allocs``); 0
        below it, or where no faults are priced."""
        trim, mapped = trim_threshold(self.cluster), mmap_threshold(self.cluster)
        if trim is None or mapped is None or sum(grad_bytes) < trim:
            return 0.0
        return mapped

    def autocast_fp32_types(self) -> tuple[str, ...]:
        # CPU autocast keeps layer_norm, group_norm and softmax in 16 bits (torch 2.14 on a
        # CPU: bf16 in, bf16 out); none of the table's module types is widened.
        return ()

    def dropout_mask_bytes(self) -> float:
        # On a CPU dropout multiplies by a noise tensor in the input's dtype, as traced
        # (aten/src/ATen/native/Dropout.cpp: the fused native_dropout is for CUDA inputs).
        return 0.0

    def native_batch_norm(self, precision: str) -> bool:
        # The CPU kernel model is the roofline (simdl.costs.tasks): no cuDNN / native split.
        return False

    def shares_cores(self) -> bool:
        """The profile's ``shared_device``: the ranks of a node are processes of one host."""
        return bool(self.cluster.spec.shared_device)

    def refault_notes(self, refault_bytes: float) -> tuple[str, ...]:
        """A warning where gradients fault in again: the charge (bytes x the idle fill rate)
        under-prices what trimming cost on the Zen 4, and the cost moves with the heap's history
        (benchmarks/fsdp2_refault_cost_cpu.py: 1.9-7x the charge; the same ConvNeXt-L step
        6.06 s in one run, 8.43 s in another)."""
        if not refault_bytes:
            return ()
        return (
            f"glibc heap trimming: {refault_bytes / 1e6:.0f} MB of gradients per rank fault in again every "
            "step; measured on CPU ranks it cost 1.9-7x the price used here and varied between runs "
            "(benchmarks/fsdp2_refault_cost_cpu.py); ranks run with MALLOC_TRIM_THRESHOLD_ above the "
            "step's heap (and a profile with host.trim_threshold_MiB) do not pay it",
        )
