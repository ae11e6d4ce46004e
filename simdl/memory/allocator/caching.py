"""A model of PyTorch's CUDA caching allocator (``DeviceCachingAllocator``).

Follows c10/cuda/CUDACachingAllocator.cpp (torch 2.14 source line, see :mod:`.blocks`):

* ``malloc``: process finished cross-stream events; round the size (``round_size``);
  pick the pool (small: <= 1 MiB); best fit among the pool's cached blocks *of the same
  stream* (``get_free_block``, with the ``max_split_size`` rules); else cudaMalloc a
  segment (``get_allocation_size``); on failure free one oversize cached block
  (``release_available_cached_blocks``, only with ``max_split_size_mb`` set), then every
  unsplit cached segment after waiting on all events (``release_cached_blocks``), and
  retry; then out of memory.
* ``should_split``: the rest of the block becomes a free block if it is >= 512 B (small
  pool, or expandable segments) or > 1 MiB and the request is below ``max_split_size``.
* ``free``: a block used on other streams (``record_stream``) waits for an event on each;
  otherwise it merges with free neighbours (``free_block``/``try_merge_blocks``).
* ``expandable_segments``: see :mod:`.expandable`.

Statistics as ``torch.cuda.memory_stats``: ``allocated_bytes`` counts block sizes
(rounded, including an unsplit remainder), ``reserved_bytes`` segment bytes,
``requested_bytes`` the sizes asked for. Addresses are modelled so that splitting and
merging happen as on the device; they are not the device's addresses.
"""

from __future__ import annotations

from collections import deque

from . import expandable
from .blocks import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_SMALL_SIZE,
    UNLIMITED,
    AllocatorConfig,
    Block,
    BlockPool,
    Stat,
    allocation_size,
    round_size,
)

SEGMENT_ALIGN = 2 << 20  # cudaMalloc'd segments start 2 MiB apart in the model's address space


class OutOfMemory(Exception):
    """The allocator could not satisfy a request even after freeing its cache."""

    def __init__(self, size: int, allocated: int, reserved: int, capacity: int):
        self.size, self.allocated, self.reserved, self.capacity = size, allocated, reserved, capacity
        super().__init__(
            f"CUDA out of memory: tried to allocate {size} B with {allocated} B allocated, "
            f"{reserved} B reserved of {capacity} B"
        )


class CachingAllocator:
    """One device's allocator; ``malloc``/``free``/``record_stream``/``stream_done``."""

    def __init__(self, config: AllocatorConfig | None = None):
        self.cfg = config or AllocatorConfig()
        self.small = BlockPool(True)
        self.large = BlockPool(False)
        self.allocated = Stat()
        self.reserved = Stat()
        self.requested = Stat()
        self.active = Stat()
        self.segments = Stat()
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.total_mapped = 0  # total_allocated_memory: bytes obtained from the driver
        self._next_addr = SEGMENT_ALIGN
        self._events: dict[int, deque] = {}  # stream -> deque of (seq, block)
        self._seq = 0
        self._done: dict[int, int] = {}  # stream -> last seq known complete
        self.segment_ranges: dict[int, tuple[int, int, bool]] = {}  # cudaMalloc'd: addr -> (size, stream, small)
        self.trace: list[dict] | None = None  # TraceEntry dicts, as _record_memory_history keeps them

    def _record(self, action: str, addr: int, size: int, stream: int, **extra) -> None:
        if self.trace is not None:  # callers on the hot path test self.trace first
            self.trace.append({"action": action, "addr": addr, "size": size, "stream": stream, "frames": [], **extra})

    # -- public ---------------------------------------------------------------------------
    def malloc(self, size: int, stream: int = 0) -> Block:
        self._process_events()
        orig = int(size)
        size = round_size(orig, self.cfg)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, stream, size)
        if block is None:
            block = self._alloc_block(pool, stream, size, alloc_size)
        if block is None and self._release_available_cached_blocks(pool, stream, size):
            block = self._alloc_block(pool, stream, size, alloc_size)
        if block is None and self._release_cached_blocks():
            block = self._alloc_block(pool, stream, size, alloc_size, retry=True)
        if not block:
            self.num_ooms += 1
            self._record("oom", 0, alloc_size, stream, device_free=max(self.cfg.capacity_bytes - self.total_mapped, 0))
            raise OutOfMemory(alloc_size, self.allocated.current, self.reserved.current, self.cfg.capacity_bytes)
        return self._alloc_found_block(block, pool, stream, size, orig)

    def free(self, block: Block) -> None:
        assert block.allocated, f"double free of {block}"
        block.allocated = False
        self.allocated.current -= block.size
        self.requested.current -= block.requested
        if self.trace is not None:
            self._record("free_requested", block.addr, block.requested, block.stream)
        if block.stream_uses:
            for s in block.stream_uses:  # insert_events: one event per stream it was used on
                self._seq += 1
                block.event_count += 1
                self._events.setdefault(s, deque()).append((self._seq, block))
            block.stream_uses = set()
        else:
            self._free_block(block)

    def record_stream(self, block: Block, stream: int) -> None:
        """``recordStream``: uses on the allocation stream need no event."""
        if stream != block.stream:
            block.stream_uses.add(stream)

    def stream_done(self, stream: int) -> None:
        """The work queued on ``stream`` so far has finished (its events are complete; the
        allocator notices at the next ``malloc``, as ``process_events`` queries them)."""
        self._done[stream] = self._seq

    def empty_cache(self) -> None:
        self._release_cached_blocks()

    # -- malloc's steps ---------------------------------------------------------------------
    def _process_events(self) -> None:
        for s, q in self._events.items():
            done = self._done.get(s, 0)
            while q and q[0][0] <= done:
                _, b = q.popleft()
                b.event_count -= 1
                if b.event_count == 0:
                    self._free_block(b)

    def _synchronize_and_free_events(self) -> None:
        for q in self._events.values():
            while q:
                _, b = q.popleft()
                b.event_count -= 1
                if b.event_count == 0:
                    self._free_block(b)

    def _get_free_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        i = pool.lower_bound(stream, size)
        b = pool.at(i)
        if b is None or b.stream != stream:
            return None
        if b.segment is not None:  # best fit by the size the block can grow to
            b = expandable.best_expandable(pool, i, stream)
        mss = self.cfg.max_split_size_bytes
        if size < mss and b.size >= mss:  # no oversize block for a smaller request
            return None
        if size >= mss and b.size >= size + K_LARGE_BUFFER:  # oversize: only within 20 MiB
            return None
        pool.remove(b)
        return b

    def _alloc_block(self, pool: BlockPool, stream: int, size: int, alloc_size: int, retry: bool = False):
        if retry:
            self.num_alloc_retries += 1
        if self.cfg.expandable_segments:
            return expandable.try_allocate(self, pool, stream, size)
        if self.total_mapped + alloc_size > self.cfg.capacity_bytes:
            return None
        addr = self._next_addr
        self._next_addr += -(-alloc_size // SEGMENT_ALIGN) * SEGMENT_ALIGN
        self.total_mapped += alloc_size
        self.reserved.add(alloc_size)
        self.segments.add(1)
        self.num_device_alloc += 1
        self.segment_ranges[addr] = (alloc_size, stream, pool.small)
        self._record("segment_alloc", addr, alloc_size, stream)
        return Block(addr, alloc_size, stream, pool.small)

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int, size: int) -> bool:
        mss = self.cfg.max_split_size_bytes
        if mss >= UNLIMITED:
            return False
        key = max(size, mss)
        i = pool.lower_bound(stream, key)
        b = pool.at(i)
        if b is not None and b.stream == stream:
            self._release_block(pool, b)
            return True
        released = 0  # no single block: free oversize ones from the largest down
        i -= 1
        while i >= 0 and released < key:
            b = pool.block(i)
            if b.size < mss or b.stream != stream:
                break
            released += b.size
            self._release_block(pool, b)
            i -= 1
        return released >= key

    def _release_cached_blocks(self) -> bool:
        self._synchronize_and_free_events()
        for pool in (self.large, self.small):
            for b in pool.blocks():
                if b.segment is not None:
                    expandable.unmap_block(self, pool, b)
                elif not b.is_split():
                    self._release_block(pool, b)
        return True

    def _release_block(self, pool: BlockPool, b: Block) -> None:
        if b.segment is not None:  # expandable: return its whole pages
            expandable.unmap_block(self, pool, b)
            return
        pool.remove(b)
        self.total_mapped -= b.size
        self.reserved.sub(b.size)
        self.segments.sub(1)
        self.num_device_free += 1
        self.segment_ranges.pop(b.addr, None)
        self._record("segment_free", b.addr, b.size, b.stream)

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.cfg.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.cfg.max_split_size_bytes and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: Block, pool: BlockPool, stream: int, size: int, orig: int) -> Block:
        if self._should_split(block, size):
            rest = block
            block = Block(rest.addr, size, stream, pool.small, rest.segment)
            block.prev, block.next = rest.prev, rest
            if rest.prev is not None:
                rest.prev.next = block
            rest.prev = block
            rest.addr += size
            rest.size -= size
            pool.insert(rest)
        block.allocated = True
        block.requested = orig
        if self.trace is not None:
            self._record("alloc", block.addr, orig, stream)
        st = self.allocated
        st.current += block.size
        if st.current > st.peak:
            st.peak = st.current
        st = self.requested
        st.current += orig
        if st.current > st.peak:
            st.peak = st.current
        self.active.current += 1
        return block

    def _free_block(self, block: Block) -> None:
        if self.trace is not None:
            self._record("free_completed", block.addr, block.requested, block.stream)
        pool = self.small if block.small else self.large
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)
        self.active.current -= 1

    @staticmethod
    def _try_merge(dst: Block, src: Block | None, pool: BlockPool) -> int:
        if src is None or src.allocated or src.event_count or src.stream_uses or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        return src.size

    # -- views -----------------------------------------------------------------------------
    def cached_bytes(self) -> int:
        """Reserved bytes no tensor holds (free blocks, and blocks waiting on events)."""
        return self.reserved.current - self.allocated.current

    def largest_free_block(self) -> int:
        sizes = [b.size for p in (self.small, self.large) for b in p.blocks() if b.mapped]
        return max(sizes, default=0)
