"""The memory timeline's data: categories, anchors, options and the :class:`Timeline` itself.

:class:`Timeline` holds one rank's allocation (+) and free (-) events in program order
(:mod:`simdl.memory.timeline` builds it); ``_Events`` collects them while a builder runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CATEGORIES = ("params", "grads", "optimizer", "activations", "temporaries", "comm_buffers")
PARAMS, GRADS, OPT, ACT, TEMP, COMM = range(6)

# Anchor directions: where in the iteration an event happens.
NONE, FWD, BWD, STEP = 0, 1, 2, 3
DIRECTIONS = ("", "fwd", "bwd", "opt")


@dataclass(frozen=True)
class MemoryOptions:
    """What the memory model needs beyond the workload and the plan.

    activation_checkpointing: each block (the model's FSDP wrap classes) runs under
      ``torch.utils.checkpoint`` (non-reentrant).
    cpu_offload: FSDP2 ``CPUOffloadPolicy``: sharded parameters, gradients and optimizer
      state live in host memory.
    foreach: the optimizer uses foreach kernels (PyTorch's choice for CUDA tensors).
    first_iteration: the optimizer state is created at the first step instead of
      existing from the start (the steady state, which is what the peak reports).
    gradient_as_bucket_view: DDP's option: gradients are views into the buckets.
    all_gather_scratch, reduce_scatter_scratch: the communication backend's scratch per
      byte of an FSDP all-gather's output / reduce-scatter's input, live during the call
      (:mod:`simdl.collectives.backends`: 0 for NCCL, 1 for gloo).
    conv_backward_scratch: the device's scratch during a convolution's backward, per byte
      of the larger of its input plus its output gradient and its weight gradient (the
      cluster's ``memory.conv_backward_scratch``).
    autocast_fp32_types, dropout_mask_bytes: the device's autocast fp32 modules and the
      bytes per element of a dropout's saved mask (0: as traced); the host backend's
      (:mod:`simdl.memory.rowdtypes`).
    """

    activation_checkpointing: bool = False
    cpu_offload: bool = False
    foreach: bool = True
    first_iteration: bool = False
    gradient_as_bucket_view: bool = False
    all_gather_scratch: float = 0.0
    reduce_scatter_scratch: float = 0.0
    conv_backward_scratch: float = 0.0
    autocast_fp32_types: tuple[str, ...] = ()
    dropout_mask_bytes: float = 0.0


@dataclass(frozen=True, eq=False)
class Timeline:
    """Allocation (+) and free (-) events of one rank over one iteration, in program order."""

    category: np.ndarray  # int index into CATEGORIES
    fixed: np.ndarray  # bytes
    sharded: np.ndarray  # bytes divided by ``shard_size`` (FSDP shards)
    direction: np.ndarray  # NONE / FWD / BWD / STEP
    row: np.ndarray  # table row the event is anchored to (-1: none)
    edge: np.ndarray  # 0: at the start of the anchor, 1: at its end
    labels: tuple[str, ...]
    baseline_fixed: np.ndarray  # (6,) bytes live before the first event
    baseline_sharded: np.ndarray
    shard_size: int = 1
    rank: str = "rank"  # which rank role ("rank", "worker", "server")
    notes: tuple[str, ...] = ()

    def with_shard_size(self, shard_size: int) -> "Timeline":
        return Timeline(
            self.category,
            self.fixed,
            self.sharded,
            self.direction,
            self.row,
            self.edge,
            self.labels,
            self.baseline_fixed,
            self.baseline_sharded,
            shard_size,
            self.rank,
            self.notes,
        )

    @property
    def deltas(self) -> np.ndarray:
        return self.fixed + self.sharded / self.shard_size

    @property
    def baseline(self) -> np.ndarray:
        return self.baseline_fixed + self.baseline_sharded / self.shard_size

    def levels(self) -> np.ndarray:
        """(events + 1, 6): live bytes per category before the first event and after each."""
        out = np.zeros((len(self.category) + 1, len(CATEGORIES)))
        out[0] = self.baseline
        if len(self.category):
            m = np.zeros((len(self.category), len(CATEGORIES)))
            m[np.arange(len(self.category)), self.category] = self.deltas
            out[1:] = self.baseline + np.cumsum(m, axis=0)
        return out

    def peak(self) -> tuple[float, dict[str, float], int]:
        """(peak bytes, breakdown at the peak, index into ``levels()``)."""
        lv = self.levels()
        total = lv.sum(axis=1)
        k = int(np.argmax(total))
        return float(total[k]), dict(zip(CATEGORIES, (float(x) for x in lv[k]))), k

    def total(self) -> np.ndarray:
        return self.levels().sum(axis=1)


_PLAIN = (float, int, bool, np.float64, np.int64)


class _Events:
    """Collects events with a float program-order key; sorted once at the end.

    Scalar events (FSDP units, the optimizer) go to plain lists, per-row events as arrays:
    building a timeline stays around a millisecond for a thousand-row model.
    """

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []  # (7, events) each
        self.array_labels: list[str] = []
        self.scalars: list[tuple] = []
        self.scalar_labels: list[str] = []

    def add(self, pos, cat, fixed=0.0, sharded=0.0, direction=NONE, row=-1, edge=0, label="") -> None:
        cols = (pos, cat, fixed, sharded, direction, row, edge)
        # Plain Python numbers first: most events are (a unit's, the optimizer's), and
        # np.ndim on each column was a quarter of a first-pass prediction's time.
        if all(type(c) in _PLAIN for c in cols) or all(np.ndim(c) == 0 for c in cols):
            self.scalars.append(tuple(float(c) for c in cols))
            self.scalar_labels.append(label)
            return
        size = max(np.size(c) for c in cols)
        m = np.empty((len(cols), size))
        for i, c in enumerate(cols):
            m[i] = c  # a scalar or a (size,) column, as float
        self.arrays.append(m)
        self.array_labels.append(label)

    def build(self, baseline_fixed, baseline_sharded, **kw) -> Timeline:
        parts = list(self.arrays)
        if self.scalars:
            parts.append(np.array(self.scalars, dtype=float).T)
        m = np.concatenate(parts, axis=1) if parts else np.zeros((7, 0))
        labels = [lab for lab, a in zip(self.array_labels, self.arrays) for _ in range(len(a[0]))]
        labels += self.scalar_labels
        pos, cat, fixed, sharded, direction, row, edge = m
        keep = np.flatnonzero((fixed != 0) | (sharded != 0))
        idx = keep[np.argsort(pos[keep], kind="stable")]
        return Timeline(
            cat[idx].astype(np.int64),
            fixed[idx],
            sharded[idx],
            direction[idx].astype(np.int64),
            row[idx].astype(np.int64),
            edge[idx].astype(np.int64),
            _Labels(labels, idx),
            np.asarray(baseline_fixed, float),
            np.asarray(baseline_sharded, float),
            **kw,
        )


class _Labels(tuple):
    """Event labels, looked up lazily (only plots and debugging read them)."""

    _labels: list[str]
    _idx: np.ndarray

    def __new__(cls, labels: list[str], idx: np.ndarray):
        obj = super().__new__(cls)
        obj._labels, obj._idx = labels, idx
        return obj

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return tuple(self._labels[i] for i in self._idx[k])
        return self._labels[self._idx[k]]

    def __iter__(self):
        return map(self._labels.__getitem__, self._idx.tolist())
