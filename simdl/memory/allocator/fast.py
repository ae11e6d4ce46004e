"""The replay of :mod:`.replay` in one loop over plain lists, ints and tuples.

Same rules and same figures as :class:`~.caching.CachingAllocator` driven by
:func:`~.replay.replay` (the reference): every peak, curve, retry count, segment count and
out-of-memory; tests/memory/test_fast_replay.py holds the two equal. It keeps no trace
and no segment table, so :mod:`.snapshot` replays through the reference. With
``expandable_segments`` the reference runs.

A block is a list ``[size, prev, next, pool, state, stream, address, requested]`` keyed
by its address (``prev``/``next``: the neighbours' addresses, 0 for none; addresses start
at ``SEGMENT_ALIGN``, so 0 is no block). An allocated block keeps its address; a freed
one merging with its predecessor takes the predecessor's. A pool holds one stream's free
blocks of one size class, as the sorted list of ``size << 64 | address``:
``BlockComparatorSize``'s (stream, size, address) order within the stream (a request
only takes blocks of its own stream, so the streams need no order among themselves).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict, deque
from typing import Iterable

import numpy as np

from .blocks import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_SMALL_SIZE,
    UNLIMITED,
    AllocatorConfig,
    allocation_size,
    round_size,
)
from .caching import SEGMENT_ALIGN, OutOfMemory
from .replay import ALLOC, DONE, FREE, RECORD, ReplayResult, replay

FREE_STATE, ALLOCATED, WAITING = 0, 1, 2  # WAITING: freed, its record_stream events pending
SIZE, PREV, NEXT, POOL, STATE, STREAM, ADDR, REQUESTED = range(8)  # a block's fields
_SHIFT = 64  # a pool key is size << 64 | address
_MASK = (1 << _SHIFT) - 1
_NO_ROUNDUP = 1 << 80  # above any request: roundup_power2_divisions off


class _State:
    """What the rare paths (new segments, releases, stream events) share with the loop."""

    __slots__ = (
        "cfg",
        "blk",
        "small",
        "large",
        "reserved",
        "reserved_peak",
        "segments",
        "segments_peak",
        "next_addr",
        "retries",
        "uses",
        "events",
        "event_count",
        "done",
        "seq",
    )

    def __init__(self, cfg: AllocatorConfig):
        self.cfg = cfg
        self.blk: dict[int, list] = {}
        self.small: defaultdict[object, list[int]] = defaultdict(list)  # stream -> pool (<= 1 MiB)
        self.large: defaultdict[object, list[int]] = defaultdict(list)
        self.reserved = self.reserved_peak = self.segments = self.segments_peak = 0
        self.next_addr = SEGMENT_ALIGN
        self.retries = 0
        self.uses: dict[int, set] = {}  # allocated block -> streams it was recorded on
        self.events: dict[object, deque] = {}  # stream -> (seq, block address)
        self.event_count: dict[int, int] = {}
        self.done: dict[object, int] = {}
        self.seq = 0


def replay_fast(ops: Iterable[tuple], config: AllocatorConfig | None = None, curves: bool = True) -> ReplayResult:
    """:func:`~.replay.replay` of ``ops`` on a fresh allocator: the same result."""
    cfg = config or AllocatorConfig()
    if cfg.expandable_segments:
        return replay(ops, cfg, curves=curves)
    st = _State(cfg)
    alloc_c: list[int] = []
    res_c: list[int] = []
    oom_at, oom, alloc_peak, req_peak = _run(st, ops, alloc_c if curves else None, res_c)
    return ReplayResult(
        alloc_peak,
        st.reserved_peak,
        req_peak,
        np.asarray(alloc_c, dtype=np.int64),
        np.asarray(res_c, dtype=np.int64),
        st.retries,
        st.segments_peak,
        oom_at,
        oom,
    )


def _run(st: _State, ops: Iterable[tuple], alloc_c: list[int] | None, res_c: list[int]):
    """The ops in order until the first out of memory: (its index, the error, the allocated
    and requested peaks). ``alloc_c``/``res_c`` get the curves unless ``alloc_c`` is None."""
    cfg, blk, spools, lpools, uses, events = st.cfg, st.blk, st.small, st.large, st.uses, st.events
    mss = cfg.max_split_size_bytes
    div_from = K_MIN_BLOCK_SIZE * cfg.roundup_power2_divisions if cfg.roundup_power2_divisions > 1 else _NO_ROUNDUP
    live: dict = {}
    allocated = alloc_peak = requested = req_peak = 0
    for i, (kind, key, size, stream) in enumerate(ops):
        if kind == ALLOC:
            if key in live:
                raise ValueError(f"op {i}: {key!r} allocated twice")
            if events:
                _process_events(st)
            orig = size if size.__class__ is int else int(size)
            if orig < K_MIN_BLOCK_SIZE:
                rs = K_MIN_BLOCK_SIZE
            else:
                rs = round_size(orig, cfg) if orig > div_from else (orig + K_MIN_BLOCK_SIZE - 1) & -K_MIN_BLOCK_SIZE
            small = rs <= K_SMALL_SIZE
            keys = (spools if small else lpools)[stream]
            j = bisect_left(keys, rs << _SHIFT)
            b = None
            if j < len(keys):
                k = keys[j]
                found = k >> _SHIFT
                if found < mss or (rs >= mss and found < rs + K_LARGE_BUFFER):  # max_split_size rules
                    del keys[j]
                    b = blk[k & _MASK]
            if b is None:
                try:
                    b = _fresh_block(st, keys, stream, rs, small, allocated)
                except OutOfMemory as e:
                    return i, e, alloc_peak, req_peak
            rest = b[SIZE] - rs
            if (rest >= K_MIN_BLOCK_SIZE) if small else (rs < mss and rest > K_SMALL_SIZE):  # should_split
                addr, nxt = b[ADDR], b[NEXT]
                r = addr + rs
                blk[r] = [rest, addr, nxt, keys, FREE_STATE, stream, r, 0]
                if nxt:
                    blk[nxt][PREV] = r
                b[SIZE], b[NEXT] = rs, r
                insort(keys, rest << _SHIFT | r)
            b[STATE], b[REQUESTED] = ALLOCATED, orig
            live[key] = b
            allocated += b[SIZE]
            if allocated > alloc_peak:
                alloc_peak = allocated
            requested += orig
            if requested > req_peak:
                req_peak = requested
        elif kind == FREE:
            b = live.pop(key)
            allocated -= b[SIZE]
            requested -= b[REQUESTED]
            if uses and b[ADDR] in uses:
                _insert_events(st, b)
            else:
                _free_block(blk, b)
        elif kind == RECORD:
            b = live[key]
            if stream != b[STREAM]:
                uses.setdefault(b[ADDR], set()).add(stream)
        elif kind == DONE:
            st.done[stream] = st.seq
        else:
            raise ValueError(f"op {i}: unknown kind {kind!r}")
        if alloc_c is not None:
            alloc_c.append(allocated)
            res_c.append(st.reserved)
    return None, None, alloc_peak, req_peak


def _free_block(blk: dict[int, list], b: list) -> None:
    """``free_block``: merge with free neighbours (the predecessor first), back into the pool."""
    keys, addr, p, n = b[POOL], b[ADDR], b[PREV], b[NEXT]
    if p and (pb := blk[p])[STATE] == FREE_STATE:
        i = bisect_left(keys, k := pb[SIZE] << _SHIFT | p)
        assert i < len(keys) and keys[i] == k, f"block {p:#x} not in the pool"
        del keys[i]
        pb[SIZE] += b[SIZE]
        pb[NEXT] = n
        if n:
            blk[n][PREV] = p
        del blk[addr]
        addr, b = p, pb
    if n and (nb := blk[n])[STATE] == FREE_STATE:
        i = bisect_left(keys, k := nb[SIZE] << _SHIFT | n)
        assert i < len(keys) and keys[i] == k, f"block {n:#x} not in the pool"
        del keys[i]
        b[SIZE] += nb[SIZE]
        nn = b[NEXT] = nb[NEXT]
        if nn:
            blk[nn][PREV] = addr
        del blk[n]
    b[STATE] = FREE_STATE
    insort(keys, b[SIZE] << _SHIFT | addr)


def _insert_events(st: _State, b: list) -> None:
    """``insert_events``: one event per stream the block was used on; freed when all complete."""
    addr = b[ADDR]
    b[STATE] = WAITING
    for s in st.uses.pop(addr):
        st.seq += 1
        st.event_count[addr] = st.event_count.get(addr, 0) + 1
        st.events.setdefault(s, deque()).append((st.seq, addr))


def _event_done(st: _State, addr: int) -> None:
    c = st.event_count[addr] - 1
    if c:
        st.event_count[addr] = c
    else:
        del st.event_count[addr]
        _free_block(st.blk, st.blk[addr])


def _process_events(st: _State) -> None:
    for s, q in st.events.items():
        done = st.done.get(s, 0)
        while q and q[0][0] <= done:
            _event_done(st, q.popleft()[1])


def _new_segment(st: _State, keys: list[int], stream, alloc_size: int) -> list | None:
    """cudaMalloc of a segment: its one block, None when the device has no room."""
    if st.reserved + alloc_size > st.cfg.capacity_bytes:
        return None
    addr = st.next_addr
    st.next_addr += -(-alloc_size // SEGMENT_ALIGN) * SEGMENT_ALIGN
    assert st.next_addr <= _MASK, "model addresses past 2**64"
    st.reserved += alloc_size
    if st.reserved > st.reserved_peak:
        st.reserved_peak = st.reserved
    st.segments += 1
    if st.segments > st.segments_peak:
        st.segments_peak = st.segments
    b = st.blk[addr] = [alloc_size, 0, 0, keys, FREE_STATE, stream, addr, 0]
    return b


def _fresh_block(st: _State, keys: list[int], stream, size: int, small: bool, allocated: int) -> list:
    """``malloc`` when no cached block fits: a new segment, after freeing cache if need be."""
    alloc_size = allocation_size(size)
    b = _new_segment(st, keys, stream, alloc_size)
    if b is None and _release_available(st, keys, size):
        b = _new_segment(st, keys, stream, alloc_size)
    if b is None:
        _release_cached(st)
        st.retries += 1
        b = _new_segment(st, keys, stream, alloc_size)
    if b is None:
        raise OutOfMemory(alloc_size, allocated, st.reserved, st.cfg.capacity_bytes)
    return b


def _release(st: _State, keys: list[int], i: int) -> int:
    """``release_block`` of the pool's ``i``-th block: its size."""
    k = keys.pop(i)
    size, addr = k >> _SHIFT, k & _MASK
    st.reserved -= size
    st.segments -= 1
    b = st.blk[addr]
    if not (b[PREV] or b[NEXT]):
        del st.blk[addr]
    return size


def _release_available(st: _State, keys: list[int], size: int) -> bool:
    """``release_available_cached_blocks`` (only with ``max_split_size_mb``), in the stream's pool."""
    mss = st.cfg.max_split_size_bytes
    if mss >= UNLIMITED:
        return False
    want = max(size, mss)
    i = bisect_left(keys, want << _SHIFT)
    if i < len(keys):
        _release(st, keys, i)
        return True
    released = 0  # no single block: free oversize ones from the largest down
    i -= 1
    while i >= 0 and released < want:
        if keys[i] >> _SHIFT < mss:
            break
        released += _release(st, keys, i)
        i -= 1
    return released >= want


def _release_cached(st: _State) -> None:
    """``release_cached_blocks``: wait on every event, then free every unsplit cached segment."""
    for q in st.events.values():
        while q:
            _event_done(st, q.popleft()[1])
    blk = st.blk
    for pools in (st.large, st.small):
        for keys in pools.values():
            for i in range(len(keys) - 1, -1, -1):
                b = blk[keys[i] & _MASK]
                if not (b[PREV] or b[NEXT]):
                    _release(st, keys, i)
