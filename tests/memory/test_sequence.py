"""The allocation sequence against the timeline it is built from (no torch).

Its live bytes must follow the timeline exactly (same peak, same end state), every free
must name a live tensor, and the per-parameter tensors must add up to the parameters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simdl.cluster import allocate, load_cluster
from simdl.memory.allocator.replay import ALLOC, FREE, replay
from simdl.memory.model import memory_options, timeline_for
from simdl.memory.sequence import ALL_GATHER_STREAM, REDUCE_SCATTER_STREAM, allocation_sequence
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload


def _sequence(model, strategy, batch, optimizer="adam", gpus=8, **cfg):
    table = load_workload(model, dataset="imagenet")
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer)
    alloc = allocate(load_cluster("dgx-a100"), gpus)
    plan = build_plan(wl, alloc, StrategyConfig(strategy, **cfg))
    opts = memory_options(wl, plan, alloc)
    steady = timeline_for(wl, plan, alloc, opts)
    first = timeline_for(wl, plan, alloc, replace(opts, first_iteration=True))
    return table, steady, allocation_sequence(steady, first, table, plan.details)


def _live_curve(ops):
    live, cur, out = {}, 0, []
    for op in ops:
        if op.kind == ALLOC:
            assert op.key not in live
            live[op.key] = op.size
            cur += op.size
        elif op.kind == FREE:
            cur -= live.pop(op.key)  # KeyError: a free of a tensor that is not live
        out.append(cur)
    return np.array(out), live


@pytest.mark.parametrize(
    "model,strategy,cfg",
    [
        ("resnet50", "ddp", {}),
        ("vit_b_16", "fsdp", {}),
        ("vgg16", "fsdp", {"sharding": "grad_op"}),
        ("resnet18", "fsdp", {"sharding": "none"}),
        ("mobilenet_v3_large", "ddp", {"gradient_as_bucket_view": True}),
        ("resnet18", "fsdp", {"cpu_offload": True}),
        ("convnext_tiny", "fsdp", {"sharding": "hybrid"}),
    ],
)
def test_live_bytes_follow_the_timeline(model, strategy, cfg):
    table, steady, ops = _sequence(model, strategy, 32, **cfg)
    curve, live = _live_curve(ops)
    peak = steady.peak()[0]
    # sizes are whole bytes: the sequence may differ from the timeline by a byte per tensor
    assert curve.max() == pytest.approx(peak, abs=len(ops))
    assert sum(live.values()) == pytest.approx(steady.baseline.sum(), abs=len(ops))


def test_parameters_are_one_tensor_each():
    table, steady, ops = _sequence("resnet50", "ddp", 8, optimizer="momentum")
    first = [op for op in ops[: len(table.params)] if op.kind == ALLOC]
    assert [op.size for op in first] == [p.numel * 4 for p in table.params]


def test_fsdp_collective_buffers_are_on_their_streams():
    table, steady, ops = _sequence("vit_b_16", "fsdp", 8)
    streams = {op.stream for op in ops if op.kind == ALLOC}
    assert {0, ALL_GATHER_STREAM, REDUCE_SCATTER_STREAM} <= streams


def test_resnet50_step_replays():
    import time

    table, steady, ops = _sequence("resnet50", "ddp", 256)
    t = time.process_time()
    r = replay(ops)
    took = time.process_time() - t
    assert r.oom_at is None and r.max_reserved_bytes >= r.max_allocated_bytes
    print(f"resnet50 b=256: {len(ops)} ops replayed in {took * 1e3:.1f} ms CPU")
