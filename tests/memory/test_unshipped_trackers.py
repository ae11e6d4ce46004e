"""The allocation sequence's live-bytes peak against PyTorch's trackers on torchvision
models simdl does not ship (tables traced now). TOLERANCE 3 %, as tests/memory/compare.py.
The ten-model, two-size table is benchmarks/memory_unshipped.py."""

from __future__ import annotations

import pytest

from .compare import PEAK_TOLERANCE, compare_fsdp, compare_single

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "simdl-cache"))


def _sequence_peak(spec, dataset, batch, optimizer, fsdp):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from memory_unshipped import sequence_peak

    return sequence_peak(spec, dataset, batch, optimizer, "fsdp" if fsdp else "ddp")


def test_resnet34_ddp_rank_matches_memtracker():
    spec = "torchvision.models:resnet34"
    c = compare_single(spec, 64, "momentum", dataset="cifar10")
    ours = _sequence_peak(spec, "cifar10", 64, "momentum", False)
    assert abs(ours / c.ref - 1) <= PEAK_TOLERANCE, (ours, c.ref)


def test_mobilenet_v2_fsdp2_rank_matches_fsdpmemtracker():
    spec = "torchvision.models:mobilenet_v2"
    c = compare_fsdp(spec, 64, "adam", world=4, dataset="cifar10")
    ours = _sequence_peak(spec, "cifar10", 64, "adam", True)
    assert abs(ours / c.ref - 1) <= PEAK_TOLERANCE, (ours, c.ref)
