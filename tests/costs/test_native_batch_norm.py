"""BatchNorm under CUDA bf16 autocast priced on ATen's native kernels (simdl.costs.gpu_rows)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from simdl.analytic.costs import device_rates

from simdl.cluster import allocate, load_cluster, load_gpu
from simdl.costs.gpu_profile import parse_kernels
from simdl.costs.gpu_rows import kernel_row_times, native_batch_norm_times
from simdl.errors import SimdlError
from simdl.hosts import host_for
from simdl.workload.library import load_workload

ROOT = Path(__file__).resolve().parents[2]


def test_only_bf16_on_a_cuda_host_takes_the_native_kernels():
    gpu, cpu = (host_for(allocate(load_cluster(c), 1, None)) for c in ("h200", "cpu-local"))
    assert gpu.native_batch_norm("bf16")
    # fp16 autocast: fp16 input with the fp32 weight is cuDNN's case; fp32 / TF32 are cuDNN's.
    assert not any(gpu.native_batch_norm(p) for p in ("fp16-amp", "fp32", "tf32"))
    assert not any(cpu.native_batch_norm(p) for p in ("bf16", "fp16-amp", "fp32"))


@pytest.mark.parametrize("cluster", ["h200", "dgx-a100"])
def test_the_rates_keep_the_native_values_at_bf16_only(cluster):
    alloc = allocate(load_cluster(cluster), 1, None)
    assert device_rates(alloc, "bf16").kernels.native_batch_norm is not None
    for p in ("fp16-amp", "fp32"):
        assert device_rates(alloc, p).kernels.native_batch_norm is None


def test_the_h200_values_are_calibrated_and_others_carried_over():
    nb = load_gpu("H200").kernels.native_batch_norm
    assert nb.kind == "calibrated" and "gpu/resnet50/224px/b32/bf16" in nb.source
    other = load_gpu("A100-SXM4-80GB").kernels.native_batch_norm
    assert other.kind == "derived" and "carried over from the H200" in other.source
    assert other.stats_block_bandwidth == nb.stats_block_bandwidth


def test_native_rows_replace_only_the_batch_norm_rows():
    table = load_workload("resnet50", "imagenet")
    k = device_rates(allocate(load_cluster("h200"), 1, None), "bf16").kernels
    native = kernel_row_times(table, 128, k, "bf16", 0.5)
    cudnn = kernel_row_times(table, 128, dataclasses.replace(k, native_batch_norm=None), "bf16", 0.5)
    bn = np.array([t.startswith("BatchNorm") for t in table.types])
    for a, b in zip(native, cudnn):
        assert np.array_equal(a[~bn], b[~bn])
        assert a[bn].sum() > 2 * b[bn].sum()
    # ResNet-50 at batch 128 on an H200: the profiled native kernels took 30.0 ms in one step
    # (lab/records/gpu-h200 kernels.jsonl.gz); the model's within 15 % of it.
    total = native[0][bn].sum() + native[1][bn].sum()
    assert total == pytest.approx(29.86e-3, rel=0.15)


def test_a_layer_below_the_resident_blocks_takes_one_planes_time_whatever_its_channels():
    k = device_rates(allocate(load_cluster("h200"), 1, None), "bf16").kernels
    plane = 128 * 56 * 56 * 2.0
    s64, _, b64 = native_batch_norm_times(k, np.array([64 * plane]), np.array([64 * plane]), np.array([64.0]))
    s256, _, b256 = native_batch_norm_times(k, np.array([256 * plane]), np.array([256 * plane]), np.array([256.0]))
    assert s64 == pytest.approx(s256) and b64 == pytest.approx(b256)
    s2x, _, _ = native_batch_norm_times(k, np.array([1056 * plane]), np.array([1056 * plane]), np.array([1056.0]))
    assert s2x == pytest.approx(2 * s64)  # 1056 channels = two waves of 4 x 132 blocks


def test_a_native_block_names_its_keys():
    raw = dict(load_gpu("H200").kernels_raw)
    peaks = {"fp32": 1e12, "tf32": 1e12, "bf16": 1e12, "fp16": 1e12}
    bad = dict(raw, native_batch_norm={**raw["native_batch_norm"], "stats_GB_per_s": 1})
    with pytest.raises(SimdlError, match="stats_GB_per_s"):
        parse_kernels(bad, "x", peaks, 1e12, {})
    bad = dict(raw, native_batch_norm={"stats_block_GB_per_s": 1})
    with pytest.raises(SimdlError, match="kind"):
        parse_kernels(bad, "x", peaks, 1e12, {})


def test_the_fit_script_reproduces_the_h200_file():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "native_batch_norm.py"), "--write-yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    nb = load_gpu("H200").kernels.native_batch_norm
    assert f"stats_block_GB_per_s: {nb.stats_block_bandwidth / 1e9:.4g}," in out
    assert f"backward_block_GB_per_s: {nb.backward_block_bandwidth / 1e9:.4g}," in out
    assert f"transform_fraction: {nb.transform_fraction:.4g}," in out
