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
from itertools import repeat

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


@lru_cache(maxsize=256)
def _params(table, wrap: str | None) -> "_Params":
    """One :class:`_Params` per table and FSDP wrap (it is read, never changed)."""
    return _Params(table, wrap)


class _Params:
    """Per-parameter sizes (bytes at fp32) by row and by FSDP unit."""

    def __init__(self, table, wrap: str | None):
        first: dict[str, int] = {}
        for i, name in enumerate(table.names):
            first.setdefault(name, i)
        self.all = np.array([p.numel * 4.0 for p in table.params])
        self.sizes: list[float] = self.all.tolist()
        self.total = float(self.all.sum())
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
        self._copies: dict[tuple[float, int], list[float]] = {}

    def row_split(self, anchor: int, total: float) -> list[float]:
        for r in self.by_anchor.get(anchor, ()):
            sizes = self.by_row.get(r)
            if sizes and total > 0:
                scale = total / sum(sizes)
                # fp32 gradients, or 16-bit ones under FSDP's mixed precision
                if abs(scale - 1.0) < 1e-9 or abs(scale - 0.5) < 1e-9:
                    return [s * scale for s in sizes]
        return [total]

    def copies(self, total: float, shard: int) -> list[float]:
        """``total`` as whole copies of every (sharded) parameter: optimizer state, foreach outputs."""
        hit = self._copies.get((total, shard))
        if hit is not None:
            return hit
        one = self.total / shard
        c = int(round(total / one)) if one else 0
        if c < 1 or abs(c * one - total) > 1e-6 * total + 1.0:
            c, one = 1, self.total
        out = (self.all / self.total * (total / c)).tolist() * c if one else [total]
        self._copies[(total, shard)] = out
        return out


def _split(sizes: list[float], total: float) -> list[float]:
    """``sizes`` scaled to add up to ``total`` (one tensor when they cannot)."""
    s = sum(sizes)
    return [x * total / s for x in sizes] if s > 0 and len(sizes) > 1 else [total]


class _Builder:
    """The ops so far and the live tensor groups. An op is a plain ``(kind, key, size, stream)``
    tuple, the fields of :class:`~.allocator.replay.Op` (a plain tuple of numbers and strings
    is cheaper to build, and the garbage collector stops tracking it). A group is
    ``[category, tag, bytes, kind, first key, count]``; one counter numbers both: a group's
    id, then its tensors' keys."""

    __slots__ = ("p", "shard", "ops", "groups", "by_cat", "next")

    def __init__(self, params: _Params, shard: int):
        self.p, self.shard = params, shard
        self.ops: list[tuple] = []  # plain (kind, key, size, stream) tuples
        self.groups: dict[int, list] = {}
        # category -> its live groups in the order they became that category (a dict as an
        # ordered set: a free removes any of them at once)
        self.by_cat: defaultdict[int, dict[int, None]] = defaultdict(dict)
        self.next = 0

    def alloc(self, cat: int, tag: str, sizes: list[float], kind: int, stream: int) -> int:
        g = self.next
        k0 = g + 1
        ints = [int(round(s)) for s in sizes if s > 0]
        m = len(ints)
        self.ops.extend(zip(repeat(ALLOC, m), range(k0, k0 + m), ints, repeat(stream, m)))
        self.next = k0 + m
        self.groups[g] = [cat, tag, float(sum(sizes)), kind, k0, m]
        self.by_cat[cat][g] = None
        return g

    def free_group(self, g: int) -> None:
        cat, _, _, _, k0, m = self.groups.pop(g)
        del self.by_cat[cat][g]
        if m == 1:
            self.ops.append((FREE, k0, 0, 0))
        else:
            self.ops.extend(zip(repeat(FREE, m), range(k0, k0 + m), repeat(0, m), repeat(0, m)))

    def move(self, src: int, dst: int, amount: float, kind: int) -> bool:
        """Relabel live groups of ``amount`` bytes from category ``src`` to ``dst`` (no allocation)."""
        g = self._find(src, None, amount, kind)
        if g is None:
            return False
        del self.by_cat[src][g]
        self.groups[g][0] = dst
        self.by_cat[dst][g] = None
        return True

    def _find(self, cat: int, tag: str | None, amount: float, kind: int) -> int | None:
        tol = 1e-6 * amount + 1.0
        live = self.by_cat[cat]
        groups = self.groups
        if tag is not None:
            for g in reversed(live):
                _, gt, b, gk, _, _ = groups[g]
                if gt == tag and abs(b - amount) <= tol and (kind < 0 or gk == kind):
                    return g
        for g in reversed(live):
            _, _, b, gk, _, _ = groups[g]
            if abs(b - amount) <= tol and (kind < 0 or gk == kind):
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


def _baseline(b: _Builder, table, timeline: Timeline, first: Timeline, bucket_bytes, fsdp: bool):
    """Parameters, buffers and DDP buckets, as the model and DDP's reducer set them up."""
    kind = 1 if fsdp else 0
    # The rank's parameters as the timeline holds them (none on the GPU under CPU offload).
    on_gpu = float(timeline.baseline[PARAMS]) - table.buffer_bytes
    if on_gpu > 0:
        b.alloc(PARAMS, "params", _split(b.p.sizes, on_gpu), kind, DEFAULT_STREAM)
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


def _kinds(tl: Timeline) -> list[int]:
    """Each event's tensor kind: 0 a fixed-size tensor, 1 a sharded one, -1 either (a mixed free)."""
    fixed, sharded = tl.fixed != 0, tl.sharded != 0
    return np.where(fixed & ~sharded, 0, np.where(sharded & ~fixed, 1, -1)).tolist()


def _events(b: _Builder, tl: Timeline) -> np.ndarray:
    """One iteration's events as allocations and frees; returns the index of the first op
    of each event (``len(events) + 1`` entries). A one-tensor allocation and a free that
    finds its group by tag (most events) are :meth:`_Builder.alloc` and
    :meth:`_Builder.free` spelt out."""
    deltas = tl.deltas
    d, cats, kinds, rows = deltas.tolist(), tl.category.tolist(), _kinds(tl), tl.row.tolist()
    whole = np.rint(deltas).astype(np.int64).tolist()  # round() of each amount (half to even, as round)
    labels = list(tl.labels)
    tag_of = {lab: _tag(lab) for lab in set(labels)}
    stream_of = {lab: _stream(lab) for lab in tag_of}
    ops, groups, by_cat = b.ops, b.groups, b.by_cat
    n = len(cats)
    starts = [0] * (n + 1)
    k = 0
    while k < n:
        starts[k] = len(ops)
        amount, cat, label, kind = d[k], cats[k], labels[k], kinds[k]
        if amount > 0:
            if label == "gradients":
                b.alloc(cat, tag_of[label], b.p.row_split(rows[k], amount), kind, stream_of[label])
            elif cat == OPT:  # lazy state, foreach outputs: one tensor per parameter and copy
                b.alloc(cat, tag_of[label], b.p.copies(amount, b.shard), kind, stream_of[label])
            elif cat == PARAMS and label.startswith("unsharded "):
                sizes = _split(b.p.by_unit.get(label[len("unsharded ") :], []), amount)
                b.alloc(cat, tag_of[label], sizes, kind, stream_of[label])
            else:
                g = b.next
                b.next = g + 2
                ops.append((ALLOC, g + 1, whole[k], stream_of[label]))
                groups[g] = [cat, tag_of[label], amount, kind, g + 1, 1]
                by_cat[cat][g] = None
        elif amount < 0:
            if k + 1 < n and labels[k + 1] == label and d[k + 1] == -amount and cats[k + 1] != cat:
                if b.move(cat, cats[k + 1], -amount, kind):  # AccumulateGrad: a new category, same storage
                    starts[k + 1] = len(ops)
                    k += 2
                    continue
            tag, amount = tag_of[label], -amount
            tol = 1e-6 * amount + 1.0
            live = by_cat[cat]
            # _Builder._find: the most recent group of the tag and size, else of the size
            found = None
            for g in reversed(live):
                gr = groups[g]
                if gr[1] == tag and abs(gr[2] - amount) <= tol and (kind < 0 or gr[3] == kind):
                    found = g
                    break
            else:
                for g in reversed(live):
                    gr = groups[g]
                    if abs(gr[2] - amount) <= tol and (kind < 0 or gr[3] == kind):
                        found = g
                        break
            if found is None:
                b.free(cat, tag, amount, kind)
            elif gr[5] == 1:
                del groups[found], live[found]
                ops.append((FREE, gr[4], 0, 0))
            else:
                b.free_group(found)
        k += 1
    starts[n] = len(ops)
    return np.asarray(starts, dtype=np.int64)


def allocation_sequence(
    steady: Timeline, first: Timeline, table, details: dict, with_events: bool = False, plain: bool = False
):
    """Allocations and frees of setup, a first iteration and a steady-state one.

    ``steady``/``first``: the rank's timelines without and with ``first_iteration`` (the
    first creates the optimizer state at its step); ``details``: the plan's (DDP buckets,
    FSDP wrap). ``with_events``: also return, for each op, the index of the steady
    iteration's timeline event it comes from (-1 for setup and the first iteration).
    ``plain``: the ops as plain ``(kind, key, size, stream)`` tuples instead of
    :class:`~.allocator.replay.Op` (the same fields; what :mod:`.cuda` replays).
    """
    fsdp = "shard_size" in details
    b = _Builder(_params(table, details.get("wrap", "block") if fsdp else None), steady.shard_size)
    buckets = details.get("bucket_bytes") if details.get("comm_buffer_bytes") else None
    _baseline(b, table, steady, first, buckets, fsdp)
    _events(b, first)
    before = len(b.ops)
    starts = _events(b, steady)
    ops = b.ops if plain else list(map(_new, repeat(Op), b.ops))
    if not with_events:
        return ops
    event = np.full(len(ops), -1, dtype=np.int64)
    counts = np.diff(starts)
    event[before:] = np.repeat(np.arange(len(counts)), counts)
    return ops, event
