"""The GPU kernel model: its shape rules, the kernels: blocks it reads, and its use in predict."""

from __future__ import annotations

import numpy as np
import pytest

from simdl import predict
from simdl.cluster import allocate
from simdl.cluster.spec import load_gpu
from simdl.costs.gpu_kernels import GemmParams, Hardware, StreamParams, gemm_time, stream_time
from simdl.costs.gpu_profile import parse_kernels
from simdl.costs.gpu_rows import fed_by_host
from simdl.errors import SimdlError

HW = Hardware(sms=108, peak_flops=19.5e12, memory_bandwidth=1.555e12)
GEMM = GemmParams(
    compute_efficiency=0.9,
    memory_efficiency=0.5,
    operand_bandwidth=3.0,
    tile_setup_s=5e-6,
    floor_power=1.0,
    floor_s=2e-5,
)
STREAM = StreamParams(memory_efficiency=0.8, fill_latency_s=5e-6, floor_s=2e-5, floor_power=1.0)


def test_wave_quantisation_steps_at_a_full_wave():
    # 108 SMs x 1 tile of 128x128: one more tile row than fills a wave doubles the waves of
    # that tile; the fastest tile choice must not get cheaper with more work.
    t = gemm_time(HW, GEMM, 1, np.array([128 * 108, 128 * 109]), 128, 4096, 1.0)
    assert t[1] > t[0]
    sizes = np.arange(64, 8192, 64)
    times = gemm_time(HW, GEMM, 1, sizes, 1024, 1024, 1.0)
    assert np.all(np.diff(times) >= -1e-12)


def test_large_gemm_approaches_its_compute_efficiency():
    n = 8192
    t = gemm_time(HW, GEMM, 1, n, n, n, 3 * 4 * n * n, floor=0.0)
    achieved = 2 * n**3 / t / HW.peak_flops
    assert 0.7 * GEMM.compute_efficiency < achieved <= GEMM.compute_efficiency


def test_split_k_speeds_up_a_skinny_long_product():
    # 1 tile, K = 50k: without split-K one SM does it all.
    skinny = gemm_time(HW, GEMM, 1, 32, 32, 50_000, 4 * (32 * 50_000 * 2), floor=0.0)
    one_sm = 2 * 32 * 32 * 50_000 / (HW.peak_flops * GEMM.compute_efficiency / (HW.sms * 8))
    assert skinny < 0.2 * one_sm


def test_batched_tiles_price_only_the_batched_calls():
    from simdl.costs.kernel_fit import KernelFit

    # 64 products of 128 x 8 (K = 512): the 128x128 tile computes 16 times the output it
    # keeps, so restricting batched calls to it makes them slower; a B = 1 call is unchanged.
    shapes = {k: np.array(v, dtype=float) for k, v in dict(B=[64, 1], M=[128, 128], N=[8, 8], K=[512, 512]).items()}
    shapes["bytes"] = 4 * shapes["B"] * (shapes["M"] * shapes["K"] + shapes["K"] * shapes["N"])
    free = KernelFit("gemm").predict_with(GEMM, shapes, HW)
    big = KernelFit("gemm", batched_tiles=((128, 128, 1),)).predict_with(GEMM, shapes, HW)
    assert big[0] > free[0] and big[1] == free[1]


def test_conv_is_the_faster_of_implicit_gemm_and_winograd():
    from simdl.costs.gpu_kernels import conv_time

    # 64 images of 28 x 28 outputs, 128 -> 128 channels: Winograd F(4x4, 3x3) runs 36
    # products over 64 x 7 x 7 tiles, its transforms streamed after (added, not overlapped).
    M, N, K, nbytes, images = 64 * 28 * 28, 128, 128 * 9, 4e7, 64
    implicit = gemm_time(HW, GEMM, 1, M, N, K, nbytes, floor=0.0, split_k=False)
    T, cin = images * 7 * 7, 128
    transformed = 36 * 4 * (T * cin + cin * N + T * N)
    products = gemm_time(HW, GEMM, 36, T, N, cin, transformed, floor=0.0, split_k=False)
    winograd = products + (nbytes + transformed) / (HW.memory_bandwidth * GEMM.memory_efficiency)
    t = conv_time(HW, GEMM, M, N, K, nbytes, images=images, floor=0.0)
    assert t == pytest.approx(min(implicit, winograd))
    # A long reduction over few output tiles is not split: one image of 5 x 5 outputs.
    small = conv_time(HW, GEMM, 25, 1355, 1227 * 9, 4e7, images=1, floor=0.0)
    assert small > 5 * gemm_time(HW, GEMM, 1, 25, 1355, 1227 * 9, 4e7, floor=0.0)


def test_streaming_kernel_floor_and_bandwidth_limit():
    # A tiny call: the floor plus the fill latency (the half-bandwidth bytes at the full rate).
    small = stream_time(HW, STREAM, 4.0)
    latency = STREAM.fill_latency_s
    assert small == pytest.approx(STREAM.floor_s + latency, rel=1e-3)
    big = 4e9
    t = stream_time(HW, STREAM, big, floor=0.0)
    assert t == pytest.approx(big / (HW.memory_bandwidth * STREAM.memory_efficiency), rel=0.01)


def test_host_stream_makes_device_wait_only_when_host_is_slower():
    kernel = np.array([5e-6, 5e-6, 5e-6])
    host = np.array([1e-6, 1e-6, 1e-6])
    per_row, wait = fed_by_host(kernel, host)
    # The host is ahead after its first op: the device waits only for the first issue.
    assert wait.sum() == pytest.approx(1e-6)
    # A host 10x slower than the kernels: the device finishes one kernel after the last issue.
    per_row, wait = fed_by_host(kernel, 10 * kernel)
    assert per_row.sum() == pytest.approx(10 * kernel.sum() + kernel[-1])
    assert wait.sum() == pytest.approx(per_row.sum() - kernel.sum())


def test_shipped_gpus_carry_a_kernels_block_with_its_kind():
    for name, kind in (
        ("A100-PCIe-80GB", "calibrated"),
        ("V100-SXM2", "calibrated"),
        ("A100-SXM4-80GB", "derived"),
        ("H100-SXM", "derived"),
        ("A10G", "derived"),
    ):
        k = load_gpu(name).kernels
        assert k is not None and k.kind == kind and k.source


def test_tf32_paths_follow_pytorch_defaults():
    a100 = load_gpu("A100-SXM4-80GB").kernels
    assert a100.path_of("fp32", "matmul") == "fp32" and a100.path_of("fp32", "conv") == "tf32"
    v100 = load_gpu("V100-SXM2").kernels  # no TF32 tensor cores
    assert v100.path_of("fp32", "conv") == "fp32" and v100.path_of("fp16-amp", "conv") == "fp16"


def test_bad_kernels_block_is_a_one_line_error():
    good = {
        "kind": "derived",
        "source": "x",
        "sm_count": 10,
        "gemm": dict(
            compute_efficiency=1, memory_efficiency=1, operand_bandwidth=1, tile_setup_s=1, floor_s=1, floor_power=1
        ),
        "conv": dict(
            compute_efficiency=1, memory_efficiency=1, operand_bandwidth=1, tile_setup_s=1, floor_s=1, floor_power=1
        ),
        **{
            c: dict(memory_efficiency=1, fill_latency_s=1, floor_s=1, floor_power=1)
            for c in ("elementwise", "norm", "softmax")
        },
    }
    peaks = {"fp32": 1.0, "tf32": 2.0, "bf16": 4.0, "fp16": 4.0}
    parse_kernels(good, "g.yaml", peaks, 1.0, {})
    for bad in (
        {**good, "kind": "guessed"},
        {**good, "gemm": {**good["gemm"], "floor_s": -1}},
        {k: v for k, v in good.items() if k != "norm"},
        {**good, "extra": 1},
        {**good, "low_reuse": {"fraction": 3, "kind": "calibrated", "source": "x"}},
        {**good, "tensor_core": {"fp8": 1.0, "kind": "calibrated", "source": "x"}},
    ):
        with pytest.raises(SimdlError) as e:
            parse_kernels(bad, "g.yaml", peaks, 1.0, {})
        assert "g.yaml" in str(e.value) and "\n" not in str(e.value)


def test_depthwise_convolutions_are_found_from_the_table_columns():
    from simdl.costs.gpu_rows import LOW_REUSE_AREA, LOW_REUSE_K, WINOGRAD_AREA, implicit_gemm
    from simdl.workload.library import load_workload

    def kinds(model):
        t = load_workload(model, "imagenet")
        mm, M, N, K, area = implicit_gemm(t, 8)
        conv = mm & (t.op_classes == "conv")
        low = conv & (K <= LOW_REUSE_K) & (area < LOW_REUSE_AREA)
        names = np.array(t.names)
        wino = conv & (area >= WINOGRAD_AREA[0]) & (area <= WINOGRAD_AREA[1])
        return names[low], names[wino]

    low, _ = kinds("mobilenet_v3_large")
    # MobileNetV3-Large: 15 inverted residuals, one depthwise convolution each (block.1.0, or
    # block.0.0 in the first, which has no expansion conv).
    assert len(low) == 15 and all(n.endswith((".block.1.0", "features.1.block.0.0")) for n in low)
    low, wino = kinds("resnet50")
    assert len(low) == 0 and all(n.endswith("conv2") for n in wino) and len(wino) >= 12


def test_gpu_prediction_uses_the_kernel_model_and_says_so():
    r = predict("resnet18", "ddp", 2, cluster="a100-80gb-nvlink")
    assert r.config["compute_source"].startswith("GPU kernel model")
    assert "allow_tf32" in r.config["assumed"]["math_path"]
    assert set(r.step_split_s) >= {"compute", "host_bound"}


def test_cifar_efficientnet_v2_l_step_on_a100_is_host_bound():
    # EfficientNet-V2-L's ~1,000 small CIFAR-size kernels per pass: the host issuing them
    # takes longer than the GPU runs them, so the device waits.
    r = predict("efficientnet_v2_l", "ddp", 1, cluster="a100-80gb-nvlink", batch_size=32)
    assert r.step_split_s["host_bound"] > 0.1 * r.iteration_time_s
    big = predict("resnet50", "ddp", 1, cluster="dgx-a100", dataset="imagenet", batch_size=256, precision="tf32")
    assert big.step_split_s["host_bound"] < 0.01 * big.iteration_time_s


def test_cpu_devices_keep_their_own_model():
    assert allocate("cpu-local", 1).spec.gpu.kernels is None


def test_tensor_core_convolutions_pay_nchw_nhwc_copies_except_gemm_like_ones(monkeypatch):
    import simdl.costs.gpu_rows as rows
    from simdl.workload.library import load_workload

    t = load_workload("resnet50", "imagenet")
    names = np.array(t.names)
    profile = allocate("a100-80gb-nvlink", 1).spec.gpu.kernels
    v100 = allocate("v100-dgx1", 1).spec.gpu.kernels
    with_copies = rows.kernel_row_times(t, 32, profile, "tf32", 1.0)
    simt = rows.kernel_row_times(t, 32, v100, "fp32", 1.0)
    monkeypatch.setattr(rows, "_layout_copies", lambda *a: (0.0, 0.0))
    without = rows.kernel_row_times(t, 32, profile, "tf32", 1.0)
    extra = with_copies[0] - without[0], with_copies[1] - without[1]
    three = np.array([n.endswith("conv2") for n in names])  # the 3x3 convolutions
    one = np.array([n.endswith(("conv1", "conv3")) and "layer" in n for n in names])  # 1x1 stride 1
    assert np.all(extra[0][three] > 0) and np.all(extra[1][three] > extra[0][three])
    assert np.all(extra[0][one] == 0) and np.all(extra[1][one] == 0)
    # On the fp32 SIMT path (no tensor cores) cuDNN runs NCHW kernels: no copies.
    assert np.array_equal(simt[0], rows.kernel_row_times(t, 32, v100, "fp32", 1.0)[0])
