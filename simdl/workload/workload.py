"""A workload: which model, on what input, at what batch, trained how.

Together with a cluster and a strategy it is everything a prediction needs. The
strategy never names a GPU and the cluster never names a model (style.md, section 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SimdlError, unknown
from .table import WorkloadTable

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "lamb")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16-amp")
# The memory format of the model and its inputs: PyTorch's default ``torch.contiguous_format``
# (NCHW for 4-D tensors) or ``torch.channels_last`` (NHWC), set by
# ``model.to(memory_format=torch.channels_last)`` and the same on the inputs (PyTorch tutorial
# "Channels Last Memory Format in PyTorch"). It prices the layout copies cuDNN makes around
# tensor-core convolutions (simdl.costs.gpu_rows); a CPU device's model has no such term.
MEMORY_FORMATS = ("contiguous", "channels_last")
MEMORY_FORMAT_MEANING = {
    "contiguous": "torch.contiguous_format, NCHW (PyTorch's default)",
    "channels_last": "torch.channels_last, NHWC: no cuDNN layout copies around tensor-core convolutions",
}

# Optimizer state kept per parameter element, in parameter-sized copies.
# ``sgd`` is torch.optim.SGD without momentum: torch/optim/sgd.py keeps no state then, and one
# momentum buffer when momentum > 0 (``momentum``, 0.9). torch/optim/adam.py keeps exp_avg and
# exp_avg_sq (plus a scalar step per tensor, negligible). torch/optim/adamw.py (torch 2.14) is
# Adam with decoupled_weight_decay=True and weight_decay=1e-2: the same two states.
# apex.optimizers.FusedLAMB (apex/optimizers/fused_lamb.py) keeps exp_avg and exp_avg_sq too; its
# update is written into the gradient buffer (csrc/multi_tensor_lamb.cu), no copy of its own.
OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2, "lamb": 2}
# The torch.optim class and arguments each name stands for (simdl.memory.reference builds them).
OPTIMIZER_MEANING = {
    "sgd": "torch.optim.SGD(momentum=0)",
    "momentum": "torch.optim.SGD(momentum=0.9)",
    "adam": "torch.optim.Adam (weight_decay=0)",
    "adamw": "torch.optim.AdamW (weight_decay=1e-2, decoupled)",
    "lamb": "apex.optimizers.FusedLAMB (weight_decay=0.01, CUDA only)",
}

# Defaults, each from a public source. The studies simdl grew from do not state them.
DEFAULT_BATCH_SIZE = 32  # torchvision references/classification/train.py: --batch-size 32 "images per gpu"
DEFAULT_OPTIMIZER = "momentum"  # same script: SGD with momentum 0.9
DEFAULT_PRECISION = "fp32"  # same script: AMP off unless --amp
DEFAULT_MEMORY_FORMAT = "contiguous"  # PyTorch's default memory format (torch.contiguous_format)
DEFAULT_EPOCHS = 10  # study 1, experiment 1 (origins.md)


@dataclass(frozen=True)
class Workload:
    """Model table + per-rank batch + dataset size + epochs + optimizer + precision + memory format."""

    table: WorkloadTable
    batch_size: int = DEFAULT_BATCH_SIZE
    train_samples: int = 50_000
    epochs: int = DEFAULT_EPOCHS
    optimizer: str = DEFAULT_OPTIMIZER
    precision: str = DEFAULT_PRECISION
    grad_accumulation: int = 1  # micro-steps per optimizer step (DDP no_sync)
    # Each block (the model's FSDP wrap classes) runs under torch.utils.checkpoint: only its
    # input is kept for backward, its forward is recomputed there (simdl.memory.timeline).
    activation_checkpointing: bool = False
    memory_format: str = DEFAULT_MEMORY_FORMAT

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise SimdlError(f"batch size {self.batch_size!r} must be an integer >= 1")
        if not isinstance(self.epochs, (int, float)) or not 0 < self.epochs < float("inf"):
            raise SimdlError(f"epochs {self.epochs!r} must be a finite number > 0")
        if not isinstance(self.train_samples, int) or self.train_samples < 1:
            raise SimdlError(f"train samples {self.train_samples!r} must be an integer >= 1")
        if self.optimizer not in OPTIMIZERS:
            raise unknown("optimizer", self.optimizer, OPTIMIZERS)
        if self.precision not in PRECISIONS:
            raise unknown("precision", self.precision, PRECISIONS)
        if self.memory_format not in MEMORY_FORMATS:
            err = unknown("memory format", self.memory_format, MEMORY_FORMATS)
            raise SimdlError(f"{err} (contiguous is NCHW, channels_last NHWC)")
        if not isinstance(self.grad_accumulation, int) or self.grad_accumulation < 1:
            raise SimdlError(f"gradient accumulation {self.grad_accumulation!r} must be an integer >= 1")
        if not isinstance(self.activation_checkpointing, bool):
            raise SimdlError(f"activation checkpointing {self.activation_checkpointing!r} must be true or false")

    @property
    def model(self) -> str:
        return self.table.model

    @property
    def mixed_precision(self) -> bool:
        return self.precision in ("bf16", "fp16-amp")

    @property
    def param_bytes(self) -> float:
        """Parameters are kept in fp32 in every supported precision (AMP keeps fp32 masters)."""
        return float(self.table.param_bytes)

    @property
    def optimizer_state_copies(self) -> int:
        return OPTIMIZER_STATE_COPIES[self.optimizer]
