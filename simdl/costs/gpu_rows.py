"""Workload-table rows priced on a GPU by the kernel model, with the host stream that feeds it.

Each row (one module call) becomes the kernel shapes the model prices
(:mod:`simdl.costs.gpu_kernels`), read back from the table's columns:

- convolution / linear: the implicit GEMM (M = batch x output positions, N = output
  channels, K = input channels x filter area / groups): K = forward FLOPs / (2 x output
  elements), N = parameters / (K + 1 for the bias), M = output elements / N. A 3x3
  stride-1 convolution is recognised by its input/output sizes (filter area
  = K x output positions / input elements = 9) and, on the fp32 path, priced by the
  ``conv`` curve fitted on cuDNN's own algorithms (implicit GEMM or Winograd), its data
  gradient as the convolution with input and output channels swapped (the transposed
  3x3 stride-1 convolution of dY by the flipped filter); others by the ``gemm`` curve.
- depthwise and grouped convolutions, recognised by a reduction depth K <= :data:`LOW_REUSE_K`
  (K = filter area for a depthwise one: 9, 25, 49) together with a read filter area below 0.7
  (K x output positions / input elements = filter area / groups / stride^2): priced as memory-bound streaming kernels. Each output reads only K inputs, so the
  kernel's FLOPs per byte are far below any GPU's ridge point; Tan & Le, "EfficientNetV2"
  (ICML 2021) section 3.2: depthwise convolutions "cannot fully utilize modern
  accelerators", which is why their Fused-MBConv replaces them in early stages.
- backward: a matmul-class row runs two kernels of the forward's FLOPs each, data
  gradient (dX = dY W^T: an M x K output reducing over N) and weight gradient
  (dW = X^T dY: a K x N output reducing over M), so backward = 2 x forward FLOPs
  (Narayanan et al., SC'21 "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", section 5.1); each is priced at its own GEMM shape. A row whose table
  has no input gradient (the first layer) runs only the weight gradient.
- streaming rows (norms, activations, pooling, dropout, embedding, the loss and additions
  in ``other``): their bytes at the class's curve; an activation's backward reads the
  gradient and its saved tensor and writes one (PyTorch tools/autograd/derivatives.yaml:
  relu -> threshold_backward(grad, result)): 1.5 x its forward bytes; other classes 2 x.

Host stream: PyTorch eager issues each op from the CPU; a kernel cannot start before it is
issued, so the device runs behind a host that spends :func:`host_op_seconds` per forward op
(Python, dispatcher, autograd node creation, launch), :data:`HOST_MODULE_S` per module call
and :data:`HOST_BWD_FRACTION` of a forward op's time per backward op (autograd engine thread:
no Python). The device
finishes row i at ``d_i = max(d_(i-1), h_i) + k_i`` (h_i: when the host has issued row i);
what the device waits is reported as ``host_bound`` in the step split.
"""

from __future__ import annotations

import numpy as np

from .gpu_kernels import FILTER_AREA, TENSOR_TILES, TILES, conv_time, gemm_time, stream_time
from .gpu_profile import KernelProfile

# Reduction depth at or below which a convolution whose read filter area is below
# LOW_REUSE_AREA is a depthwise / grouped one, priced as a memory-bound low-reuse kernel
# (depthwise 3x3: K = 9, 5x5: 25, 7x7: 49; a dense convolution has K = its input channels x
# filter area and a read area of filter area / stride^2 >= 1 unless it is a strided 1x1).
LOW_REUSE_K = 49
LOW_REUSE_AREA = 0.7
# Filter area read back from the table that marks a 3x3 stride-1 convolution (9) and the
# tolerance of that reading (padding changes output sizes by a row or two).
WINOGRAD_AREA = (7.0, 11.5)
# A kernel's duration on the device when it does almost nothing: assumed 3 us (an empty
# launch is ~1-3 us on CUDA 12 drivers: jiahuanglin.xyz, "From PyTorch op to kernel
# launch", gpu_kernel_serving lesson 18; the measured data's floors, 18-50 us, are a lone
# op timed with its launch gap and are not used on the device stream).
DEVICE_FLOOR_S = 3e-6
# Host seconds per forward eager op: the GPU's fitted elementwise floor_s, the wall time of
# one eager op call whose kernel is negligible, as the NeuSight data measured it (PyTorch
# 2.1: 18-39 us over its five GPUs' hosts, 23 us on the A100's): the time the host takes
# to issue an op. It lies within the 5-25 us of CPU-side work per op that the layer table
# of jiahuanglin.xyz's "From PyTorch op to kernel launch" gives (Python ~1, pybind11 ~1,
# autograd ~1-3, dispatcher ~1-2, backend ~1-5, launch ~1-3 us). A backward op skips the
# Python, pybind11 and autograd-recording layers (the autograd engine runs in C++): half a
# forward op's time is assumed. 5 us per nn.Module call (__call__ and its hook checks) is
# assumed.
HOST_BWD_FRACTION = 0.5
HOST_MODULE_S = 5e-6
ACTIVATION_BWD_BYTES = 1.5
STREAM_BWD_BYTES = 2.0
STREAM_CLASS = {
    "norm": "norm",
    "activation": "elementwise",
    "pool": "elementwise",
    "dropout": "elementwise",
    "other": "elementwise",
    "softmax": "softmax",
}
# BatchNorm's training forward is two passes (statistics, then normalise): PyTorch
# aten/src/ATen/native/cuda/Normalization.cuh, batch_norm_collect_statistics_kernel and
# batch_norm_transform_input_kernel: it reads its input twice.
BATCH_NORM_READS = 2.0
# ATen's native CUDA BatchNorm (what bf16 autocast runs, simdl.hosts.cuda.native_batch_norm), in
# the contiguous (NCHW) format, from PyTorch aten/src/ATen/native/cuda/Normalization.cuh (the
# torch 2.14 wheel's include/ATen/native/cuda/Normalization.cuh): batch_norm_stats_cuda_template
# and batch_norm_backward_cuda_template launch one block of MAX_BLOCK_SIZE = 512 threads per
# channel (dim3 blocks(input.size(1))), each block walking its channel's batch x positions
# plane alone. The statistics kernel reads the plane once (Welford); the backward kernel
# reads input and grad_output to reduce, then reads both again and writes grad_input: 5 passes.
# So their time is set by the channels' planes at one block's rate, not by the tensor's bytes
# at the GPU's bandwidth: with C below the resident blocks, a layer takes one plane's time
# whatever C is. The transform kernel (read, write) has a 2-D grid, priced as a stream at
# the profile's fraction of the norm rate. Resident 512-thread blocks per SM: 2048 threads
# per SM / 512 (CUDA C Programming Guide, compute capabilities 7.0, 8.0, 9.0; 8.6 has 1536).
NATIVE_BN_BACKWARD_PASSES = 5.0
NATIVE_BN_BLOCKS_PER_SM = 4
# Tensor-core GEMM tiles' operand loads, in multiples of the memory bandwidth: the A100's L2
# read bandwidth, 7219 GB/s (5120 bytes/clock, NVIDIA A100 Tensor Core GPU Architecture
# whitepaper, x 1.41 GHz boost; NVIDIA's "Ampere Architecture In-Depth" blog: 2.3x the V100's
# 2048 bytes/clock at 1.53 GHz, the same figure), over the A100 80GB's
# 1935 GB/s DRAM (datasheet) = 3.7. Tensor-core kernels stage operands in shared memory by asynchronous
# copies (cp.async / TMA) that overlap the MMAs, so the fp32 fit's operand_bandwidth (the
# SIMT kernels' load-issue limit on small tiles, below the DRAM rate on the P100) is not
# theirs; the A100's ratio is used for every GPU (no other L2 bandwidth in the GPU files).
TENSOR_OPERAND_BANDWIDTH = 3.7


def native_batch_norm_times(profile: KernelProfile, x_bytes, y_bytes, channels):
    """(statistics, transform, backward) kernel seconds of native BatchNorm rows reading
    ``x_bytes`` and writing ``y_bytes`` over ``channels`` channels: statistics and backward at
    one block per channel (waves of the GPU's resident blocks), never faster than the norm
    class's stream."""
    nb = profile.native_batch_norm
    if nb is None:
        raise ValueError("native_batch_norm_times needs a profile with native_batch_norm rates")
    waves = np.ceil(channels / (NATIVE_BN_BLOCKS_PER_SM * profile.sms))
    plane = waves * x_bytes / channels
    stats = np.maximum(plane / nb.stats_block_bandwidth, _stream(profile, "norm", x_bytes))
    transform = _stream(profile, "norm", (x_bytes + y_bytes) / nb.transform_fraction)
    moved = NATIVE_BN_BACKWARD_PASSES * plane
    bwd = np.maximum(moved / nb.backward_block_bandwidth, _stream(profile, "norm", NATIVE_BN_BACKWARD_PASSES * x_bytes))
    return stats, transform, bwd


def _scale(profile: KernelProfile, path: str) -> float:
    key = "bf16" if path == "fp16" else path
    return dict(profile.tensor_scale).get(key, 1.0)


def _gemm(profile, cls, path, M, N, K, nbytes, element_bytes, images=1.0):
    hw = profile.hardware(path)
    p = profile.param(cls)
    if path != "fp32":
        # Tensor-core paths: the fp32 fit's compute efficiency times the GPU's measured large-GEMM
        # fraction on that path over its fp32 one (priors); unique bytes streamed at the
        # elementwise class's bandwidth, tile operands at TENSOR_OPERAND_BANDWIDTH.
        p = type(p)(
            **{
                **p.__dict__,
                "compute_efficiency": p.compute_efficiency * _scale(profile, path),
                "memory_efficiency": profile.param("elementwise").memory_efficiency,
                "operand_bandwidth": TENSOR_OPERAND_BANDWIDTH,
            }
        )
    if cls == "conv":  # the conv curve prices fp32 3x3 stride-1 rows only
        return conv_time(hw, p, M, N, K, nbytes, images=images, floor=DEVICE_FLOOR_S, element_bytes=element_bytes)
    return gemm_time(
        hw,
        p,
        1.0,
        M,
        N,
        K,
        nbytes,
        floor=DEVICE_FLOOR_S,
        element_bytes=element_bytes,
        tiles=TILES if path == "fp32" else TENSOR_TILES,
    )


def _stream(profile, cls, nbytes):
    return stream_time(profile.hardware("fp32"), profile.param(cls), nbytes, floor=DEVICE_FLOOR_S)


# Layout copies around tensor-core convolutions in PyTorch's default (NCHW, contiguous)
# memory format: cuDNN's tensor-core convolution kernels take NHWC operands (PyTorch tutorial
# "Channels Last Memory Format in PyTorch": channels last is the layout tensor cores run
# on), so each cuDNN call copies its NCHW operands to NHWC and its result back. The H200
# kernel profiles (lab/records/gpu-h200/kernels.jsonl.gz) show it: cuDNN's nchwToNhwcKernel
# and nhwcToNchwKernel around its sm90_xmma_*_nhwckrsc_nhwc kernels, about two of the first
# per one of the second, 166 for ResNet-18's 20 convolutions in one step (3 calls x 3
# operands each, the stem without data gradient: 177), while ResNet-50's 1x1 stride-1
# convolutions ran as cuBLAS / CUTLASS GEMMs on the NCHW tensors with no copy. A copy reads
# and writes its tensor once, priced as an elementwise kernel; a convolution whose read
# filter area is 1 (1x1 stride 1, or a patchify k x k stride k) is a plain GEMM and pays none.
# In ``channels_last`` (NHWC) the operands already are in the kernels' layout and no copy is
# made (the tutorial above: channels last runs the tensor-core kernels without the
# conversion). Depthwise / grouped (low-reuse) rows, fp32 SIMT convolutions and every other
# row are priced the same in both formats: no source here measures a difference for them.
GEMM_LIKE_AREA = (0.9, 1.1)


def _layout_copies(profile, in_bytes, out_bytes, filter_bytes, din, dw):
    """(forward, backward) seconds of the NCHW <-> NHWC copies of convolution rows: forward
    copies input, filter and output; the data gradient dY, filter and dX; the weight
    gradient input, dY and dW."""

    def copy(nbytes):
        return _stream(profile, "elementwise", 2.0 * nbytes)

    call = copy(in_bytes) + copy(filter_bytes) + copy(out_bytes)
    return call, np.where(din, call, 0.0) + np.where(dw, call, 0.0)


def implicit_gemm(table, batch: int):
    """(rows with FLOPs, M, N, K, read filter area) per row, from the table's columns."""
    ps, el = table.per_sample, table.dtype_bytes
    out_el = ps["write_bytes"] / el * batch
    fl = table.column("fwd_flops", batch)
    mm = (fl > 0) & (out_el > 0)
    K = np.where(mm, fl / (2 * np.maximum(out_el, 1)), 1.0)
    params = table.fixed["params"]
    N = np.where(
        params > 0, np.maximum(np.round(params / (K + 1)), 1), np.maximum(np.round(np.sqrt(out_el / batch)), 1)
    )
    N = np.minimum(N, np.maximum(out_el, 1))
    M = np.maximum(out_el / N, 1)
    # Filter area / groups / stride^2 = K x output positions / input elements.
    positions = out_el / batch / N
    area = np.where(ps["read_bytes"] > 0, K * positions * el / np.maximum(ps["read_bytes"], 1), 0)
    return mm, M, N, K, area


def kernel_row_times(
    table, batch: int, profile: KernelProfile, precision: str, activation_factor: float, memory_format="contiguous"
):
    """(forward, backward) device seconds per row; ``memory_format`` as simdl.workload.workload's."""
    cls = table.op_classes
    ps, fx = table.per_sample, table.fixed
    act = (ps["read_bytes"] + ps["write_bytes"]) * batch * activation_factor
    fbytes = act + fx["read_bytes"] + fx["write_bytes"]
    fwd = np.zeros(table.n_rows)
    bwd = np.zeros(table.n_rows)
    mm, M, N, K, area = implicit_gemm(table, batch)
    conv = mm & (cls == "conv")
    low = conv & (K <= LOW_REUSE_K) & (area < LOW_REUSE_AREA)
    dense = mm & ~low
    wino = conv & (area >= WINOGRAD_AREA[0]) & (area <= WINOGRAD_AREA[1])
    din = table.column("bwd_input_flops", batch) > 0
    dw = table.column("bwd_weight_flops", batch) > 0
    for kind, rows in (("conv", dense & (cls == "conv")), ("matmul", dense & (cls != "conv"))):
        if not rows.any():
            continue
        path = profile.path_of(precision, kind)
        curve = np.where(wino & (path == "fp32"), "conv", "gemm")
        for c in ("gemm", "conv"):
            r = rows & (curve == c)
            if not r.any():
                continue
            m, nn, k, b = M[r], N[r], K[r], fbytes[r]
            eb = 2.0 if path in ("fp16", "bf16") else 4.0
            fwd[r] = _gemm(profile, c, path, m, nn, k, b, eb, images=batch)
            if c == "conv":  # dX of a 3x3 stride-1 convolution is one with the channels swapped
                dgrad = _gemm(profile, c, path, m, k / FILTER_AREA, FILTER_AREA * nn, b, eb, images=batch)
            else:
                dgrad = _gemm(profile, c, path, m, k, nn, b, eb)
            wgrad = _gemm(profile, "gemm", path, k, nn, m, b, eb)
            bwd[r] = np.where(din[r], dgrad, 0.0) + np.where(dw[r], wgrad, 0.0)
        if kind == "conv" and path != "fp32" and memory_format == "contiguous":
            r = rows & ((area < GEMM_LIKE_AREA[0]) | (area > GEMM_LIKE_AREA[1]))
            a = ps["read_bytes"][r] * batch * activation_factor, ps["write_bytes"][r] * batch * activation_factor
            lf, lb = _layout_copies(profile, a[0], a[1], fx["read_bytes"][r], din[r], dw[r])
            fwd[r] += lf
            bwd[r] += lb
    stream = ~dense & (fx["fwd_kernels"] > 0)  # containers without kernels of their own cost nothing
    if stream.any():
        for name in sorted(set(cls[stream].tolist())):  # np.unique's order; it would import numpy.ma
            op = str(name)
            r = stream & (cls == op)
            stream_kind = "elementwise" if op == "conv" else STREAM_CLASS.get(op, "elementwise")
            b = fbytes[r]
            if op == "norm":
                bn = np.array([t.startswith("BatchNorm") for t in np.array(table.types)[r]])
                b = b + np.where(bn, (BATCH_NORM_READS - 1) * ps["read_bytes"][r] * batch * activation_factor, 0)
            # A low-reuse convolution streams at the profile's fraction of the elementwise rate.
            slow = profile.low_reuse_fraction if op == "conv" else 1.0
            fwd[r] = _stream(profile, stream_kind, b / slow)
            factor = ACTIVATION_BWD_BYTES if op in ("activation", "dropout") else STREAM_BWD_BYTES
            bwd[r] = np.where(fx["bwd_kernels"][r] > 0, _stream(profile, stream_kind, factor * b / slow), 0.0)
            if op == "norm" and profile.native_batch_norm is not None:
                _native_norm_rows(table, batch, profile, activation_factor, r, fwd, bwd)
    # The rest of a row's kernels (bias adds, the loss's several ops, ...) at the device floor.
    fwd += np.maximum(fx["fwd_kernels"] - 1, 0) * DEVICE_FLOOR_S
    bwd += np.maximum(fx["bwd_kernels"] - np.where(mm, din + dw, 1), 0) * DEVICE_FLOOR_S
    return fwd, bwd


def _native_norm_rows(table, batch, profile, activation_factor, r, fwd, bwd):
    """Replace, in place, the times of the BatchNorm rows among ``r`` (with channels: affine,
    2 parameters per channel) by the native kernels' (:func:`native_batch_norm_times`)."""
    ps, fx = table.per_sample, table.fixed
    bn = r & np.array([t.startswith("BatchNorm") for t in table.types]) & (fx["params"] > 0)
    if not bn.any():
        return
    x = ps["read_bytes"][bn] * batch * activation_factor
    y = ps["write_bytes"][bn] * batch * activation_factor
    stats, transform, b = native_batch_norm_times(profile, x, y, fx["params"][bn] / 2)
    fwd[bn] = stats + transform
    bwd[bn] = np.where(fx["bwd_kernels"][bn] > 0, b, 0.0)


def host_op_seconds(profile: KernelProfile) -> float:
    """Host seconds to issue one forward eager op on this GPU's kind of host."""
    return profile.param("elementwise").floor_s


def host_row_times(table, profile: KernelProfile):
    """(forward, backward) host seconds per row: what the CPU spends issuing the row's ops."""
    op = host_op_seconds(profile)
    fwd = table.fixed["fwd_kernels"] * op + HOST_MODULE_S
    bwd = table.fixed["bwd_kernels"] * op * HOST_BWD_FRACTION
    return fwd, bwd


def fed_by_host(kernel: np.ndarray, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row device seconds when the host issues the rows (in order) and the device runs
    each once issued: (seconds per row including the wait, of which waiting for the host).
    d_i = max(d_(i-1), H_i) + k_i with H_i the host's issue time of row i (its cumulative
    host time), so d_i = K_i + max_(j<=i)(H_j - K_(j-1))."""
    if kernel.size == 0:
        return kernel, kernel
    H = np.cumsum(host)
    Kc = np.cumsum(kernel)
    Kprev = np.concatenate([[0.0], Kc[:-1]])
    d = Kc + np.maximum(np.maximum.accumulate(H - Kprev), 0.0)
    per_row = np.diff(np.concatenate([[0.0], d]))
    return per_row, per_row - kernel
