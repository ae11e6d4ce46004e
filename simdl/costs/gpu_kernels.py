"""Time of one GPU kernel (one operator call) from its shape, per op class.

The model prices a call from a floor and a body (:func:`with_floor`), where the body is the
longer of its compute time and its memory time (roofline, Williams, Waterman & Patterson,
CACM 2009) and each rate depends on the call's size, not one scalar:

- **GEMM** (``linear``, ``bmm``, and a convolution as its implicit GEMM, cuDNN's
  ``implicit_gemm`` / NVIDIA "Convolutional Layers User's Guide", section "Convolution
  Algorithms": a convolution of N x C x H x W by K filters of C x R x S is a GEMM with
  M = N*P*Q, N = K, K = C*R*S). The output is cut into thread-block tiles; a GPU runs
  ``sms x blocks_per_sm`` tiles at once, so time goes in *waves* of tiles and the last wave
  may be nearly empty (wave quantisation), and a tile that hangs over the matrix edge does
  the whole tile's work (tile quantisation): NVIDIA "Matrix Multiplication Background
  User's Guide", sections "Tile Quantization" and "Wave Quantization". cuBLAS picks among
  tiles per shape; the model takes the fastest of :data:`TILES` (the tile sizes of the
  ``sgemm_<M>x<N>`` kernels the measured calls ran), splitting K when there are fewer tiles
  than slots (split-K). Batched products (cuBLAS's strided-batched sgemm) choose among
  fewer: the measured A100's ran its 128x128 tile only, the P100's and P4's their 128x64
  one, so a fit can restrict them (``tiles``, :class:`simdl.costs.kernel_fit.KernelFit`'s
  ``batched_tiles``). A tile reaches ``compute_efficiency``
  of its share of the peak, unless its operand loads (``(tm+tn) K`` elements) take longer
  at its share of ``operand_bandwidth``, and pays a fixed prologue / epilogue per wave
  (``tile_setup_s``).
- **conv** (fp32 3x3 stride-1 convolutions): the faster of two of cuDNN's algorithms, its
  implicit GEMM and its non-fused Winograd (transforms and 36 batched products), neither
  splitting K (:func:`conv_time`).
- **Streaming classes** (elementwise, normalisation, softmax, pooling, embedding,
  reduction, and depthwise/grouped convolutions): bytes moved over the memory bandwidth at
  the class's fitted fraction, reached only once the call has enough bytes in flight
  (Little's law: bytes in flight = bandwidth x latency): the size at which half the
  asymptotic bandwidth is reached is ``fill_latency_s`` x that bandwidth. The latency, not
  a byte count, is what carries over between GPUs: fitted per GPU it is 14-26 us for the
  elementwise class on all five measured GPUs while the half-bandwidth size ranges 2-19 MB
  (benchmarks/gpu_kernels.py).
- ``floor_s``: the time of the smallest call, combined with the body by ``floor_power``
  (:func:`with_floor`). In the measured data it is the host's time to issue one call;
  :func:`stream_time` and :func:`gemm_time` take ``floor`` as a parameter so that a step's
  device stream uses the device-side floor only (the host stream, :mod:`simdl.costs.gpu_rows`,
  prices the rest).

All arguments are numpy arrays (or scalars) in SI units; every function is vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Thread-block tiles (rows x columns of the output) and how many of them one SM holds at
# once. Tiles: the sgemm kernels the measured calls ran (benchmarks/data/gpu_kernels_neusight,
# kernel families sgemm_128x128, 128x64, 64x64, 32x128, 32x32; the 128x32 and 64x32 ones
# that also occur changed no fit when added). Tiles resident per SM: assumed, halving as the
# tile doubles (a 128x128 fp32 tile's 256 threads hold most of an SM's 64 K registers); the
# data's ``Blocks per SM`` column is the grid over the SMs, not residency.
TILES = ((128, 128, 1), (128, 64, 2), (64, 64, 4), (32, 128, 4), (32, 32, 8))
# Tensor-core paths (TF32, FP16, BF16): the threadblock tiles of CUTLASS's tensor-op GEMM
# kernels (cutlass_tensorop_*_256x128, 128x256, 128x128, 128x64, 64x64 in its profiler's
# default set; cuBLAS's ampere_*gemm_* kernels use the same family); blocks per SM assumed
# from their shared-memory use (one 256x128 tile per SM, ...).
TENSOR_TILES = ((256, 128, 1), (128, 256, 1), (128, 128, 2), (128, 64, 4), (64, 64, 8))

# Shortest K range a split-K part gets (elements): the K tile of the sgemm kernels is 8 and
# a part of fewer than a few dozen K tiles would spend its time in the prologue; assumed.
SPLIT_K_MIN = 256

# Classes the model prices, and which of them are streaming (bytes-bound) kinds.
GEMM_CLASSES = ("gemm", "conv")
STREAM_CLASSES = ("elementwise", "norm", "softmax")
CLASSES = GEMM_CLASSES + STREAM_CLASSES


@dataclass(frozen=True)
class Hardware:
    """What the model needs of a GPU: SM count, peak FLOP/s of the path used, memory bytes/s."""

    sms: int
    peak_flops: float
    memory_bandwidth: float


@dataclass(frozen=True)
class GemmParams:
    compute_efficiency: float  # fraction of peak a full, large tile reaches
    memory_efficiency: float  # fraction of the memory bandwidth for the unique operand bytes
    operand_bandwidth: float  # tiles' operand loads (L2 and DRAM), in multiples of the memory bandwidth
    tile_setup_s: float  # fixed cost per tile per wave (prologue, epilogue)
    floor_s: float  # smallest call
    floor_power: float  # how the floor and the body combine (see :func:`with_floor`)


@dataclass(frozen=True)
class StreamParams:
    memory_efficiency: float  # fraction of the memory bandwidth at large sizes
    fill_latency_s: float  # seconds of that bandwidth's bytes that must be in flight for half of it
    floor_s: float
    floor_power: float


def gemm_time(
    hw: Hardware,
    p: GemmParams,
    B,
    M,
    N,
    K,
    nbytes,
    floor: float | None = None,
    element_bytes: float = 4.0,
    tiles=TILES,
    split_k: bool = True,
):
    """Seconds of ``B`` independent M x K by K x N products moving ``nbytes`` bytes, operands
    of ``element_bytes`` each; ``split_k``: whether the kernel may split K (below)."""
    B, M, N, K = (np.asarray(x, dtype=float) for x in (B, M, N, K))
    best = None
    nbytes = np.asarray(nbytes, dtype=float)
    for tm, tn, per_sm in tiles:
        slots = hw.sms * per_sm
        tiles = B * np.ceil(M / tm) * np.ceil(N / tn)
        # Split-K: with fewer tiles than slots, the K loop is cut into `split` parts run as
        # separate tiles and summed after (CUTLASS "split-K" / cuBLAS's sliced kernels), no
        # part shorter than SPLIT_K_MIN; the partial sums cost one write and read each.
        split = np.clip(np.minimum(np.floor(slots / tiles), np.floor(K / SPLIT_K_MIN)), 1.0, None)
        if not split_k:
            split = np.ones_like(split)
        waves = np.ceil(tiles * split / slots)
        # One tile's work over its share of the GPU's rate (the peak split over the slots), or
        # its operand loads, (tm + tn) x K elements, over its share of the operand bandwidth
        # if longer: a small tile reuses each loaded element tm*tn/(tm+tn) times only.
        k = K / split
        math = 2.0 * tm * tn * k / (hw.peak_flops * p.compute_efficiency / slots)
        loads = (tm + tn) * k * element_bytes / (hw.memory_bandwidth * p.operand_bandwidth / slots)
        per_tile = np.maximum(math, loads) + p.tile_setup_s
        partials = np.where(split > 1, 2.0 * 4.0 * split * B * M * N, 0.0)
        memory = (nbytes + partials) / (hw.memory_bandwidth * p.memory_efficiency)
        t = np.maximum(waves * per_tile, memory)
        best = t if best is None else np.minimum(best, t)
    return with_floor(p.floor_s if floor is None else floor, best, p.floor_power)


# Winograd F(4x4, 3x3): each 4 x 4 output tile is computed from a 6 x 6 input tile, so the
# products are 36 independent GEMMs (one per transformed element) of tiles x C_in by
# C_in x C_out (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR
# 2016, section 4: F(m x m, r x r) over (m + r - 1)^2 elements). cuDNN's non-fused Winograd
# runs them as such: the measured calls' kernels are winogradforwarddata4x4,
# winogradforwardfilter4x4, a batched sgemm and winogradforwardoutput4x4 (NeuSight data,
# column Kernels).
WINOGRAD_OUT_TILE = 4
WINOGRAD_ELEMENTS = 36
FILTER_AREA = 9


def conv_time(
    hw: Hardware, p: GemmParams, M, N, K, nbytes, images=1.0, floor: float | None = None, element_bytes: float = 4.0
):
    """Seconds of a 3x3 stride-1 convolution of ``images`` images (square outputs), given as
    its implicit GEMM (M = images x output positions, N = output channels, K = 9 x input
    channels) moving ``nbytes`` bytes (input, filter, output): the faster of

    - implicit GEMM (cuDNN's IMPLICIT_PRECOMP_GEMM, the measured ``scudnn_*`` kernels): the
      M x K by K x N product, inputs gathered in place, no extra bytes;
    - non-fused Winograd F(4x4, 3x3) (:data:`WINOGRAD_ELEMENTS` products of T x C_in by
      C_in x C_out, T = images x ceil(side / 4)^2 tiles), its transforms streamed before
      and after the products (separate kernels, so their time adds): input, filter and
      output read or written once, the transformed tensors (36 T C_in, 36 C_in C_out,
      36 T C_out) written and read back.

    With ``torch.backends.cudnn.benchmark`` on, as the measured calls ran, cuDNN times its
    algorithms and keeps the fastest (PyTorch docs, torch.backends.cudnn.benchmark); off
    (PyTorch's default) its heuristics aim at the same choice. Neither kernel splits K:
    the measured calls with long K and few output tiles run at the unsplit price (on the
    A100, 1 image, 1227 -> 1355 channels at 5 x 5: 782 us, about 20 x what a split-K
    product would take)."""
    M, N, K = (np.asarray(x, dtype=float) for x in (M, N, K))
    nbytes = np.asarray(nbytes, dtype=float)
    implicit = gemm_time(hw, p, 1.0, M, N, K, nbytes, floor=0.0, element_bytes=element_bytes, split_k=False)
    images = np.asarray(images, dtype=float)
    side = np.sqrt(M / images)
    T = images * np.ceil(side / WINOGRAD_OUT_TILE) ** 2
    cin = K / FILTER_AREA
    transformed = WINOGRAD_ELEMENTS * element_bytes * (T * cin + cin * N + T * N)
    products = gemm_time(
        hw, p, WINOGRAD_ELEMENTS, T, N, cin, transformed, floor=0.0, element_bytes=element_bytes, split_k=False
    )
    streamed = (nbytes + transformed) / (hw.memory_bandwidth * p.memory_efficiency)
    body = np.minimum(implicit, products + streamed)
    return with_floor(p.floor_s if floor is None else floor, body, p.floor_power)


def stream_time(hw: Hardware, p: StreamParams, nbytes, floor: float | None = None):
    """Seconds of a bytes-bound call moving ``nbytes`` bytes."""
    nbytes = np.asarray(nbytes, dtype=float)
    half = p.fill_latency_s * hw.memory_bandwidth * p.memory_efficiency
    # Bandwidth rises with size as b/(b + half) (a GPU needs enough bytes in flight, Little's
    # law: bandwidth x latency bytes outstanding, to reach its streaming rate).
    bw = hw.memory_bandwidth * p.memory_efficiency * nbytes / (nbytes + half)
    body = np.divide(nbytes, bw, out=np.zeros_like(nbytes), where=nbytes > 0)
    return with_floor(p.floor_s if floor is None else floor, body, p.floor_power)


def with_floor(floor, body, power: float):
    """The call's time from its floor and its body: ``(floor^p + body^p)^(1/p)``. p = 1 adds
    them (the floor's work precedes the kernel), a large p takes the longer (the floor's work
    overlaps the previous call's kernel, as when calls are issued back to back and each
    one's host time hides under the kernel before it)."""
    body = np.asarray(body, dtype=float)
    top = np.maximum(floor, body)
    top = np.where(top > 0, top, 1.0)
    return top * ((floor / top) ** power + (body / top) ** power) ** (1.0 / power)


def conv_gemm_shape(B, Cin, Cout, R, HW, stride, padding, groups=1):
    """(batch, M, N, K, output side) of a square convolution as its implicit GEMM (per group)."""
    out = (np.asarray(HW) + 2 * np.asarray(padding) - np.asarray(R)) // np.asarray(stride) + 1
    M = np.asarray(B) * out * out
    return groups, M, np.asarray(Cout) // groups, np.asarray(Cin) // groups * np.asarray(R) ** 2, out
