"""Replay an allocation sequence through :class:`~.caching.CachingAllocator`.

A sequence is a list of :class:`Op` (or of plain ``(kind, key, size, stream)`` tuples):
``alloc`` (a tensor of ``size`` bytes on ``stream``, named by ``key``), ``free`` (of
``key``), ``record`` (``key.record_stream(stream)``) and ``done`` (the work queued on
``stream`` so far has finished). The result has what
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` would report and both
curves, one value after each op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

import numpy as np

from .blocks import AllocatorConfig
from .caching import CachingAllocator, OutOfMemory

ALLOC, FREE, RECORD, DONE = "alloc", "free", "record", "done"


class Op(NamedTuple):
    kind: str
    key: object = None
    size: int = 0
    stream: int = 0


@dataclass(frozen=True)
class ReplayResult:
    max_allocated_bytes: int
    max_reserved_bytes: int
    max_requested_bytes: int
    allocated: np.ndarray = field(repr=False)  # allocated bytes after each op
    reserved: np.ndarray = field(repr=False)
    num_alloc_retries: int = 0
    segments_peak: int = 0
    oom_at: int | None = None  # index of the op that ran out of memory (None: none did)
    oom: OutOfMemory | None = field(default=None, repr=False)

    @property
    def fragmentation(self) -> float:
        """Share of the reserved peak no tensor held at the allocated peak:
        ``1 - max_allocated / max_reserved``."""
        return 1.0 - self.max_allocated_bytes / self.max_reserved_bytes if self.max_reserved_bytes else 0.0


def replay(
    ops: Iterable[tuple],
    config: AllocatorConfig | None = None,
    allocator: CachingAllocator | None = None,
    curves: bool = True,
) -> ReplayResult:
    """Run ``ops`` in order; stop at the first out-of-memory (``oom_at`` says where)."""
    a = allocator or CachingAllocator(config)
    live: dict = {}
    alloc_c: list[int] = []
    res_c: list[int] = []
    oom_at, oom = None, None
    for i, (kind, key, size, stream) in enumerate(ops):
        try:
            if kind == ALLOC:
                if key in live:
                    raise ValueError(f"op {i}: {key!r} allocated twice")
                live[key] = a.malloc(size, stream)
            elif kind == FREE:
                a.free(live.pop(key))
            elif kind == RECORD:
                a.record_stream(live[key], stream)
            elif kind == DONE:
                a.stream_done(stream)
            else:
                raise ValueError(f"op {i}: unknown kind {kind!r}")
        except OutOfMemory as e:
            oom_at, oom = i, e
            break
        if curves:
            alloc_c.append(a.allocated.current)
            res_c.append(a.reserved.current)
    return ReplayResult(
        a.allocated.peak,
        a.reserved.peak,
        a.requested.peak,
        np.asarray(alloc_c, dtype=np.int64),
        np.asarray(res_c, dtype=np.int64),
        a.num_alloc_retries,
        a.segments.peak,
        oom_at,
        oom,
    )
