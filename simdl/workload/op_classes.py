"""Op classes of workload-table rows: which kind of kernel a row's module runs.

The analytic engine prices matmul-class rows (convolution, linear, attention) by FLOPs and
the others by bytes; a cluster profile may give the memory-bound classes each their own
achievable bandwidth (``efficiency.memory_bandwidth_<class>``): on CPU a batch norm (two
passes for its statistics, then one to normalise) streams its bytes at a quarter of the rate
an in-place ReLU does (cpu-local's calibration). Calibration also sums measured times per class.
"""

from __future__ import annotations

# Row (module) types -> op class. Anything else is "other": the root row with the loss,
# containers that own concatenations/additions (DenseNet's torch.cat, ResNet's residual add),
# flatten, ...
OP_CLASSES = {
    "conv": ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"),
    "linear": ("Linear", "NonDynamicallyQuantizableLinear", "Bilinear"),
    "attention": ("MultiheadAttention",),
    "norm": ("BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "LayerNorm2d"),
    "activation": ("ReLU", "ReLU6", "GELU", "SiLU", "Hardswish", "Hardsigmoid", "Sigmoid", "Tanh"),
    "pool": ("MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"),
    "dropout": ("Dropout", "Dropout2d", "StochasticDepth"),
}
CLASSES = tuple(OP_CLASSES) + ("other",)
# Classes priced by their bytes alone, which a profile may give a bandwidth of their own.
MEMORY_CLASSES = ("norm", "activation", "pool", "dropout", "other")

_CLASS_OF = {t: c for c, ts in OP_CLASSES.items() for t in ts}


def op_class(row_type: str) -> str:
    return _CLASS_OF.get(row_type, "other")
