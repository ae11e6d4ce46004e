"""A GPU's ``kernels:`` block: the fitted kernel-model values of :mod:`simdl.costs.gpu_kernels`,
and which math path (peak) each op class takes at each precision, as PyTorch picks it.

Block format (end of a GPU YAML)::

    kernels:
      kind: calibrated | derived
      source: "where the values come from"
      sm_count: {value: 108, kind: datasheet, source: "..."}
      gemm:        {compute_efficiency: .., memory_efficiency: .., operand_bandwidth: .., tile_setup_s: .., floor_s: .., floor_power: ..}
      conv:        {same keys as gemm}   # fp32 3x3 stride-1 convolutions (cuDNN's own algorithms)
      elementwise: {memory_efficiency: .., fill_latency_s: .., floor_s: .., floor_power: ..}
      norm:        {same keys as elementwise}
      softmax:     {same keys as elementwise}
      low_reuse:   {fraction: .., kind: calibrated, source: ".."}  # optional, 1 when absent
      tensor_core: {tf32: .., kind: calibrated, source: ".."}  # optional: a path's scale, replacing the priors'
      native_batch_norm: {stats_block_GB_per_s: .., backward_block_GB_per_s: .., transform_fraction: .., kind: .., source: ".."}  # optional (simdl.costs.gpu_rows)

Efficiencies are fractions of this GPU's datasheet peaks; the values were fitted on fp32
(SIMT) kernels (benchmarks/gpu_kernels.py prints them and checks them on held-out GPUs and
shapes).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..errors import SimdlError, unknown
from .gpu_kernels import CLASSES, GEMM_CLASSES, GemmParams, Hardware, StreamParams

KINDS = ("calibrated", "derived")
_KEYS = ("kind", "source", "sm_count", *CLASSES, "low_reuse", "tensor_core", "native_batch_norm")

# Which peak a matmul-class kernel runs at, per simdl precision, as PyTorch picks it:
# torch.backends.cuda.matmul.allow_tf32 is False by default since PyTorch 1.12 (linear,
# bmm, attention in fp32 run on CUDA cores) while torch.backends.cudnn.allow_tf32 is True
# (convolutions run on TF32 tensor cores where the GPU has them): PyTorch docs, "CUDA
# semantics", section "TensorFloat-32 (TF32) on Ampere (and later) devices". ``tf32`` =
# both flags set; under autocast (``bf16``, ``fp16-amp``) convolutions and matmuls run in
# the 16-bit type (PyTorch docs, "Automatic Mixed Precision package", CUDA ops that can
# autocast to float16: conv*, linear, matmul, bmm, ...).
MATH_PATHS = {
    "fp32": {"matmul": "fp32", "conv": "tf32"},
    "tf32": {"matmul": "tf32", "conv": "tf32"},
    "bf16": {"matmul": "bf16", "conv": "bf16"},
    "fp16-amp": {"matmul": "fp16", "conv": "fp16"},
}


@dataclass(frozen=True)
class NativeBatchNorm:
    """Rates of ATen's native CUDA BatchNorm kernels (simdl.costs.gpu_rows.native_batch_norm_times):
    bytes per second one thread block moves in the statistics and backward kernels (one block
    per channel), and the transform kernel's fraction of the norm class's streaming rate."""

    stats_block_bandwidth: float
    backward_block_bandwidth: float
    transform_fraction: float
    kind: str
    source: str


@dataclass(frozen=True)
class KernelProfile:
    """One GPU's kernel-model values and the peaks its paths run at (SI units)."""

    kind: str
    source: str
    sms: int
    params: tuple  # ((class, GemmParams | StreamParams), ...)
    peaks: tuple  # ((precision key, FLOP/s), ...)
    memory_bandwidth: float
    # (path, tensor-core efficiency scale): the GPU's measured large-GEMM fraction of the
    # path's peak over its fp32 fraction (GPU YAML priors), 1 where the priors do not say.
    tensor_scale: tuple = ()
    # Depthwise / grouped (low-reuse) convolutions stream at this fraction of the elementwise
    # class's bandwidth (simdl.costs.gpu_rows.LOW_REUSE_K).
    low_reuse_fraction: float = 1.0
    # ATen's native BatchNorm kernels' rates; None where the profile prices BatchNorm on cuDNN
    # (simdl.costs.rates keeps them only at precisions its host runs the native kernels at).
    native_batch_norm: NativeBatchNorm | None = None

    def param(self, cls: str):
        return dict(self.params)[cls]

    def hardware(self, path: str) -> Hardware:
        return Hardware(self.sms, dict(self.peaks)[path], self.memory_bandwidth)

    def path_of(self, precision: str, kind: str) -> str:
        """The peak key a ``kind`` ('matmul' | 'conv') kernel uses at ``precision``: TF32 only on
        GPUs that have TF32 tensor cores (a tf32 peak above the fp32 one)."""
        path = MATH_PATHS[precision][kind]
        peaks = dict(self.peaks)
        if path == "tf32" and peaks["tf32"] <= peaks["fp32"]:
            return "fp32"
        return path

    def describe_paths(self, precision: str) -> str:
        return (
            "PyTorch's defaults: torch.backends.cuda.matmul.allow_tf32=False since 1.12, "
            "torch.backends.cudnn.allow_tf32=True (docs 'CUDA semantics', TensorFloat-32); autocast for AMP"
        )


def _number(raw: Mapping, key: str, where: str) -> float:
    v = raw.get(key)
    if isinstance(v, Mapping):
        v = v.get("value")
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
        raise SimdlError(f"{where}: {key} must be a positive number, got {v!r}")
    return float(v)


def _class_params(raw: Any, cls: str, where: str):
    cls_type = GemmParams if cls in GEMM_CLASSES else StreamParams
    names = tuple(f.name for f in fields(cls_type))
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where}: {cls} must map {', '.join(names)} to numbers, got {raw!r}")
    for k in raw:
        if k not in names:
            raise SimdlError(f"{where}: {cls}: {unknown('key', k, names)}")
    return cls_type(**{n: _number(raw, n, f"{where}: {cls}") for n in names})


def parse_kernels(
    raw: Mapping, where: str, peaks: Mapping[str, float], memory_bandwidth: float, priors: Mapping[str, float]
) -> KernelProfile:
    """Validate a ``kernels:`` block; ``peaks`` in FLOP/s by precision key, ``priors`` the GPU
    file's measured fractions (``gemm_fp32_fraction``, ...)."""
    where = f"{where}: kernels"
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where} must be a mapping, got {raw!r}")
    for k in raw:
        if k not in _KEYS:
            raise SimdlError(f"{where}: {unknown('key', k, _KEYS)}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise SimdlError(f"{where}: kind {kind!r} is not accepted; accepted: {', '.join(KINDS)}")
    if not isinstance(raw.get("source"), str) or not raw["source"].strip():
        raise SimdlError(f"{where}: source must say where the values come from")
    missing = [c for c in CLASSES if c not in raw]
    if missing:
        raise SimdlError(f"{where}: missing {', '.join(missing)}; a kernels block gives every class of {CLASSES}")
    fp32 = priors.get("gemm_fp32_fraction")
    scale = dict(
        (p, priors[f"gemm_{p}_fraction"] / fp32) for p in ("tf32", "bf16") if fp32 and f"gemm_{p}_fraction" in priors
    )
    scale.update(_tensor_core(raw.get("tensor_core"), where))
    return KernelProfile(
        kind=kind,
        source=raw["source"],
        sms=int(_number(raw, "sm_count", where)),
        params=tuple((c, _class_params(raw[c], c, where)) for c in CLASSES),
        peaks=tuple(sorted(peaks.items())),
        memory_bandwidth=memory_bandwidth,
        tensor_scale=tuple(sorted(scale.items())),
        low_reuse_fraction=_low_reuse(raw.get("low_reuse"), where),
        native_batch_norm=_native_batch_norm(raw.get("native_batch_norm"), where),
    )


def _tensor_core(raw: Any, where: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("source"), str):
        raise SimdlError(f"{where}: tensor_core must give per-path scales (tf32, bf16), kind and source, got {raw!r}")
    out = {}
    for k in raw:
        if k in ("kind", "source"):
            continue
        if k not in ("tf32", "bf16"):
            raise SimdlError(f"{where}: tensor_core: {unknown('path', k, ('tf32', 'bf16'))}")
        out[k] = _number(raw, k, f"{where}: tensor_core")
    return out


def _low_reuse(raw: Any, where: str) -> float:
    if raw is None:
        return 1.0
    if not isinstance(raw, Mapping) or not isinstance(raw.get("source"), str):
        raise SimdlError(f"{where}: low_reuse must give fraction, kind and source, got {raw!r}")
    f = _number(raw, "fraction", f"{where}: low_reuse")
    if f > 1.5:
        raise SimdlError(f"{where}: low_reuse.fraction {f} is not accepted; accepted: (0, 1.5]")
    return f


def _native_batch_norm(raw: Any, where: str) -> NativeBatchNorm | None:
    if raw is None:
        return None
    where = f"{where}: native_batch_norm"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("source"), str) or raw.get("kind") not in KINDS:
        raise SimdlError(
            f"{where} must give stats_block_GB_per_s, backward_block_GB_per_s, transform_fraction, "
            f"kind ({', '.join(KINDS)}) and source, got {raw!r}"
        )
    names = ("stats_block_GB_per_s", "backward_block_GB_per_s", "transform_fraction", "kind", "source")
    for k in raw:
        if k not in names:
            raise SimdlError(f"{where}: {unknown('key', k, names)}")
    f = _number(raw, "transform_fraction", where)
    if f > 1.5:
        raise SimdlError(f"{where}: transform_fraction {f} is not accepted; accepted: (0, 1.5]")
    return NativeBatchNorm(
        stats_block_bandwidth=_number(raw, "stats_block_GB_per_s", where) * 1e9,
        backward_block_bandwidth=_number(raw, "backward_block_GB_per_s", where) * 1e9,
        transform_fraction=f,
        kind=raw["kind"],
        source=raw["source"],
    )
