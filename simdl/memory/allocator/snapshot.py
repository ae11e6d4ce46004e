"""``torch.cuda.memory._snapshot()`` data: read a recorded allocation trace, write one.

The format is the one torch 2.14 documents in torch/cuda/memory.py (``_snapshot``'s
``Snapshot``/``Segment``/``Block``/``TraceEntry`` TypedDicts): ``{"segments": [...],
"device_traces": [[TraceEntry, ...], ...]}``, one trace per device, each entry with
``action`` (alloc, free_requested, free_completed, segment_alloc, segment_free,
segment_map, segment_unmap, oom, snapshot, annotate), ``addr``, ``size``, ``stream`` and
``frames``. ``torch.cuda.memory._dump_snapshot(path)`` pickles that dict.

* :func:`ops_from_trace`: a trace's requests (alloc, free_requested) as replay ops, so a
  recorded run can be replayed through the model;
* :func:`recorded_reserved`: the reserved bytes the *recorded* allocator held, from its
  segment events, to compare with the model's;
* :func:`snapshot_of_replay`: the model's own replay in the same format (it opens in
  https://pytorch.org/memory_viz).
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable

import numpy as np

from ...errors import SimdlError
from .blocks import AllocatorConfig
from .caching import CachingAllocator
from .replay import ALLOC, FREE, Op, ReplayResult, replay


class _PlainUnpickler(pickle.Unpickler):
    """Snapshots are dicts, lists, strings and numbers: refuse anything that names a class."""

    def find_class(self, module: str, name: str):  # noqa: D401
        raise SimdlError(f"memory snapshot refers to {module}.{name}; accepted: plain dicts, lists and numbers")


def load_snapshot(path: str) -> dict[str, Any]:
    """Read a ``_dump_snapshot`` pickle (plain data only)."""
    try:
        with open(path, "rb") as f:
            data = _PlainUnpickler(f).load()
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise SimdlError(f"{path}: not a memory snapshot pickle ({e})") from None
    if not isinstance(data, dict) or "device_traces" not in data:
        raise SimdlError(f"{path}: no device_traces; accepted: torch.cuda.memory._dump_snapshot output")
    return data


def ops_from_trace(trace: Iterable[dict]) -> list[Op]:
    """alloc -> ALLOC, free_requested -> FREE (addresses are reused: each allocation gets its own key)."""
    ops: list[Op] = []
    live: dict[int, tuple[int, int]] = {}
    n = 0
    for e in trace:
        a = e.get("action")
        if a == "alloc":
            key = (e["addr"], n)
            n += 1
            live[e["addr"]] = key
            ops.append(Op(ALLOC, key, int(e["size"]), int(e.get("stream", 0))))
        elif a == "free_requested" and e["addr"] in live:
            ops.append(Op(FREE, live.pop(e["addr"])))
    return ops


def recorded_reserved(trace: Iterable[dict]) -> tuple[int, np.ndarray]:
    """(peak, curve after each request) of the reserved bytes the recorded segment events imply."""
    cur, peak, curve = 0, 0, []
    for e in trace:
        a = e.get("action")
        if a in ("segment_alloc", "segment_map"):
            cur += int(e["size"])
            peak = max(peak, cur)
        elif a in ("segment_free", "segment_unmap"):
            cur -= int(e["size"])
        elif a in ("alloc", "free_requested"):
            curve.append(cur)
    return peak, np.asarray(curve, dtype=np.int64)


def snapshot_of_replay(ops: list[Op], config: AllocatorConfig | None = None) -> tuple[dict[str, Any], ReplayResult]:
    """Replay ``ops`` with trace recording on; the snapshot dict and the replay's result."""
    a = CachingAllocator(config)
    a.trace = []
    result = replay(ops, allocator=a)
    return {"segments": _segments(a), "device_traces": [a.trace]}, result


def _segments(a: CachingAllocator) -> list[dict[str, Any]]:
    """The cudaMalloc'd segments still held, with their free blocks (live ones are not tracked here)."""
    out = []
    free = sorted((b.addr, b) for p in (a.small, a.large) for b in p.blocks())
    for addr, (size, stream, small) in sorted(a.segment_ranges.items()):
        blocks: list[dict[str, Any]] = [
            {"address": b.addr, "size": b.size, "requested_size": 0, "state": "inactive", "frames": []}
            for x, b in free
            if addr <= x < addr + size
        ]
        inactive = sum(b["size"] for b in blocks)
        out.append(
            {
                "device": 0,
                "address": addr,
                "total_size": size,
                "stream": stream,
                "segment_type": "small" if small else "large",
                "allocated_size": size - inactive,
                "active_size": size - inactive,
                "blocks": blocks,
            }
        )
    return out
