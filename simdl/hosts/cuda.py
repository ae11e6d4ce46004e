"""The CUDA host backend: a GPU with PyTorch's caching allocator and side streams.

The caching allocator keeps the blocks it frees for reuse (c10/cuda/CUDACachingAllocator.cpp),
so a step's buffers never fault in again; NCCL collectives run on their own streams, so they
overlap compute; optimizers take the foreach path (torch/optim/optimizer.py,
_default_to_fused_or_foreach: foreach on CUDA tensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class CudaHost:
    cluster: Any
    kind: str = "cuda"

    def collectives_block(self) -> bool:
        return False

    def foreach_optimizer(self) -> bool:
        return True

    def mapped_threshold(self) -> float | None:
        return None

    def refault_limit(self, grad_bytes: Sequence[float]) -> float:
        return 0.0

    def refault_notes(self, refault_bytes: float) -> tuple[str, ...]:
        return ()

    def autocast_fp32_types(self) -> tuple[str, ...]:
        # CUDA autocast's fp32 list (PyTorch docs amp.rst, "CUDA Ops that can autocast to
        # float32": layer_norm, group_norm, softmax, log_softmax), by the modules that call them.
        return ("LayerNorm", "LayerNorm2d", "GroupNorm", "Softmax", "LogSoftmax", "Softmax2d")

    def dropout_mask_bytes(self) -> float:
        # native_dropout's bool mask (aten/src/ATen/native/Dropout.cpp, is_fused_kernel_acceptable).
        return 1.0

    def shares_cores(self) -> bool:
        return False

    def native_batch_norm(self, precision: str) -> bool:
        # PyTorch aten/src/ATen/native/Normalization.cpp, _select_batch_norm_backend: cuDNN only
        # when input and weight are not bf16, and an fp16 input only with an fp32 weight.
        # BatchNorm is on none of CUDA autocast's lists, so under bf16 autocast its input is the
        # bf16 convolution output and it runs ATen's native kernels; under fp16 autocast the
        # fp16 input with the fp32 weight takes cuDNN, as fp32 does.
        return precision == "bf16"
