"""The memoised memory estimates cannot hand one configuration's memory to another.

The analytic engine keeps each rank's memory estimate (simdl.analytic.engine._memory) and
each caching-allocator replay (simdl.memory.cuda._replay) for every later prediction and
sweep point that reads the same inputs. Each variant below differs from the base in one
thing the memory model reads (the batch, the precision, FSDP's sharding, the shard size, the
GPU's memory, the CUDA version, the allocator options); predicted after the base, from warm
caches, one by one and in a sweep, its memory must be what it is from empty caches, and
must differ from the base's (else the variant would not test the key).
"""

from __future__ import annotations

import importlib

import pytest

import simdl
import simdl.analytic.engine as engine
import simdl.memory.cuda as cuda
from simdl.explore.grid import to_call
from simdl.explore.whatif import derive_cluster

sweep_mod = importlib.import_module("simdl.explore.sweep")

BASE = dict(model="resnet50", strategy="fsdp-full", gpus=16, batch_size=32, cluster="dgx-a100")
VARIANTS = {
    "batch": dict(batch_size=64),
    "precision": dict(precision="bf16"),
    "sharding": dict(strategy="fsdp-grad_op"),
    "shard size": dict(gpus=64),
    "GPU memory": dict(gpu="A100-SXM4-40GB"),  # a what-if override: the dgx-a100 nodes with 40 GB GPUs
    "CUDA version": dict(cuda="11"),
    "allocator": dict(cuda_alloc_conf="expandable_segments:True"),
}
MEMORY = (
    "peak_memory_bytes",
    "peak_tensor_bytes",
    "max_memory_allocated_bytes",
    "max_memory_reserved_bytes",
    "memory_capacity_bytes",
    "fits_in_memory",
    "memory_breakdown_bytes",
    "device_memory_bytes",
)


def _memory(params: dict) -> dict:
    kwargs, over = to_call(params)
    if over:
        kwargs["cluster"] = derive_cluster(kwargs["cluster"], **over)
    r = simdl.predict(**kwargs)
    return {f: getattr(r, f) for f in MEMORY}


def _cold(params: dict) -> dict:
    engine._memo.store.clear()
    cuda._replay.cache_clear()
    return _memory(params)


@pytest.fixture(scope="module")
def cold() -> dict[str, dict]:
    out = {name: _cold(dict(BASE, **v)) for name, v in VARIANTS.items()}
    out["base"] = _cold(BASE)
    return out


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_variant_predicted_after_the_base_has_its_own_memory(cold, name):
    variant = dict(BASE, **VARIANTS[name])
    assert cold[name] != cold["base"], f"{name}: the variant does not change the memory; it tests nothing"
    _cold(BASE)  # the base's estimate and replay in the caches
    assert _memory(variant) == cold[name]
    # and the other way round: the variant first, then the base
    assert _memory(BASE) == cold["base"]


def test_a_sweep_of_the_variants_rows_have_their_own_memory(cold):
    engine._memo.store.clear()
    cuda._replay.cache_clear()
    points = [dict(BASE)] + [dict(BASE, **v) for v in VARIANTS.values()]
    rows = simdl.sweep(points, executor="serial", progress=False, as_frame=False)
    names = ["base", *VARIANTS]
    for name, row in zip(names, rows):
        assert row["error"] is None, (name, row["error"])
        for f in ("peak_memory_bytes", "max_memory_allocated_bytes", "max_memory_reserved_bytes", "fits_in_memory"):
            assert row[f] == cold[name][f], (name, f)
        for k, v in cold[name]["memory_breakdown_bytes"].items():
            assert row[f"memory_{k}_bytes"] == v, (name, k)


def test_link_variants_share_one_estimate():
    """What the memo is for: points that differ only in links compute one estimate."""
    engine._memo.store.clear()
    cuda._replay.cache_clear()
    calls = []
    real = engine._memo.fn
    engine._memo.fn = lambda *a: calls.append(1) or real(*a)
    try:
        rows = simdl.sweep(dict(BASE, nic_Gb_per_s=[25, 100, 400]), executor="serial", progress=False, as_frame=False)
    finally:
        engine._memo.fn = real
    assert len(rows) == 3 and len(calls) == 1
    assert len({r["peak_memory_bytes"] for r in rows}) == 1
