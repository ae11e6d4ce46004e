"""Blocks, pools and size rules of PyTorch's CUDA caching allocator.

Facts from c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch, the torch 2.14 source line;
stored copy at commit 001074d25084) and c10/cuda/CUDAAllocatorConfig.h; the model keeps
the behaviour, not the code.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

# CUDACachingAllocator.cpp constants.
K_MIN_BLOCK_SIZE = 512  # kMinBlockSize: every size is rounded up to a multiple of 512 B
K_SMALL_SIZE = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
K_SMALL_BUFFER = 2 << 20  # kSmallBuffer: small requests are packed into 2 MiB segments
K_LARGE_BUFFER = 20 << 20  # kLargeBuffer: requests in (1, 10) MiB get a 20 MiB segment
K_MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: from 10 MiB on, a segment of the request's size
K_ROUND_LARGE = 2 << 20  # kRoundLarge: ... rounded up to 2 MiB

UNLIMITED = 1 << 62  # CUDAAllocatorConfig's max_split_size default (SIZE_MAX): no limit


@dataclass(frozen=True)
class AllocatorConfig:
    """``PYTORCH_CUDA_ALLOC_CONF`` options the model follows (CUDAAllocatorConfig.h).

    max_split_size_bytes: ``max_split_size_mb``; blocks this large are never split and
      serve only requests within ``kLargeBuffer`` of their size.
    roundup_power2_divisions: ``roundup_power2_divisions:N`` (one value for all sizes).
    expandable_segments: ``expandable_segments:True``: one segment per stream and pool
      that grows by 2 MiB (small pool) or 20 MiB (large pool) pages.
    capacity_bytes: what cudaMalloc may hand out in all (the device memory minus what
      the context, libraries and other processes hold; ``set_per_process_memory_fraction``).
    """

    max_split_size_bytes: int = UNLIMITED
    roundup_power2_divisions: int = 0
    expandable_segments: bool = False
    capacity_bytes: int = UNLIMITED


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    """CUDACachingAllocator.cpp ``roundup_power2_next_division``: the next of ``divisions``
    equal steps between the powers of two around ``size``."""
    if size <= 4 or divisions <= 1 or size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def round_size(size: int, cfg: AllocatorConfig) -> int:
    """``round_size``: at least 512 B, a multiple of 512 B (or the power-of-two division)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    d = cfg.roundup_power2_divisions
    if d > 1 and size > K_MIN_BLOCK_SIZE * d:
        return _roundup_power2_next_division(size, d)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment cudaMalloc is asked for when nothing cached fits."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Block:
    """A range of a segment: allocated, free (cached) or, in an expandable segment, unmapped."""

    __slots__ = (
        "addr",
        "size",
        "stream",
        "small",
        "allocated",
        "requested",
        "prev",
        "next",
        "segment",
        "mapped",
        "stream_uses",
        "event_count",
    )

    def __init__(self, addr: int, size: int, stream: int, small: bool, segment=None, mapped: bool = True):
        self.addr, self.size, self.stream, self.small = addr, size, stream, small
        self.allocated = False
        self.requested = 0
        self.prev: Block | None = None
        self.next: Block | None = None
        self.segment = segment  # ExpandableSegment or None
        self.mapped = mapped
        self.stream_uses: set[int] = set()
        self.event_count = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "alloc" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block({self.addr:#x}, {self.size}, stream={self.stream}, {state})"


class BlockPool:
    """Cached free blocks of one pool, ordered as ``BlockComparatorSize``: (stream, size, address);
    and the unmapped ranges of its expandable segments, by (stream, address)."""

    def __init__(self, small: bool):
        self.small = small
        self._keys: list[tuple[int, int, int]] = []
        self._blocks: dict[tuple[int, int, int], Block] = {}
        self._unmapped: list[tuple[int, int]] = []
        self._unmapped_blocks: dict[tuple[int, int], Block] = {}

    def insert(self, b: Block) -> None:
        k = (b.stream, b.size, b.addr)
        insort(self._keys, k)
        self._blocks[k] = b

    def remove(self, b: Block) -> None:
        k = (b.stream, b.size, b.addr)
        i = bisect_left(self._keys, k)
        assert i < len(self._keys) and self._keys[i] == k, f"{b} not in the pool"
        del self._keys[i]
        del self._blocks[k]

    def lower_bound(self, stream: int, size: int) -> int:
        return bisect_left(self._keys, (stream, size, -1))

    def at(self, i: int) -> Block | None:
        return self._blocks[self._keys[i]] if 0 <= i < len(self._keys) else None

    def block(self, i: int) -> Block:
        """The ``i``-th block by the pool's order (an index the caller found in range)."""
        return self._blocks[self._keys[i]]

    def blocks(self) -> list[Block]:
        return [self._blocks[k] for k in self._keys]

    def __len__(self) -> int:
        return len(self._keys)

    # unmapped ranges of expandable segments
    def insert_unmapped(self, b: Block) -> None:
        k = (b.stream, b.addr)
        insort(self._unmapped, k)
        self._unmapped_blocks[k] = b

    def remove_unmapped(self, b: Block) -> None:
        k = (b.stream, b.addr)
        self._unmapped.pop(bisect_left(self._unmapped, k))
        del self._unmapped_blocks[k]

    def unmapped_of(self, stream: int) -> list[Block]:
        i = bisect_left(self._unmapped, (stream, -1))
        out = []
        while i < len(self._unmapped) and self._unmapped[i][0] == stream:
            out.append(self._unmapped_blocks[self._unmapped[i]])
            i += 1
        return out


@dataclass
class Stat:
    """``Stat``: current and peak of one counter."""

    current: int = 0
    peak: int = 0

    def add(self, n: int) -> None:
        self.current += n
        if self.current > self.peak:
            self.peak = self.current

    def sub(self, n: int) -> None:
        self.current -= n
        assert self.current >= 0, "negative allocator stat"
