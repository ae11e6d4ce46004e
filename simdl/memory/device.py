"""Device memory beyond the caching allocator: the ``device_memory:`` block of a GPU file.

What ``nvidia-smi`` shows for a training process is the caching allocator's reserved
memory plus memory the allocator never sees:

* ``cuda_context_MiB`` (per CUDA major version): the CUDA context with PyTorch's lazily
  loaded kernels (``CUDA_MODULE_LOADING=LAZY``, PyTorch's default since 1.13,
  pytorch/pytorch#86509);
* NCCL's communicator buffers: per channel and connection, the SIMPLE (``NCCL_BUFFSIZE``
  4 MiB), LL128 (4,915,200 B) and LL (524,288 B) FIFOs of nccl src/init.cc, mapped in
  2 MiB granules (10 MiB per connection, the allocation size NVIDIA/nccl#1685 logs);
  ``nccl_channels`` and ``nccl_connections_per_channel`` per GPU.

Two library workspaces go *through* the caching allocator and so are allocations in the
replayed sequence (:func:`library_allocations`): cuBLAS's per (handle, stream)
workspace (aten/src/ATen/cuda/CublasHandlePool.cpp ``parseChosenWorkspaceSize``: the
default ``CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8`` = 8,519,680 B, 32 MiB on sm90) and the
cuBLASLt workspace (``CUBLASLT_WORKSPACE_SIZE`` default 1024 KiB), one pair for the main
thread's handle and one for the autograd engine's device thread (handles are per
thread, ``DeviceThreadHandlePool``). cuDNN's convolution workspace is allocated per
call through the allocator too (aten/src/ATen/native/cudnn/Conv_v8.cpp) and is
opportunistic: ``try_plans`` catches the allocator's OutOfMemoryError and falls back to
an engine needing less, so it cannot make a run fail; its size (``cudnn_workspace_MiB``)
depends on the engine cuDNN's heuristics return.

The CUDA version is the major version of the ranks' PyTorch build (``torch.version.cuda``):
``cuda`` of the cluster (its file, ``--cuda``, or a sweep's ``--set cuda=``), else the GPU
file's ``default_cuda``. ``cuda_total_bytes``, where a GPU file has it, is the memory CUDA
gives processes (``cudaMemGetInfo`` total, ``torch.cuda.get_device_properties().total_memory``):
less than the board's total that ``nvidia-smi`` prints, by what the driver and firmware keep
(NVML's ``reserved``). The fit test measures against it when given, else against the file's
``memory_GiB``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import SimdlError
from ..provenance import Sourced, read

KEYS = (
    "cuda_context_MiB",
    "default_cuda",
    "cublas_workspace_bytes",
    "cublaslt_workspace_bytes",
    "cudnn_workspace_MiB",
    "nccl_channels",
    "nccl_connections_per_channel",
    "nccl_connection_bytes",
    "cuda_total_bytes",
)
#: Threads that run cuBLAS in a training step, each with its own handle and workspace:
#: the Python thread (forward, optimizer) and the autograd engine's device thread (backward).
CUBLAS_THREADS = 2


@dataclass(frozen=True)
class DeviceMemory:
    context_bytes: Sourced
    cuda: str
    cublas_workspace: Sourced
    cublaslt_workspace: Sourced
    cudnn_workspace: Sourced
    nccl_channels: Sourced
    nccl_connections: Sourced
    nccl_connection_bytes: Sourced
    cuda_total: Sourced | None = None
    cuda_source: str = "default_cuda"  # where the version came from: default_cuda | cluster

    def nccl_bytes(self, communicators: int) -> float:
        """NCCL's buffers for ``communicators`` process groups that run collectives."""
        return communicators * self.nccl_channels.value * self.nccl_connections.value * self.nccl_connection_bytes.value

    def library_allocations(self) -> list[tuple[str, float]]:
        """Workspaces the libraries take from the caching allocator at their first use."""
        out = []
        for t in range(CUBLAS_THREADS):
            out.append((f"cuBLAS workspace (thread {t})", self.cublas_workspace.value))
            out.append((f"cuBLASLt workspace (thread {t})", self.cublaslt_workspace.value))
        return out


@lru_cache(maxsize=64)
def _raw(path: str) -> dict:
    from ..cluster.safe_yaml import load_yaml_file  # libyaml's loader where PyYAML has it

    data = load_yaml_file(Path(path)) or {}
    return data.get("device_memory") or {}


def cuda_major(value, where: str = "cuda") -> str:
    """The CUDA major version of ``value`` ("13", "13.0", 12.8, 13) as a string; a one-line
    error naming what is accepted otherwise."""
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    m = re.fullmatch(r"(\d{1,2})(?:\.\d+)*", text)
    if m is None:
        raise SimdlError(f"{where} {value!r}: accepted: a CUDA version such as 12, 12.8 or 13.0 (torch.version.cuda)")
    return str(int(m.group(1)))


def device_memory(gpu, cuda: str | None = None) -> DeviceMemory | None:
    """The GPU file's ``device_memory:`` block (None when the file has none), with the context
    of CUDA ``cuda`` (a major version; None: the file's ``default_cuda``)."""
    if not gpu.source_path or not Path(gpu.source_path).exists():
        return None
    return _parse(gpu.source_path, cuda)


@lru_cache(maxsize=64)
def _parse(path: str, cuda: str | None) -> DeviceMemory | None:
    raw = _raw(path)
    if not raw:
        return None
    where = f"{path}: device_memory"
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise SimdlError(f"{where}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(KEYS)}")
    contexts = raw.get("cuda_context_MiB") or {}
    version = str(cuda or raw.get("default_cuda", ""))
    if version not in contexts:
        given = "the cluster's cuda (--cuda)" if cuda else "its default_cuda"
        raise SimdlError(
            f"CUDA {version!r} ({given}): {where} has no cuda_context_MiB for it; "
            f"accepted: {', '.join(sorted(map(str, contexts)))}"
        )
    ctx = read({"c_MiB": contexts[version]}, "c_MiB", where=f"{where}: cuda_context_MiB.{version}")
    return DeviceMemory(
        ctx,
        version,
        read(raw, "cublas_workspace_bytes", where=where),
        read(raw, "cublaslt_workspace_bytes", where=where),
        read(raw, "cudnn_workspace_MiB", where=where),
        read(raw, "nccl_channels", where=where),
        read(raw, "nccl_connections_per_channel", where=where),
        read(raw, "nccl_connection_bytes", where=where),
        read(raw, "cuda_total_bytes", where=where) if "cuda_total_bytes" in raw else None,
        "cluster" if cuda else "default_cuda",
    )
