"""The one-loop replay (simdl.memory.allocator.fast) against the reference
(CachingAllocator driven by replay.replay): every figure the replay returns is equal.

Sequences: the ones simdl.memory.cuda replays for a sample of shipped models and
strategies (captured as the tool builds them: library workspaces first, the capacity the
device leaves), under each PYTORCH_CUDA_ALLOC_CONF option the model reads, unbounded,
under pressure (release-and-retry runs) and too tight (out of memory); and seeded random
sequences over several streams with record_stream and stream completion.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

import simdl.memory.cuda as cuda
from simdl.cluster import allocate, load_cluster
from simdl.memory.allocator import AllocatorConfig
from simdl.memory.allocator.fast import replay_fast
from simdl.memory.allocator.replay import ALLOC, DONE, FREE, RECORD, Op, ReplayResult, replay
from simdl.memory.model import estimate_memory
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload

MiB = 1 << 20
SAMPLE = [  # (model, batch, strategy, knobs)
    ("resnet50", 64, "ddp", {}),
    ("vgg16", 32, "ddp", {}),
    ("vit_b_16", 16, "fsdp", {"sharding": "full"}),
    ("convnext_tiny", 32, "fsdp", {"sharding": "grad_op"}),
    ("densenet121", 16, "zero1", {}),
    ("resnet18", 32, "zero2", {}),
    ("vit_b_16", 8, "zero3", {}),
]
CONFS = {  # PYTORCH_CUDA_ALLOC_CONF settings the model follows (simdl.memory.allocconf)
    "default": AllocatorConfig(),
    "max_split_size_mb:20": AllocatorConfig(max_split_size_bytes=20 * MiB),
    "max_split_size_mb:64": AllocatorConfig(max_split_size_bytes=64 * MiB),
    "roundup_power2_divisions:2": AllocatorConfig(roundup_power2_divisions=2),
    "roundup_power2_divisions:8": AllocatorConfig(roundup_power2_divisions=8),
    "expandable_segments:True": AllocatorConfig(expandable_segments=True),
    "max_split_size_mb:32,roundup_power2_divisions:4": AllocatorConfig(
        max_split_size_bytes=32 * MiB, roundup_power2_divisions=4
    ),
}
FIELDS = ("max_allocated_bytes", "max_reserved_bytes", "max_requested_bytes", "num_alloc_retries")
FIELDS += ("segments_peak", "oom_at", "fragmentation")


def assert_same(ref: ReplayResult, fast: ReplayResult) -> None:
    for f in FIELDS:
        assert getattr(fast, f) == getattr(ref, f), f
    for curve in ("allocated", "reserved"):
        a, b = getattr(ref, curve), getattr(fast, curve)
        assert a.dtype == b.dtype and np.array_equal(a, b), curve
    assert (ref.oom is None) == (fast.oom is None)
    if ref.oom is not None:
        assert vars(fast.oom) == vars(ref.oom) and str(fast.oom) == str(ref.oom)


def both(ops: list[Op], cfg: AllocatorConfig, curves: bool = True) -> ReplayResult:
    ref = replay(ops, cfg, curves=curves)
    assert_same(ref, replay_fast(ops, cfg, curves=curves))
    return ref


@pytest.fixture(scope="module")
def captured() -> dict[str, list[Op]]:
    """The sequences simdl.memory.cuda replays, one per sample entry (the first replay each)."""
    seen: dict[str, list[Op]] = {}
    real = cuda.replay_fast
    mp = pytest.MonkeyPatch()
    for model, batch, strategy, knobs in SAMPLE:
        name = f"{model}-b{batch}-{strategy}{''.join('-' + str(v) for v in knobs.values())}"
        got: list[list[Op]] = []
        mp.setattr(cuda, "replay_fast", lambda ops, cfg, curves, got=got: got.append(ops) or real(ops, cfg, curves))
        cuda._replay.cache_clear()
        wl = Workload(table=load_workload(model, dataset="imagenet"), batch_size=batch, optimizer="adam")
        alloc = allocate(load_cluster("dgx-a100"), 8)
        estimate_memory(wl, build_plan(wl, alloc, StrategyConfig(strategy, **knobs)), alloc)
        seen[name] = [Op(*op) for op in got[0]]  # the tool replays plain (kind, key, size, stream) tuples
    mp.undo()
    cuda._replay.cache_clear()
    return seen


@pytest.mark.parametrize("conf", list(CONFS))
def test_shipped_sequences_give_equal_figures(captured, conf):
    cfg = CONFS[conf]
    for name, ops in captured.items():
        free = both(ops, cfg)
        assert free.oom_at is None, name
        pressed = replace(cfg, capacity_bytes=(free.max_allocated_bytes + free.max_reserved_bytes) // 2)
        both(ops, pressed)
        both(ops, pressed, curves=False)
        oom = both(ops, replace(cfg, capacity_bytes=free.max_allocated_bytes // 2))
        assert oom.oom_at is not None, name


def test_the_sample_exercises_retries_and_streams(captured):
    """The comparison above covers release-and-retry and FSDP's collective streams."""
    retried = []
    for ops in captured.values():
        free = replay(ops, curves=False)
        cap = (free.max_allocated_bytes + free.max_reserved_bytes) // 2
        retried.append(replay(ops, AllocatorConfig(capacity_bytes=cap), curves=False).num_alloc_retries)
    assert sum(r > 0 for r in retried) >= len(captured) // 2
    assert any(len({op.stream for op in ops}) == 3 for ops in captured.values())


def _random_ops(rng: random.Random, n: int) -> list[Op]:
    """Allocations of every size class on three streams, frees in any order,
    record_stream on other streams and stream completions."""
    sizes = (
        lambda: rng.randint(0, 600),
        lambda: rng.randint(1, MiB),
        lambda: rng.choice((MiB, MiB + 1, 10 * MiB - 512, 10 * MiB, 20 * MiB, 32 * MiB)),
        lambda: rng.randint(MiB + 1, 10 * MiB),
        lambda: rng.randint(10 * MiB, 120 * MiB),
        lambda: rng.uniform(1, 30 * MiB),
    )
    ops: list[Op] = []
    live: list[int] = []
    for key in range(n):
        r = rng.random()
        if r < 0.45 or not live:
            ops.append(Op(ALLOC, key, rng.choice(sizes)(), rng.choice((0, 0, 0, 1, 2))))
            live.append(key)
        elif r < 0.85:
            ops.append(Op(FREE, live.pop(rng.randrange(len(live)))))
        elif r < 0.95:
            ops.append(Op(RECORD, rng.choice(live), 0, rng.choice((0, 1, 2, 3))))
        else:
            ops.append(Op(DONE, None, 0, rng.choice((0, 1, 2, 3))))
    return ops


@pytest.mark.parametrize("seed", range(12))
def test_random_sequences_give_equal_figures(seed):
    rng = random.Random(seed)
    ops = _random_ops(rng, 3000)
    for cfg in CONFS.values():
        free = both(ops, cfg)
        for cap in (free.max_reserved_bytes * 9 // 10, free.max_reserved_bytes * 3 // 4, 300 * MiB):
            both(ops, replace(cfg, capacity_bytes=cap))


def test_cuda_memory_is_the_reference_replays(monkeypatch):
    """The tool's figures (curves included) with the fast path and with the reference."""
    wl = Workload(table=load_workload("vgg16", dataset="imagenet"), batch_size=64)
    alloc = allocate(load_cluster("a100-40gb-2node"), 8)
    plan = build_plan(wl, alloc, StrategyConfig("fsdp"))
    cfg = AllocatorConfig(max_split_size_bytes=64 * MiB)
    cuda._replay.cache_clear()
    fast = estimate_memory(wl, plan, alloc, curves=True, allocator=cfg).cuda
    monkeypatch.setattr(cuda, "replay_fast", lambda ops, cfg, curves: replay(ops, cfg, curves=curves))
    cuda._replay.cache_clear()
    ref = estimate_memory(wl, plan, alloc, curves=True, allocator=cfg).cuda
    cuda._replay.cache_clear()
    for f in ("max_allocated_bytes", "max_reserved_bytes", "device_bytes", "parts", "out_of_memory", "fragmentation"):
        assert getattr(fast, f) == getattr(ref, f), f
    for f in ("allocated", "reserved", "event_of_op"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


def test_a_divergence_is_caught():
    ops = _random_ops(random.Random(99), 400)
    ref = replay(ops)
    for f, v in (("max_reserved_bytes", ref.max_reserved_bytes + 512), ("segments_peak", ref.segments_peak - 1)):
        with pytest.raises(AssertionError):
            assert_same(ref, replace(ref, **{f: v}))
    bent = ref.allocated.copy()
    bent[len(bent) // 2] += 1
    with pytest.raises(AssertionError):
        assert_same(ref, replace(ref, allocated=bent))


@pytest.mark.parametrize("ops", [[Op(ALLOC, "x", 10), Op(ALLOC, "x", 10)], [Op(ALLOC, "x", 10), Op("resize", "x")]])
def test_bad_sequences_fail_alike(ops):
    with pytest.raises(ValueError) as ref:
        replay(ops)
    with pytest.raises(ValueError) as fast:
        replay_fast(ops)
    assert str(fast.value) == str(ref.value)
