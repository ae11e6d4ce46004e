"""Peak tensor memory vs PyTorch's own trackers, computed here (TOLERANCE: 3% on the peak,
5% per category; see tests/memory/compare.py for both sides' origin).

Every zoo model is checked once against MemTracker (a batch and an optimizer each, in
turn: small and large batches, SGD with momentum and Adam); FSDPMemTracker on a set
covering residual, transformer, depthwise and plain CNNs in full, grad_op and hybrid
sharding, and FSDP2's no-shard stand-in (HSDP with one rank per shard). The whole grid (two batches x two optimizers x every model) is in
``benchmarks/memory_report.py``.
"""

from __future__ import annotations

import pytest

from .compare import PEAK_TOLERANCE, compare_fsdp, compare_single

pytestmark = pytest.mark.torch


def _check(c):
    print(f"{c.label}: simdl {c.ours:,.0f} B, PyTorch {c.ref:,.0f} B, error {c.error:+.3%}")
    assert abs(c.error) <= PEAK_TOLERANCE
    bad = {k: v for k, v in c.category_errors().items() if not v[1]}
    assert not bad, f"categories off: {bad}"


SINGLE = [
    ("mnist_cnn", 256, "adam"),
    ("mnist_cnn", 256, "adamw"),
    ("resnet18", 32, "sgd"),
    ("resnet18", 32, "momentum"),
    ("resnet50", 256, "adam"),
    ("vgg16", 32, "momentum"),
    ("convnext_tiny", 256, "momentum"),
    ("vit_b_32", 256, "adam"),
    ("vit_b_16", 32, "momentum"),
    ("mobilenet_v3_large", 256, "momentum"),
    # The peak at a squeeze-and-excitation block's out-of-place gradient sum.
    ("mobilenet_v3_large", 32, "momentum"),
    pytest.param("densenet121", 32, "adam", marks=pytest.mark.slow),
    pytest.param("efficientnet_v2_s", 256, "momentum", marks=pytest.mark.slow),
    pytest.param("efficientnet_v2_l", 32, "adam", marks=pytest.mark.slow),
    pytest.param("convnext_large", 256, "adam", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("model,batch,optimizer", SINGLE)
def test_single_rank_peak_matches_memtracker(model, batch, optimizer):
    _check(compare_single(model, batch, optimizer))


@pytest.mark.parametrize("model", ["resnet18", pytest.param("vit_b_32", marks=pytest.mark.slow)])
def test_activation_checkpointing_matches_memtracker(model):
    _check(compare_single(model, 64, "momentum", ac=True))


FSDP = [
    ("mnist_cnn", 128, "momentum", "full"),
    ("resnet18", 32, "adam", "full"),
    ("resnet18", 32, "momentum", "grad_op"),
    ("resnet18", 32, "momentum", "hybrid"),
    ("resnet18", 32, "momentum", "none"),
    ("vit_b_32", 64, "momentum", "none"),
    ("vit_b_32", 256, "adam", "full"),
    pytest.param("convnext_tiny", 32, "adam", "full", marks=pytest.mark.slow),
    pytest.param("mobilenet_v3_large", 256, "momentum", "full", marks=pytest.mark.slow),
    # The peak as backward starts, gathering the root again (resharded: reshard_root).
    pytest.param("densenet121", 32, "momentum", "full", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("model,batch,optimizer,sharding", FSDP)
def test_fsdp_peak_matches_fsdp_memtracker(model, batch, optimizer, sharding):
    _check(compare_fsdp(model, batch, optimizer, sharding=sharding))
