"""The allocator model against PyTorch's documented allocator behaviour.

Sources: c10/cuda/CUDACachingAllocator.cpp (the rules the cases spell out) and
test/test_cuda.py's allocator tests, whose sequences are replayed here:
test_record_stream, test_caching_allocator_record_stream_oom, test_allocator_settings
(roundup_power2_divisions) and test_max_split_expandable.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from simdl.memory.allocator import AllocatorConfig, CachingAllocator, OutOfMemory, allocation_size, round_size
from simdl.memory.allocator.replay import ALLOC, DONE, FREE, RECORD, Op, replay

MiB = 1 << 20
DEFAULT = AllocatorConfig()


@pytest.mark.parametrize("size,rounded", [(0, 512), (1, 512), (512, 512), (513, 1024), (4 * 1000, 4096)])
def test_sizes_round_up_to_512_bytes(size, rounded):
    # kMinBlockSize: "all sizes are rounded to at least 512 bytes"
    assert round_size(size, DEFAULT) == rounded


@pytest.mark.parametrize(
    "size,segment",
    [
        (512, 2 * MiB),
        (MiB, 2 * MiB),
        (MiB + 512, 20 * MiB),
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),
        (11 * MiB, 12 * MiB),
        (100 * MiB + 1, 102 * MiB),
    ],
)
def test_segment_sizes(size, segment):
    # get_allocation_size: small (<= 1 MiB) -> 2 MiB, < 10 MiB -> 20 MiB, else rounded to 2 MiB
    assert allocation_size(size) == segment


def test_small_requests_share_one_2mib_segment():
    a = CachingAllocator()
    blocks = [a.malloc(4) for _ in range(4096)]  # 4096 x 512 B = exactly 2 MiB
    assert a.allocated.current == 2 * MiB and a.reserved.current == 2 * MiB and a.segments.current == 1
    a.malloc(4)
    assert a.reserved.current == 4 * MiB  # the 4097th needs a second segment
    for b in blocks:
        a.free(b)
    assert a.largest_free_block() == 2 * MiB  # neighbours merged back into one block


def test_large_remainder_of_one_mib_or_less_is_not_split():
    a = CachingAllocator()
    b = a.malloc(19 * MiB + 512)  # >= 10 MiB: a segment of its own, rounded to 20 MiB
    # remaining 1 MiB - 512 B is not > kSmallSize: the block is not split and counts whole
    assert a.reserved.current == 20 * MiB and b.size == 20 * MiB and a.allocated.current == 20 * MiB
    assert a.requested.current == 19 * MiB + 512


def test_mid_size_requests_split_a_20mib_segment():
    a = CachingAllocator()
    x = [a.malloc(3 * MiB) for _ in range(6)]  # 6 x 3 MiB from one 20 MiB segment (2 MiB left)
    assert a.reserved.current == 20 * MiB and a.allocated.current == 18 * MiB
    assert [b.addr - x[0].addr for b in x] == [k * 3 * MiB for k in range(6)]
    a.malloc(3 * MiB)  # 2 MiB left is too small: a new 20 MiB segment
    assert a.reserved.current == 40 * MiB
    a.free(x[2])
    a.free(x[3])  # merges with x[2]'s block: one 6 MiB free block
    y = a.malloc(5 * MiB)
    assert y.addr == x[2].addr  # best fit: the 6 MiB hole (the other free block is 17 MiB)


def test_best_fit_and_streams():
    a = CachingAllocator()
    big, small = a.malloc(40 * MiB), a.malloc(12 * MiB)
    a.free(big)
    a.free(small)
    assert a.malloc(11 * MiB).addr == small.addr  # smallest cached block that fits
    # a block cached for stream 0 does not serve stream 1
    before = a.reserved.current
    a.malloc(30 * MiB, stream=1)
    assert a.reserved.current == before + 30 * MiB


def test_record_stream_delays_reuse_until_the_stream_finishes():
    # test_cuda.py test_record_stream: tmp on a side stream, used on the current stream
    side, current = 1, 0
    a = CachingAllocator()
    tmp = a.malloc(16, side)
    a.record_stream(tmp, current)
    addr = tmp.addr
    a.free(tmp)
    tmp2 = a.malloc(16, side)
    assert tmp2.addr != addr  # "allocation re-used to soon"
    a.stream_done(current)  # torch.cuda.current_stream().synchronize()
    tmp3 = a.malloc(16, side)
    assert tmp3.addr == addr  # "allocation not re-used"


def test_record_stream_blocks_are_freed_on_out_of_memory():
    # test_caching_allocator_record_stream_oom: 100 x 160 MiB, each recorded on a side stream
    # that never finishes; release_cached_blocks waits on the events instead of failing.
    n = 40 * 1024 * 1024 * 4
    ops = [Op(ALLOC, "y", n, 1)]
    for i in range(100):
        ops += [Op(ALLOC, i, n, 0), Op(RECORD, i, 0, 1), Op(FREE, i)]
    r = replay(ops, AllocatorConfig(capacity_bytes=1 << 30))
    assert r.oom_at is None and r.num_alloc_retries > 0
    assert r.max_reserved_bytes <= 1 << 30


def test_without_a_cache_to_release_it_runs_out_of_memory():
    a = CachingAllocator(AllocatorConfig(capacity_bytes=100 * MiB))
    a.malloc(60 * MiB)
    with pytest.raises(OutOfMemory):
        a.malloc(60 * MiB)
    assert a.num_ooms == 1


def test_release_cached_blocks_then_retry():
    a = CachingAllocator(AllocatorConfig(capacity_bytes=100 * MiB))
    x = a.malloc(60 * MiB)
    a.free(x)  # cached, unsplit
    a.malloc(80 * MiB)  # does not fit next to it: the cache is released and cudaMalloc retried
    assert a.reserved.current == 80 * MiB and a.num_alloc_retries == 1


def power2_div(size: int, div: int) -> int:
    """test_cuda.py test_allocator_settings' expected size for roundup_power2_divisions."""
    pow2 = 1
    while pow2 < size:
        pow2 *= 2
    if pow2 == size:
        return pow2
    step, ret = pow2 // 2 // div, pow2 // 2
    while ret < size:
        ret += step
    return ret


def test_roundup_power2_divisions():
    # test_allocator_settings: 21 Mi floats; plain, then roundup_power2_divisions:4
    nbytes = 4 * 21 * MiB
    a = CachingAllocator()
    a.malloc(nbytes)
    assert a.allocated.current == nbytes
    a.cfg = AllocatorConfig(roundup_power2_divisions=4)
    before = a.allocated.current
    a.malloc(nbytes)
    assert a.allocated.current - before == power2_div(nbytes, 4) == 96 * MiB
    a = CachingAllocator(AllocatorConfig(roundup_power2_divisions=2))
    a.malloc(4 * 100 * MiB)
    assert a.allocated.current == power2_div(4 * 100 * MiB, 2)


def test_max_split_size_keeps_oversize_blocks_whole():
    a = CachingAllocator(AllocatorConfig(max_split_size_bytes=40 * MiB))
    x = a.malloc(60 * MiB)
    a.free(x)
    y = a.malloc(30 * MiB)  # below max_split_size: may not take the oversize block
    assert y.addr != x.addr and a.reserved.current == 60 * MiB + 30 * MiB
    z = a.malloc(45 * MiB)  # oversize request within kLargeBuffer of the cached block: takes it whole
    assert z.addr == x.addr and z.size == 60 * MiB


def test_max_split_expandable():
    # test_cuda.py test_max_split_expandable: 120 MiB allowed, max_split_size_mb:40,
    # expandable_segments toggled between the allocations.
    cfg = AllocatorConfig(capacity_bytes=120 * MiB, max_split_size_bytes=40 * MiB)
    a = CachingAllocator(cfg)
    x = a.malloc(40 * MiB)
    a.cfg = replace(cfg, expandable_segments=True)
    y = a.malloc(40 * MiB)
    a.cfg = cfg
    z = a.malloc(40 * MiB)
    assert a.reserved.current == 120 * MiB
    with pytest.raises(OutOfMemory):
        a.malloc(40 * MiB)
    for b in (x, y, z):
        a.free(b)
    a.malloc(120 * MiB)  # release_cached_blocks with an expandable segment in the free list
    assert a.reserved.current == 120 * MiB


def test_expandable_segments_grow_by_20mib_pages_and_unmap():
    a = CachingAllocator(AllocatorConfig(expandable_segments=True))
    xs = [a.malloc(13 * MiB) for _ in range(3)]  # 39 MiB in one segment: two 20 MiB pages
    assert a.reserved.current == 40 * MiB
    assert [b.addr - xs[0].addr for b in xs] == [0, 13 * MiB, 26 * MiB]
    a.malloc(2 * MiB)  # fits in the mapped 1 MiB tail plus one more page
    assert a.reserved.current == 60 * MiB
    for b in xs:
        a.free(b)
    a.empty_cache()  # the hole [0, 39 MiB) holds one whole page; the 2 MiB tensor keeps the next two
    assert a.reserved.current == 40 * MiB
    # the default allocator: three segments of 14 MiB (13 MiB rounded to 2 MiB), then a 20 MiB one
    b = CachingAllocator()
    for _ in range(3):
        b.malloc(13 * MiB)
    b.malloc(2 * MiB)
    assert b.reserved.current == 3 * 14 * MiB + 20 * MiB


def test_replay_curves_and_fragmentation():
    ops = [Op(ALLOC, "a", 3 * MiB), Op(ALLOC, "b", 3 * MiB), Op(FREE, "a"), Op(ALLOC, "c", 12 * MiB), Op(DONE)]
    r = replay(ops)
    # c (>= 10 MiB) takes the 14 MiB tail of the first segment by best fit and splits it
    assert list(r.allocated) == [3 * MiB, 6 * MiB, 3 * MiB, 15 * MiB, 15 * MiB]
    assert r.max_reserved_bytes == 20 * MiB and r.fragmentation == pytest.approx(0.25)


def test_snapshot_round_trip(tmp_path):
    import pickle

    from simdl.errors import SimdlError
    from simdl.memory.allocator.snapshot import load_snapshot, ops_from_trace, recorded_reserved, snapshot_of_replay

    ops = [Op(ALLOC, i, (i % 7 + 1) * 3 * MiB + 100, i % 2) for i in range(20)]
    ops += [Op(FREE, i) for i in range(0, 20, 3)] + [Op(ALLOC, "z", 40 * MiB)]
    snap, r = snapshot_of_replay(ops)
    actions = {e["action"] for e in snap["device_traces"][0]}
    assert {"alloc", "free_requested", "free_completed", "segment_alloc"} <= actions
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(snap))
    back = load_snapshot(str(p))
    again = replay(ops_from_trace(back["device_traces"][0]))
    assert again.max_reserved_bytes == r.max_reserved_bytes == recorded_reserved(back["device_traces"][0])[0]
    assert sum(s["total_size"] for s in snap["segments"]) == r.reserved[-1]
    p.write_bytes(pickle.dumps({"device_traces": [[]], "x": DEFAULT}))  # a pickled object: refused
    with pytest.raises(SimdlError, match="refers to"):
        load_snapshot(str(p))


def _check_invariants(a: CachingAllocator, live) -> None:
    """Every segment is a chain of contiguous blocks; no two free neighbours are left
    unmerged; allocated and reserved equal what the blocks say."""
    blocks = [b for p in (a.small, a.large) for b in p.blocks()] + list(live)
    heads = {}
    for b in blocks:
        h = b
        while h.prev is not None:
            h = h.prev
        heads[h.addr] = h
    reserved = allocated = 0
    for h in heads.values():
        b, total = h, 0
        while b is not None:
            total += b.size
            if b.mapped:
                reserved += b.size
            if b.allocated:
                allocated += b.size
            nxt = b.next
            if nxt is not None:
                assert b.addr + b.size == nxt.addr
                free = lambda x: not x.allocated and not x.event_count and not x.stream_uses  # noqa: E731
                assert not (free(b) and free(nxt) and b.mapped == nxt.mapped), f"unmerged {b} {nxt}"
            b = nxt
        if h.segment is None:
            assert h.addr in a.segment_ranges and a.segment_ranges[h.addr][0] == total
    assert allocated == a.allocated.current and reserved == a.reserved.current


@pytest.mark.parametrize(
    "cfg,pressure",
    [
        (AllocatorConfig(), False),
        (AllocatorConfig(expandable_segments=True), False),
        (AllocatorConfig(), True),
        (AllocatorConfig(expandable_segments=True), True),
        (AllocatorConfig(max_split_size_bytes=8 * MiB), True),
    ],
)
def test_invariants_hold_through_a_training_step(cfg, pressure):
    from dataclasses import replace as dc_replace

    from simdl.cluster import allocate, load_cluster
    from simdl.memory.model import memory_options, timeline_for
    from simdl.memory.sequence import allocation_sequence
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    table = load_workload("resnet18", dataset="imagenet")
    wl = Workload(table=table, batch_size=16, optimizer="adam")
    alloc = allocate(load_cluster("dgx-a100"), 8)
    plan = build_plan(wl, alloc, StrategyConfig("fsdp"))
    opts = memory_options(wl, plan, alloc)
    ops = allocation_sequence(
        timeline_for(wl, plan, alloc, opts),
        timeline_for(wl, plan, alloc, dc_replace(opts, first_iteration=True)),
        table,
        plan.details,
    )
    if pressure:  # less memory than the unbounded replay reserves: release-and-retry must run
        free_run = replay(ops, cfg)
        cfg = replace(cfg, capacity_bytes=(free_run.max_allocated_bytes + free_run.max_reserved_bytes) // 2)
    a = CachingAllocator(cfg)
    live = {}
    for i, op in enumerate(ops):
        if op.kind == ALLOC:
            live[op.key] = a.malloc(op.size, op.stream)
        elif op.kind == FREE:
            a.free(live.pop(op.key))
        if i % 97 == 0:
            _check_invariants(a, live.values())
    _check_invariants(a, live.values())
    assert (a.num_alloc_retries > 0) == pressure
    a.empty_cache()
    _check_invariants(a, live.values())
