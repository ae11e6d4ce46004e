"""The rank's allocation sequence: every tensor the step allocates and frees, in order.

Built from the memory timeline (:mod:`simdl.memory.timeline`), whose events are exact in
bytes and order but grouped (a row's gradients, a unit's unsharded parameters, the
optimizer's foreach outputs). Here each group becomes the tensors PyTorch allocates:

* parameters, buffers, optimizer state, the foreach Adam ``_foreach_sqrt`` outputs, a
  row's parameter gradients and FSDP2's unsharded parameters: one tensor per parameter
  (BatchNorm buffers: running mean, running var, num_batches_tracked);
* DDP: one tensor per gradient bucket (reducer.cpp allocates the buckets at construction);
* everything else (activations saved by a row, an output, an activation gradient, an
  all-gather output, a reduce-scatter buffer): one tensor per event.

A gradient changes category (autograd's output becomes ``.grad`` when AccumulateGrad
steals it) without an allocation. Frees name what they free by the event's label (a
unit's reshard frees that unit's parameters), else by size, else the most recent
tensors of the category.

Streams (FSDP2, torch 2.14 _fsdp_collectives.py): all-gather inputs/outputs are allocated
on the all-gather copy-in stream (``foreach_all_gather``), the reduce-scatter output (the
sharded gradient) on the reduce-scatter stream (``foreach_reduce``); the rest on the
default stream. FSDP2 keeps references instead of calling ``record_stream``, so frees
are immediate.

Two iterations are replayed: the first creates the optimizer state lazily, the second
is the steady state; allocator statistics count from the start, as torch's do.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import lru_cache

import numpy as np

from .allocator.replay import ALLOC, FREE, Op
from .rowtree import row_tree
from .timeline import COMM, OPT, PARAMS, Timeline

DEFAULT_STREAM, ALL_GATHER_STREAM, REDUCE_SCATTER_STREAM = 0, 1, 2
_new = tuple.__new__  # builds an Op from a ready tuple without NamedTuple's Python-level __new__
_STREAM_OF = (
    ("all-gather", ALL_GATHER_STREAM),
    ("prefetched all-gather", ALL_GATHER_STREAM),
    ("H2D shard", ALL_GATHER_STREAM),
    ("sharded gradient", REDUCE_SCATTER_STREAM),
    ("reduce-scatter scratch", REDUCE_SCATTER_STREAM),
)
BN_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
INT64_BYTES = 8


@lru_cache(maxsize=65536)
def _tag(label: str) -> str:
    """The name shared by an allocation's and its free's label."""
    label = re.sub(r"^(reshard|unsharded) ", "unsharded ", label)
    return re.sub(r"^prefetched ", "", label)


@lru_cache(maxsize=65536)
def _stream(label: str) -> int:
    for prefix, s in _STREAM_OF:
        if label.startswith(prefix):
            return s
    return DEFAULT_STREAM


class _Params:
    """Per-parameter sizes (bytes at fp32) by row and by FSDP unit."""

    def __init__(self, table, wrap: str | None):
        first: dict[str, int] = {}
        for i, name in enumerate(table.names):
            first.setdefault(name, i)
        self.all = np.array([p.numel * 4.0 for p in table.params])
        self.by_row: dict[int, list[float]] = defaultdict(list)
        for p in table.params:
            self.by_row[first.get(p.module, 0)].append(p.numel * 4.0)
        tree = row_tree(table)
        self.by_anchor: dict[int, list[int]] = defaultdict(list)  # anchor row -> rows it anchors
        for r in range(table.n_rows):
            self.by_anchor[int(tree.end[r]) - 1].append(r)
        self.by_unit: dict[str, list[float]] = {}
        if wrap is not None:
            from ..strategies.fsdp_units import fsdp_units

            units = fsdp_units(table, wrap)
            for u, unit in enumerate(units.units):
                rows = np.flatnonzero(units.row_unit == u)
                self.by_unit[unit.name or "root"] = [s for r in rows for s in self.by_row.get(int(r), [])]

    def row_split(self, anchor: int, total: float) -> list[float]:
        for r in self.by_anchor.get(anchor, []):
            sizes = self.by_row.get(r)
            if sizes and total > 0:
                scale = total / sum(sizes)
                # fp32 gradients, or 16-bit ones under FSDP's mixed precision
                if abs(scale - 1.0) < 1e-9 or abs(scale - 0.5) < 1e-9:
                    return [s * scale for s in sizes]
        return [total]

    def copies(self, total: float, shard: int) -> list[float]:
        """``total`` as whole copies of every (sharded) parameter: optimizer state, foreach outputs."""
        one = float(self.all.sum()) / shard
        c = int(round(total / one)) if one else 0
        if c < 1 or abs(c * one - total) > 1e-6 * total + 1.0:
            c, one = 1, float(self.all.sum())
        return list(np.tile(self.all / self.all.sum() * (total / c), c)) if one else [total]


def _split(sizes: list[float], total: float) -> list[float]:
    """``sizes`` scaled to add up to ``total`` (one tensor when they cannot)."""
    s = sum(sizes)
    return [x * total / s for x in sizes] if s > 0 and len(sizes) > 1 else [total]


class _Builder:
    def __init__(self, params: _Params, shard: int):
        self.p, self.shard = params, shard
        self.ops: list[Op] = []
        self.groups: dict[int, list] = {}  # group id -> [category, tag, bytes, kind, keys]
        self.by_cat: dict[int, list[int]] = defaultdict(list)
        self._next = 0

    def alloc(self, cat: int, tag: str, sizes: list[float], kind: int, stream: int) -> int:
        g = self._next
        self._next += 1
        keys = []
        for k, s in enumerate(sizes):
            if s > 0:
                key = (g, k)
                self.ops.append(_new(Op, (ALLOC, key, int(round(s)), stream)))
                keys.append(key)
        self.groups[g] = [cat, tag, float(sum(sizes)), kind, keys]
        self.by_cat[cat].append(g)
        return g

    def free_group(self, g: int) -> None:
        cat, _, _, _, keys = self.groups.pop(g)
        self.by_cat[cat].remove(g)
        self.ops.extend(_new(Op, (FREE, k, 0, 0)) for k in keys)

    def move(self, src: int, dst: int, amount: float, kind: int) -> bool:
        """Relabel live groups of ``amount`` bytes from category ``src`` to ``dst`` (no allocation)."""
        g = self._find(src, None, amount, kind)
        if g is None:
            return False
        self.by_cat[src].remove(g)
        self.groups[g][0] = dst
        self.by_cat[dst].append(g)
        return True

    def _find(self, cat: int, tag: str | None, amount: float, kind: int) -> int | None:
        tol = 1e-6 * amount + 1.0
        live = self.by_cat[cat]
        for want_tag in ((tag,) if tag is not None else ()) + (None,):
            for g in reversed(live):
                gc, gt, b, gk, _ = self.groups[g]
                if abs(b - amount) <= tol and (kind < 0 or gk == kind) and (want_tag is None or gt == want_tag):
                    return g
        return None

    def free(self, cat: int, tag: str, amount: float, kind: int) -> None:
        g = self._find(cat, tag, amount, kind)
        if g is not None:
            self.free_group(g)
            return
        left = amount  # several groups: the most recent of the category first
        tol = 1e-6 * amount + 1.0
        for g in list(reversed(self.by_cat[cat])):
            if left <= tol:
                break
            if kind >= 0 and self.groups[g][3] != kind:
                continue
            left -= self.groups[g][2]
            self.free_group(g)


def _kind(fixed: float, sharded: float) -> int:
    """0: a fixed-size tensor, 1: a sharded one, -1: either (a mixed free)."""
    if fixed and not sharded:
        return 0
    if sharded and not fixed:
        return 1
    return -1


def _baseline(b: _Builder, table, timeline: Timeline, first: Timeline, bucket_bytes, fsdp: bool):
    """Parameters, buffers and DDP buckets, as the model and DDP's reducer set them up."""
    kind = 1 if fsdp else 0
    # The rank's parameters as the timeline holds them (none on the GPU under CPU offload).
    on_gpu = float(timeline.baseline[PARAMS]) - table.buffer_bytes
    if on_gpu > 0:
        b.alloc(PARAMS, "params", _split(list(b.p.all), on_gpu), kind, DEFAULT_STREAM)
    bufs = []
    for m in table.modules:
        if m.type in BN_TYPES and m.params:
            c = m.params // 2
            bufs += [c * 4.0, c * 4.0, INT64_BYTES]
    rest = table.buffer_bytes - sum(bufs)
    if rest < 0:
        bufs, rest = [], table.buffer_bytes
    if bufs or rest > 0:
        b.alloc(PARAMS, "buffers", bufs + ([rest] if rest > 0 else []), 0, DEFAULT_STREAM)
    if bucket_bytes:
        b.alloc(COMM, "ddp buckets", [float(x) for x in bucket_bytes], 0, DEFAULT_STREAM)
    # What else the strategy holds before the first iteration (DeepSpeed's flat buffers: the
    # fp32 master partition and its optimizer state, the gradient partition, stage 3's ipg
    # bucket; simdl.strategies.zero_memory): one flat tensor per category, as DeepSpeed
    # allocates them flat. DDP's buckets are the comm baseline already.
    held = {COMM: sum(float(x) for x in bucket_bytes)} if bucket_bytes else {}
    for cat, amount in enumerate(first.baseline.tolist()):
        extra = amount - held.get(cat, 0.0)
        if cat != PARAMS and extra > 1e-6 * amount + 1.0:
            b.alloc(cat, "strategy buffers", [extra], kind, DEFAULT_STREAM)


def _events(b: _Builder, tl: Timeline) -> np.ndarray:
    """One iteration's events as allocations and frees; returns the index of the first op
    of each event (``len(events) + 1`` entries)."""
    d = tl.deltas.tolist()
    cats, fixed, sharded, rows = tl.category.tolist(), tl.fixed.tolist(), tl.sharded.tolist(), tl.row.tolist()
    labels = list(tl.labels)
    n = len(cats)
    starts = [0] * (n + 1)
    k = 0
    while k < n:
        starts[k] = len(b.ops)
        amount, cat, label = d[k], cats[k], labels[k]
        kind = _kind(fixed[k], sharded[k])
        if amount < 0 and k + 1 < n and labels[k + 1] == label and d[k + 1] == -amount and cats[k + 1] != cat:
            if b.move(cat, cats[k + 1], -amount, kind):  # AccumulateGrad: a new category, same storage
                starts[k + 1] = len(b.ops)
                k += 2
                continue
        if amount > 0:
            tag = _tag(label)
            if label == "gradients":
                sizes = b.p.row_split(rows[k], amount)
            elif label.startswith("unsharded ") and cat == PARAMS:
                sizes = _split(b.p.by_unit.get(label[len("unsharded ") :], []), amount)
            elif cat == OPT:  # lazy state, foreach outputs: one tensor per parameter and copy
                sizes = b.p.copies(amount, b.shard)
            else:
                sizes = [amount]
            b.alloc(cat, tag, sizes, kind, _stream(label))
        elif amount < 0:
            b.free(cat, _tag(label), -amount, kind)
        k += 1
    starts[n] = len(b.ops)
    return np.asarray(starts, dtype=np.int64)


def allocation_sequence(steady: Timeline, first: Timeline, table, details: dict, with_events: bool = False):
    """Allocations and frees of setup, a first iteration and a steady-state one.

    ``steady``/``first``: the rank's timelines without and with ``first_iteration`` (the
    first creates the optimizer state at its step); ``details``: the plan's (DDP buckets,
    FSDP wrap). ``with_events``: also return, for each op, the index of the steady
    iteration's timeline event it comes from (-1 for setup and the first iteration).
    """
    fsdp = "shard_size" in details
    b = _Builder(_Params(table, details.get("wrap", "block") if fsdp else None), steady.shard_size)
    buckets = details.get("bucket_bytes") if details.get("comm_buffer_bytes") else None
    _baseline(b, table, steady, first, buckets, fsdp)
    _events(b, first)
    before = len(b.ops)
    starts = _events(b, steady)
    if not with_events:
        return b.ops
    event = np.full(len(b.ops), -1, dtype=np.int64)
    counts = np.diff(starts)
    event[before:] = np.repeat(np.arange(len(counts)), counts)
    return b.ops, event
