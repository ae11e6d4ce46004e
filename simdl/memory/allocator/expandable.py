"""``expandable_segments:True``: segments that grow page by page (Note [Expandable Segments],
c10/cuda/CUDACachingAllocator.cpp, torch 2.14 source line).

Each stream and pool gets one segment of virtual address space (1 1/8 of the device's
memory); physical pages of 2 MiB (small pool) or 20 MiB (large pool) are mapped as
needed at the lowest address where the request fits (``find_expandable_block``,
``map_block``) and unmapped when the cache is released (``unmap_block``); a segment whose
pages are all unmapped is dropped. Best fit prefers the block whose size *including the
unmapped space after it* is smallest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from .blocks import K_LARGE_BUFFER, K_SMALL_BUFFER, UNLIMITED, Block, BlockPool

if TYPE_CHECKING:
    from .caching import CachingAllocator

NO_CAPACITY_SPACE = 1 << 50  # address space of a segment when the model has no device capacity


class ExpandableSegment:
    __slots__ = ("base", "size", "page")

    def __init__(self, base: int, size: int, page: int):
        self.base, self.size, self.page = base, size, page

    def up(self, addr: int) -> int:
        return self.base + -(-(addr - self.base) // self.page) * self.page

    def down(self, addr: int) -> int:
        return self.base + (addr - self.base) // self.page * self.page


def _allocatable(b: Block | None) -> TypeGuard[Block]:
    return b is not None and not b.allocated and b.event_count == 0 and not b.stream_uses


def _expandable_size(b: Block) -> int:
    return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)


def best_expandable(pool: BlockPool, i: int, stream: int) -> Block:
    """``get_free_block``'s walk: among the blocks from index ``i`` on, the first whose grown
    size is not beaten by the next one's."""
    b = pool.block(i)
    nxt = pool.at(i + 1)
    while (
        b.segment is not None
        and nxt is not None
        and nxt.stream == stream
        and _expandable_size(nxt) < _expandable_size(b)
    ):
        i += 1
        b, nxt = nxt, pool.at(i + 1)
    return b


def _find_block(a: "CachingAllocator", pool: BlockPool, stream: int, size: int) -> Block:
    def room(b: Block | None) -> bool:
        got = 0
        while got < size and _allocatable(b):
            got += b.size
            b = b.next
        return got >= size

    for c in pool.unmapped_of(stream):
        if _allocatable(c.prev):
            c = c.prev
        if room(c):
            return c
    page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
    cap = a.cfg.capacity_bytes
    space = cap + cap // 8 if cap < UNLIMITED else NO_CAPACITY_SPACE
    space = -(-space // page) * page
    seg = ExpandableSegment(a._next_addr, space, page)
    a._next_addr += space
    c = Block(seg.base, space, stream, pool.small, seg, mapped=False)
    pool.insert_unmapped(c)
    return c


def _map(a: "CachingAllocator", pool: BlockPool, b: Block, size: int) -> bool:
    seg = b.segment
    end = seg.up(b.addr + size)
    mapped = end - b.addr
    if a.total_mapped + mapped > a.cfg.capacity_bytes:
        return False
    pool.remove_unmapped(b)
    b.mapped = True
    if mapped < b.size:
        rest = Block(end, b.size - mapped, b.stream, b.small, seg, mapped=False)
        rest.prev, rest.next = b, b.next
        if b.next is not None:
            b.next.prev = rest
        b.next = rest
        pool.insert_unmapped(rest)
        b.size = mapped
    a._try_merge(b, b.prev, pool)
    a._try_merge(b, b.next, pool)
    pool.insert(b)
    a.total_mapped += mapped
    a.reserved.add(mapped)
    a.num_device_alloc += 1
    a._record("segment_map", end - mapped, mapped, b.stream)
    return True


def try_allocate(a: "CachingAllocator", pool: BlockPool, stream: int, size: int) -> Block | None:
    """``try_allocate_expandable_block``: map pages until a free block of ``size`` exists."""
    c = _find_block(a, pool, stream, size)
    if not c.mapped and not _map(a, pool, c, min(c.size, size)):
        return None
    while c.size < size:
        nxt = c.next
        if nxt is None:  # the segment ends before the request fits
            return None
        if not _map(a, pool, nxt, min(size - c.size, nxt.size)):
            return None
        c = nxt
    pool.remove(c)
    return c


def unmap_block(a: "CachingAllocator", pool: BlockPool, b: Block) -> None:
    """``unmap_block``: return the whole pages inside a cached block; drop an empty segment."""
    seg = b.segment
    begin, end = seg.up(b.addr), seg.down(b.addr + b.size)
    if end <= begin:
        return
    pool.remove(b)
    if begin > b.addr:
        before = Block(b.addr, begin - b.addr, b.stream, b.small, seg)
        before.prev, before.next = b.prev, b
        if b.prev is not None:
            b.prev.next = before
        b.prev = before
        pool.insert(before)
    if end < b.addr + b.size:
        after = Block(end, b.addr + b.size - end, b.stream, b.small, seg)
        after.prev, after.next = b, b.next
        if b.next is not None:
            b.next.prev = after
        b.next = after
        pool.insert(after)
    b.addr, b.size, b.mapped = begin, end - begin, False
    a._try_merge(b, b.prev, pool)
    a._try_merge(b, b.next, pool)
    pool.insert_unmapped(b)
    a.total_mapped -= end - begin
    a.reserved.sub(end - begin)
    a.num_device_free += 1
    a._record("segment_unmap", begin, end - begin, b.stream)
    if not b.is_split():  # release_expandable_segment
        pool.remove_unmapped(b)
