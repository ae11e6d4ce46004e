"""Microseconds per alloc/free op of the caching-allocator replay: the reference
(``CachingAllocator`` driven by ``replay.replay``) and the one-loop path
(``allocator.fast.replay_fast``, what ``simdl.memory.cuda`` runs), on the sequences the
tool replays for a few shipped models (8 ranks of dgx-a100), curves off as in a sweep.

Each figure is the fastest of ``--repeat`` timings (the machine may be shared); the two
paths' results are checked equal on every sequence. Prints figures; asserts nothing else.

Run: ``python benchmarks/allocator_replay.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simdl.memory.cuda as cuda  # noqa: E402
from simdl.cluster import allocate, load_cluster  # noqa: E402
from simdl.memory.allocator import AllocatorConfig  # noqa: E402
from simdl.memory.allocator.fast import replay_fast  # noqa: E402
from simdl.memory.allocator.replay import replay  # noqa: E402
from simdl.memory.model import estimate_memory  # noqa: E402
from simdl.strategies import StrategyConfig, build_plan  # noqa: E402
from simdl.workload.library import load_workload  # noqa: E402
from simdl.workload.workload import Workload  # noqa: E402

SAMPLE = [
    ("resnet50", 64, "ddp", {}),
    ("vgg16", 32, "ddp", {}),
    ("vit_b_16", 16, "fsdp", {"sharding": "full"}),
    ("convnext_tiny", 32, "fsdp", {"sharding": "grad_op"}),
    ("resnet18", 32, "zero2", {}),
]


def sequence(model: str, batch: int, strategy: str, knobs: dict):
    """The ops and allocator options of the first replay simdl.memory.cuda runs for the point."""
    got = []
    real = cuda.replay_fast
    cuda.replay_fast = lambda ops, cfg, curves: got.append((ops, cfg)) or real(ops, cfg, curves)
    try:
        cuda._replay.cache_clear()
        wl = Workload(table=load_workload(model, dataset="imagenet"), batch_size=batch, optimizer="adam")
        alloc = allocate(load_cluster("dgx-a100"), 8)
        estimate_memory(wl, build_plan(wl, alloc, StrategyConfig(strategy, **knobs)), alloc)
    finally:
        cuda.replay_fast = real
    return got[0]


def best_us_per_op(fn, ops, cfg: AllocatorConfig, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(ops, cfg, curves=False)
        best = min(best, time.perf_counter() - t)
    return best / len(ops) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="timings per figure (the fastest is kept)")
    a = ap.parse_args()
    print(f"{'sequence':34s} {'ops':>6s} {'conf':>9s} {'reference':>12s} {'fast':>10s} {'speed-up':>9s}")
    tot_ref = tot_fast = tot_ops = 0.0
    for model, batch, strategy, knobs in SAMPLE:
        ops, cfg = sequence(model, batch, strategy, knobs)
        free = replay(ops, replace(cfg, capacity_bytes=AllocatorConfig().capacity_bytes), curves=False)
        pressed = replace(cfg, capacity_bytes=(free.max_allocated_bytes + free.max_reserved_bytes) // 2)
        name = f"{model} b={batch} {strategy}{''.join(' ' + str(v) for v in knobs.values())}"
        for label, c in (("as run", cfg), ("pressure", pressed)):
            r, f = replay(ops, c, curves=False), replay_fast(ops, c, curves=False)
            assert (r.max_allocated_bytes, r.max_reserved_bytes, r.segments_peak, r.num_alloc_retries, r.oom_at) == (
                f.max_allocated_bytes,
                f.max_reserved_bytes,
                f.segments_peak,
                f.num_alloc_retries,
                f.oom_at,
            ), name
            t_ref = best_us_per_op(replay, ops, c, a.repeat)
            t_fast = best_us_per_op(replay_fast, ops, c, a.repeat)
            tot_ref, tot_fast, tot_ops = tot_ref + t_ref * len(ops), tot_fast + t_fast * len(ops), tot_ops + len(ops)
            print(f"{name:34s} {len(ops):6d} {label:>9s} {t_ref:9.2f} us {t_fast:7.2f} us {t_ref / t_fast:8.2f}x")
    print(
        f"{'all':34s} {int(tot_ops):6d} {'':>9s} {tot_ref / tot_ops:9.2f} us {tot_fast / tot_ops:7.2f} us "
        f"{tot_ref / tot_fast:8.2f}x  (us per alloc/free op, fastest of {a.repeat})"
    )


if __name__ == "__main__":
    main()
