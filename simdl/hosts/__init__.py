"""Host backends: what a device's memory and streams cost, by device kind.

A plan asks its cluster's backend (:func:`host_for`) instead of reading device quirks
itself; the backend is chosen by the device file's ``kind`` (``cuda`` or ``cpu``):

* ``cuda`` (:mod:`.cuda`): PyTorch's caching allocator keeps what it frees, so nothing
  faults in again; collectives run on side streams; optimizers take the foreach path.
* ``cpu`` (:mod:`.cpu_glibc`): host memory from glibc malloc, whose fresh mappings and heap
  trimming fault pages in again; gloo collectives block the training thread; the ranks of
  a node share its cores.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class HostBackend(Protocol):
    """The questions plans ask about the device they run on."""

    @property
    def kind(self) -> str:
        """The device kind it serves (a device file's ``kind``)."""

    def collectives_block(self) -> bool:
        """Whether a collective blocks the training thread (no side streams)."""

    def foreach_optimizer(self) -> bool:
        """Whether the optimizer takes the multi-tensor (foreach) path."""

    def mapped_threshold(self) -> float | None:
        """Bytes from which a fresh buffer is mapped and faults in; None where nothing faults."""

    def refault_limit(self, grad_bytes: Sequence[float]) -> float:
        """Bytes up to which a gradient allocated in backward faults in again every step; 0: none."""

    def refault_notes(self, refault_bytes: float) -> tuple[str, ...]:
        """What the result should say about the bytes that fault in again every step."""

    def autocast_fp32_types(self) -> tuple[str, ...]:
        """Module types whose op autocast runs in fp32 on this device (simdl.memory.rowdtypes)."""

    def dropout_mask_bytes(self) -> float:
        """Bytes per element of the mask a training dropout saves; 0: the activation's dtype."""

    def native_batch_norm(self, precision: str) -> bool:
        """Whether BatchNorm runs ATen's native CUDA kernels instead of cuDNN's at ``precision``
        (priced by the GPU's ``native_batch_norm`` kernel values, simdl.costs.gpu_rows)."""

    def shares_cores(self) -> bool:
        """Whether the ranks of a node and a PS server on it are processes sharing one host's
        CPU cores (the PS shared-host bound, simdl.sim.cores). Ranks sharing one device's
        compute is the profile's ``shared_device`` on any kind (Cluster.device_share)."""


def host_for(cluster) -> HostBackend:
    """The backend of ``cluster``'s device (its file's ``kind``)."""
    return GlibcCpuHost(cluster) if cluster.spec.gpu.is_cpu else CudaHost(cluster)


from .cpu_glibc import GlibcCpuHost  # noqa: E402 -- the backends implement the protocol above
from .cuda import CudaHost  # noqa: E402
