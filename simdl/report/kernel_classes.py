"""Profiled kernel (or CPU op) names -> op classes, and simdl's row classes -> the same groups.

A torch.profiler trace of a CUDA step names kernels by their library symbols (cuDNN's
``sm90_xmma_fprop_implicit_gemm_...``, cuBLAS's ``nvjet_...`` / ``cutlass_...``, ATen's
``vectorized_elementwise_kernel<...>``, ``batch_norm_collect_statistics_kernel``, ...); on a
CPU the same step lists ``aten::`` ops. :func:`kernel_class` sorts either into gemm, conv,
elementwise, norm, softmax, pool, reduction, optimizer, copy or other: by the op that
launched it where its name settles the class (``aten::cudnn_convolution``), else by the
first pattern of the kernel's own name that matches. The patterns are words of those names as ATen's CUDA sources and the NVIDIA
libraries spell them (aten/src/ATen/native/cuda/*.cu kernel names; cuDNN's fprop / dgrad /
wgrad convolution kernels and its NCHW/NHWC layout transforms), checked in order: norm
before convolution because cuDNN's batch-norm kernels are ``cudnn::bn_*``, convolution
before gemm because cuDNN's implicit-GEMM convolutions contain ``gemm``, the optimizer's
``multi_tensor_apply`` before elementwise.

simdl prices rows, not kernels: :data:`ROW_GROUP` maps its row classes
(:mod:`simdl.workload.op_classes`) onto the kernel groups they launch. Attention rows
(their softmax included) go to gemm; the loss (cross-entropy: log-softmax and NLL) is in
simdl's root row, class ``other``, so it goes with the elementwise group, and the kernel
side puts softmax and reduction kernels there too (:data:`KERNEL_GROUP`).
"""

from __future__ import annotations

import re

KERNEL_CLASSES = ("conv", "gemm", "norm", "softmax", "pool", "reduction", "optimizer", "copy", "elementwise", "other")

_PATTERNS: tuple[tuple[str, str], ...] = (
    ("copy", r"memcpy|memset|\[memory\]"),
    ("optimizer", r"multi_tensor_apply|foreach|aten::_fused_sgd|sgd"),
    # LayerNorm's backward kernels are GammaBetaBackward / ComputeInternalGradients, its statistics RowwiseMoments.
    (
        "norm",
        r"batch_norm|batchnorm|bn_fw|bn_bw|layer_norm|layernorm|group_norm|welford|native_norm|gammabeta"
        r"|rowwisemoments|computeinternalgradients",
    ),
    # cuDNN's own convolution kernels (scudnn_*, cask_cudnn*, its FFT path's fft2d_* / flip_filter / gcgemm).
    (
        "conv",
        r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|cudnn|depthwise|nchwtonhwc|nhwctonchw"
        r"|im2col|col2im|fft2d|flip_filter|gcgemm",
    ),
    ("softmax", r"softmax"),
    ("pool", r"pool"),
    # cuBLAS's split-K GEMMs end in a splitKreduce kernel: part of the GEMM, not a reduction.
    (
        "gemm",
        r"gemm|gemv|cutlass|nvjet|cublas|xmma|matmul|splitk|aten::mm\b|aten::addmm|aten::bmm|aten::linear"
        r"|scaled_dot_product|flash|efficient_attention|fmha",
    ),
    ("reduction", r"reduce|nll|aten::sum|aten::mean|cross_entropy"),
    (
        "elementwise",
        r"elementwise|vectorized|unrolled|relu|gelu|silu|swish|sigmoid|tanh|dropout|fill|copy|"
        r"add|mul|div|cat|where|clamp|threshold|aten::",
    ),
)
_COMPILED = tuple((cls, re.compile(p, re.IGNORECASE)) for cls, p in _PATTERNS)
# The launching op, where it settles the class: a cuDNN convolution may run a plain sgemm
# kernel, a linear layer the same one.
_OP_PATTERNS: tuple[tuple[str, str], ...] = (
    ("optimizer", r"_foreach_|_fused_sgd|_fused_adam"),
    ("norm", r"batch_norm|layer_norm|group_norm"),
    ("conv", r"convolution|cudnn_conv|conv_depthwise|slow_conv|conv2d"),
    ("softmax", r"softmax"),
    ("pool", r"pool"),
    ("gemm", r"aten::(mm|addmm|bmm|baddbmm|matmul|linear)$|scaled_dot_product|flash|efficient_attention"),
)
_OPS = tuple((cls, re.compile(p, re.IGNORECASE)) for cls, p in _OP_PATTERNS)

# simdl's row classes -> comparison group; kernel classes -> comparison group.
ROW_GROUP = {
    "conv": "conv",
    "linear": "gemm",
    "attention": "gemm",
    "norm": "norm",
    "pool": "pool",
    "activation": "elementwise",
    "dropout": "elementwise",
    "other": "elementwise",
}
KERNEL_GROUP = {
    "conv": "conv",
    "gemm": "gemm",
    "norm": "norm",
    "pool": "pool",
    "softmax": "elementwise",
    "reduction": "elementwise",
    "elementwise": "elementwise",
    "optimizer": "optimizer",
    "copy": "copy",
    "other": "other",
}
GROUPS = ("conv", "gemm", "norm", "pool", "elementwise", "optimizer", "copy", "other")


def kernel_class(name: str, op: str = "") -> str:
    """The class of a kernel, by the op that launched it where that settles it, else by its name."""
    for cls, rx in _OPS:
        if op and rx.search(op):
            return cls
    for cls, rx in _COMPILED:
        if rx.search(name):
            return cls
    return "other"


def kernel_groups(kernels: list) -> dict[str, float]:
    """Seconds per comparison group of ``[[name, calls, seconds(, launching op)], ...]``."""
    out: dict[str, float] = {}
    for k in kernels:
        g = KERNEL_GROUP[kernel_class(k[0], k[3] if len(k) > 3 else "")]
        out[g] = out.get(g, 0.0) + float(k[2])
    return out


def row_groups(by_op_class_s: dict[str, float], optimizer_s: float | None = None) -> dict[str, float]:
    """Seconds per comparison group of simdl's per-row-class times (and its optimizer step)."""
    out: dict[str, float] = {}
    for cls, s in by_op_class_s.items():
        g = ROW_GROUP.get(cls, "other")
        out[g] = out.get(g, 0.0) + float(s)
    if optimizer_s is not None:
        out["optimizer"] = out.get("optimizer", 0.0) + float(optimizer_s)
    return out
