"""Per-rank memory over one training iteration, as an ordered list of allocations and frees.

``build_timeline(workload, plan, options)`` returns a :class:`Timeline`: one event per
allocation or free, in program order, each with a category, a byte count and an anchor
(direction + table row + edge) that says which plan task it belongs to, so an engine
can place it at that task's start/end time (:func:`simdl.memory.place.event_times`).
``Timeline.peak()`` gives the peak and the breakdown at that instant.

What is modelled (tensor bytes, as ``torch.cuda.memory_allocated`` counts them):

* params: the rank's parameters and buffers; under FSDP the sharded parameters plus
  the unsharded units alive at each moment.
* grads: parameter gradients, allocated when each row's backward runs (AccumulateGrad
  steals the freshly computed tensor: no copy) and freed by ``zero_grad`` (set_to_none,
  PyTorch's default since 2.0). Under FSDP the unsharded gradients of the running unit,
  then its sharded gradient after the reduce-scatter.
* optimizer: the state (steady state: it exists from the first step on; with
  ``first_iteration=True`` it is created lazily at the step) and the step's scratch
  (foreach Adam's ``_foreach_sqrt(exp_avg_sq)``, one parameter-sized copy;
  torch/optim/adam.py ``_multi_tensor_adam``; per-tensor Adam, PyTorch's choice on the
  CPU: two copies of the largest parameter, ``_single_tensor_adam``).
* activations: tensors saved for backward (the table's per-row ``saved_bytes``),
  allocated when the row's forward returns and freed after the row's backward; under
  activation checkpointing only each block's input, and the block's activations again
  while its backward runs (recomputation); autocast's cached 16-bit weight copies.
* temporaries: the output of the running row in forward; in backward the gradient of
  the running row's output and the input gradient it produces; a residual block's
  gradient held for its skip path while the block's branch runs backward.
* comm_buffers: DDP's gradient buckets (persistent, ``gradient_as_bucket_view=False``);
  FSDP2's all-gather outputs (the one being copied out, the one kept for overlap in
  forward, the one prefetched in backward) and reduce-scatter inputs (one kept in
  flight: ``reduce_scatter_max_input_buffers = 1``) and the backend's scratch during
  each all-gather and reduce-scatter (gloo: a buffer of the collective's full size); the
  PS worker's pulled parameters.

FSDP with a shard group of one rank (``sharding="none"``: FSDP2 has no NO_SHARD; its
equivalent, which validate/train.py runs, is HSDP on a (ranks x 1) mesh) keeps its
"sharded" parameters (whole) *and*, from each unit's pre-forward to its post-backward,
an unsharded copy (``wait_for_unshard``'s ``world_size == 1`` branch copies the shard
into freshly allocated unsharded parameters; no collective); gradients go through
``foreach_reduce`` (reduce-scatter input, then a copy into the output, which becomes
the gradient) and are all-reduced in place across the replicas.

FSDP follows FSDP2 (``fully_shard``) source in torch 2.14:
torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py (``unshard``,
``wait_for_unshard``, ``post_backward``, ``_backward_prefetch``) and
_fsdp_collectives.py (``foreach_all_gather``, ``foreach_reduce``).

Deltas come in two columns, ``fixed`` and ``sharded``: the event's bytes are
``fixed + sharded / shard_size``, so one timeline serves every FSDP world size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..workload.table import WorkloadTable
from ..workload.workload import Workload
from .rowtree import block_rows, row_tree

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
    """

    activation_checkpointing: bool = False
    cpu_offload: bool = False
    foreach: bool = True
    first_iteration: bool = False
    gradient_as_bucket_view: bool = False
    all_gather_scratch: float = 0.0
    reduce_scatter_scratch: float = 0.0
    conv_backward_scratch: float = 0.0


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
        return Timeline(self.category, self.fixed, self.sharded, self.direction, self.row, self.edge,
                        self.labels, self.baseline_fixed, self.baseline_sharded, shard_size, self.rank,
                        self.notes)

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
        self.arrays: list[list[np.ndarray]] = []
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
        self.arrays.append([np.broadcast_to(np.asarray(c, dtype=float), (size,)) for c in cols])
        self.array_labels.append(label)

    def build(self, baseline_fixed, baseline_sharded, **kw) -> Timeline:
        parts = [np.stack(a) for a in self.arrays]
        if self.scalars:
            parts.append(np.array(self.scalars, dtype=float).T)
        m = np.concatenate(parts, axis=1) if parts else np.zeros((7, 0))
        labels = [lab for lab, a in zip(self.array_labels, self.arrays) for _ in range(len(a[0]))]
        labels += self.scalar_labels
        pos, cat, fixed, sharded, direction, row, edge = m
        keep = np.flatnonzero((fixed != 0) | (sharded != 0))
        idx = keep[np.argsort(pos[keep], kind="stable")]
        return Timeline(cat[idx].astype(np.int64), fixed[idx], sharded[idx], direction[idx].astype(np.int64),
                        row[idx].astype(np.int64), edge[idx].astype(np.int64),
                        _Labels(labels, idx), np.asarray(baseline_fixed, float),
                        np.asarray(baseline_sharded, float), **kw)


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
        return (self._labels[i] for i in self._idx)


@dataclass(frozen=True)
class _Rows:
    """Per-row byte columns at one batch, in the precision's element sizes."""

    saved: np.ndarray
    out: np.ndarray
    params: np.ndarray  # parameter bytes (fp32) owned by the row
    grad_in: np.ndarray  # bytes of the input gradient the row's backward produces


def _rows(table: WorkloadTable, batch: int, act_factor: float) -> _Rows:
    tree = row_tree(table)
    saved = table.column("saved_bytes", batch) * act_factor
    out = table.column("output_bytes", batch) * act_factor
    params = table.fixed["param_bytes"].astype(float)
    grad_in = np.where(tree.leaf & (tree.prev_leaf >= 0), out[np.maximum(tree.prev_leaf, 0)], 0.0)
    return _Rows(saved, out, params, grad_in)


def _positions(n: int):
    tree_pos_f = lambda k: 1.0 + k  # noqa: E731  forward slot of post-order position k
    tree_pos_b = lambda k: 2.0 + n + (n - 1 - k)  # noqa: E731  backward slot (reverse post-order)
    return tree_pos_f, tree_pos_b


CONV_TYPES = ("Conv1d", "Conv2d", "Conv3d")


# Containers whose input's two gradients are summed out of place (see _row_events).
OUT_OF_PLACE_JOIN_TYPES = ("SqueezeExcitation",)


def _row_events(ev: _Events, table: WorkloadTable, batch: int, act_factor: float, mixed: bool,
                checkpoint: bool, grad_scale: float, conv_scratch: float = 0.0) -> None:
    """Forward and backward events of the rows: activations, temporaries, gradients."""
    tree = row_tree(table)
    r = _rows(table, batch, act_factor)
    n = table.n_rows
    pf, pb = _positions(n)
    k = tree.post_pos  # post-order position of each row
    # Time anchors: a row's events happen with the last row of its subtree (a container's
    # own ops run after its children in forward and before them in backward).
    rows = tree.end - 1
    fwd = pf(k)
    bwd = pb(k)
    saved = r.saved.copy()
    # Activation checkpointing: rows inside a block save nothing in forward; the block
    # keeps its input; in backward the block's forward is recomputed first.
    in_block = np.zeros(n, dtype=bool)
    if checkpoint:
        blocks = block_rows(table)
        for start, stop in blocks:
            in_block[start:stop] = True
        for start, stop in blocks:
            first = tree.first_leaf[start]
            p = tree.prev_leaf[first]
            inp = r.out[p] if p >= 0 else 0.0
            if p >= 0 and not in_block[p] and saved[p] >= r.out[p]:
                inp = 0.0  # the row before saves its output already: the same storage
            ev.add(fwd[start] + 0.5, ACT, inp, direction=FWD, row=stop - 1, edge=1, label="checkpoint input")
            ev.add(bwd[start] + 0.05, ACT, saved[start:stop].sum(), direction=BWD, row=stop - 1,
                   label="recomputed activations")
            ev.add(bwd[first] + 0.97, ACT, -inp, direction=BWD, row=first, edge=1, label="checkpoint input")
    fwd_saved = np.where(in_block, 0.0, saved)
    ev.add(fwd + 0.5, ACT, fwd_saved, direction=FWD, row=rows, edge=1, label="saved activations")
    # The running row's output in forward (freed once the next row has consumed it).
    leaf_out = np.where(tree.leaf, r.out, 0.0)
    ev.add(fwd + 0.6, TEMP, leaf_out, direction=FWD, row=rows, edge=1, label="forward output")
    ev.add(fwd + 0.9, TEMP, -leaf_out, direction=FWD, row=rows, edge=1, label="forward output")
    if mixed:
        # autocast caches the 16-bit copy of each weight it casts (leaf tensors that
        # require grad: aten/src/ATen/autocast_mode.cpp, cached_cast); the op saves it for
        # backward, so it lives until that row's backward.
        cast = np.where(tree.castable, r.params / 2.0, 0.0)
        ev.add(fwd + 0.4, ACT, np.where(in_block, 0.0, cast), direction=FWD, row=rows, edge=1,
               label="autocast weight copy")
        ev.add(bwd + 0.71, ACT, -np.where(in_block, 0.0, cast), direction=BWD, row=rows, edge=1,
               label="autocast weight copy")
    # Backward, rows in reverse post-order.
    last_leaf = int(np.flatnonzero(tree.leaf)[-1]) if tree.leaf.any() else 0
    ev.add(pb(k[0]) + 0.15, TEMP, r.out[last_leaf], direction=BWD, row=n - 1, label="loss gradient")
    held = np.where(tree.merge, r.out, 0.0)
    ev.add(bwd + 0.1, TEMP, held, direction=BWD, row=rows, label="skip-path gradient")
    ev.add(bwd[tree.first_leaf] + 0.95, TEMP, -held, direction=BWD, row=tree.first_leaf, edge=1,
           label="skip-path gradient")
    # A squeeze-and-excitation block multiplies its input by a scale computed from that
    # input: the two gradients of the input (the multiply's, held; the squeeze path's,
    # from its first row) are summed into a new tensor before both are freed, where a
    # residual add's are summed in place. Seen in MemTracker's trace of MobileNetV3-Large
    # (features.12.block.2, batch 32): +X at the end of the avgpool's backward, then -2X.
    joins = np.where(tree.merge & np.isin(np.asarray(table.types), OUT_OF_PLACE_JOIN_TYPES), r.out, 0.0)
    ev.add(bwd[tree.first_leaf] + 0.93, TEMP, joins, direction=BWD, row=tree.first_leaf, edge=1,
           label="gradient sum")
    ev.add(bwd[tree.first_leaf] + 0.94, TEMP, -joins, direction=BWD, row=tree.first_leaf, edge=1,
           label="gradient sum")
    # A parameter gradient is first autograd's output (a temporary) and becomes ``.grad``
    # when AccumulateGrad steals it, after the row's backward kernels.
    g = r.params * grad_scale
    ev.add(bwd + 0.2, TEMP, g, direction=BWD, row=rows, label="gradients")
    ev.add(bwd + 0.75, TEMP, -g, direction=BWD, row=rows, edge=1, label="gradients")
    ev.add(bwd + 0.75, GRADS, g, direction=BWD, row=rows, edge=1, label="gradients")
    ev.add(bwd + 0.3, TEMP, r.grad_in, direction=BWD, row=rows, label="input gradient")
    if conv_scratch:
        # The kernel's own copies beside the input gradient it has produced: oneDNN
        # reorders the input and output gradient, or, when the weight is the larger
        # (deep layers at small spatial size), works on a weight-sized gradient buffer
        # instead -- measured: the larger of the two (cluster key conv_backward_scratch).
        conv = tree.leaf & np.isin(np.asarray(table.types), CONV_TYPES)
        sc = np.where(conv, conv_scratch * np.maximum(r.grad_in + r.out, g), 0.0)
        ev.add(bwd + 0.32, TEMP, sc, direction=BWD, row=rows, label="convolution backward scratch")
        ev.add(bwd + 0.34, TEMP, -sc, direction=BWD, row=rows, label="convolution backward scratch")
    ev.add(bwd + 0.7, ACT, -saved, direction=BWD, row=rows, edge=1, label="saved activations")
    ev.add(bwd + 0.8, TEMP, -np.where(tree.leaf, r.out, 0.0), direction=BWD, row=rows, edge=1,
           label="output gradient")


def _optimizer_events(ev: _Events, n: int, workload: Workload, opts: MemoryOptions, local_fixed: float,
                      local_sharded: float, largest_fixed: float, largest_sharded: float,
                      grads_fixed: float, grads_sharded: float) -> None:
    pos = 3.0 + 2 * n
    copies = workload.optimizer_state_copies
    if opts.first_iteration and copies:
        ev.add(pos + 0.1, OPT, copies * local_fixed, copies * local_sharded, STEP, label="optimizer state (lazy)")
    if workload.optimizer in ("adam", "adamw"):  # AdamW runs Adam's code (torch/optim/adamw.py)
        if opts.foreach:
            tf, ts = local_fixed, local_sharded
        else:
            # _single_tensor_adam: ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)``
            # holds sqrt's output and the quotient at once, for one parameter at a time.
            tf, ts = 2.0 * largest_fixed, 2.0 * largest_sharded
        ev.add(pos + 0.3, OPT, tf, ts, STEP, label="adam sqrt scratch")
        ev.add(pos + 0.5, OPT, -tf, -ts, STEP, edge=1, label="adam sqrt scratch")
    ev.add(pos + 0.9, GRADS, -grads_fixed, -grads_sharded, STEP, edge=1, label="zero_grad")


def _act_factor(workload: Workload) -> float:
    from ..analytic.costs import MIXED_PRECISION_ACTIVATION_FACTOR

    return MIXED_PRECISION_ACTIVATION_FACTOR if workload.mixed_precision else 1.0


# -- replicas: single rank, DDP, PS worker, FSDP no_shard ------------------------------------
@lru_cache(maxsize=2048)
def _replica_timeline(table: WorkloadTable, batch: int, optimizer: str, precision: str, opts: MemoryOptions,
                      bucket_bytes: float, ps_worker: bool) -> Timeline:
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, precision=precision)
    n = table.n_rows
    ev = _Events()
    grad_scale = 0.0 if opts.gradient_as_bucket_view and bucket_bytes > 0 else 1.0
    _row_events(ev, table, batch, _act_factor(wl), wl.mixed_precision, opts.activation_checkpointing, grad_scale,
                opts.conv_backward_scratch)
    P = float(table.param_bytes)
    largest = max((p.numel for p in table.params), default=0) * 4.0
    base = np.zeros(len(CATEGORIES))
    base[PARAMS] = P + table.buffer_bytes
    if ps_worker:
        # The worker pushes its gradients, drops them and pulls the new parameters into a
        # receive buffer that is then copied into the model (no optimizer on the worker).
        pos = 3.0 + 2 * n
        ev.add(pos + 0.2, GRADS, -P * grad_scale, direction=STEP, label="gradients pushed")
        ev.add(pos + 0.4, COMM, P, direction=STEP, label="pulled parameters")
        ev.add(pos + 0.6, COMM, -P, direction=STEP, edge=1, label="pulled parameters")
        return ev.build(base, np.zeros(len(CATEGORIES)), rank="worker")
    if not opts.first_iteration:
        base[OPT] = wl.optimizer_state_copies * P
    base[COMM] = bucket_bytes
    _optimizer_events(ev, n, wl, opts, P, 0.0, largest, 0.0, P * grad_scale, 0.0)
    return ev.build(base, np.zeros(len(CATEGORIES)))


# -- FSDP2 -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _UnitRows:
    name: str
    row: int  # the unit module's (first) row; 0 for the root
    numel: int
    grad_rows: np.ndarray = field(repr=False)  # rows whose parameters belong to the unit


@lru_cache(maxsize=256)
def _unit_rows(table: WorkloadTable, wrap: str) -> tuple[_UnitRows, ...]:
    from ..strategies.fsdp_units import fsdp_units

    units = fsdp_units(table, wrap)
    first: dict[str, int] = {}
    for i, name in enumerate(table.names):
        first.setdefault(name, i)
    out = []
    for u, unit in enumerate(units.units):
        row = 0 if u == 0 else first.get(unit.name, -1)
        out.append(_UnitRows(unit.name, row, unit.numel, np.flatnonzero(units.row_unit == u)))
    return tuple(out)


@lru_cache(maxsize=2048)
def _fsdp_timeline(table: WorkloadTable, batch: int, optimizer: str, precision: str, opts: MemoryOptions,
                   wrap: str, reshard_after_forward: bool, gathered: bool = True,
                   reshard_root: bool = False) -> Timeline:
    """FSDP2 with a shard group of ``shard_size`` ranks (set by ``with_shard_size``).

    ``reshard_root``: the root unit is resharded after forward too and gathered again
    when backward starts (fully_shard(root, reshard_after_forward=True) given explicitly;
    simdl.strategies.config.StrategyConfig.reshard_root).

    ``gathered``: the shard group has more than one rank, so units are all-gathered and
    gradients reduce-scattered; with one rank FSDP2 copies instead (module doc).
    """
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, precision=precision)
    n = table.n_rows
    tree = row_tree(table)
    pf, pb = _positions(n)
    mixed = wl.mixed_precision
    # MixedPrecisionPolicy(param_dtype=16-bit, reduce_dtype=fp32): unsharded parameters,
    # all-gather buffers and autograd's unsharded gradients are 16-bit; reduce-scatter
    # input and output (the sharded gradient) are fp32 (_fsdp_collectives.foreach_reduce).
    pe = 2.0 if mixed else 4.0
    ag_scratch = opts.all_gather_scratch if gathered else 0.0
    rs_scratch = opts.reduce_scatter_scratch if gathered else 0.0
    ev = _Events()
    # Under FSDP mixed precision the module computes in 16 bits with 16-bit parameters:
    # no autocast cache; activations in 16 bits.
    _row_events(ev, table, batch, _act_factor(wl), False, opts.activation_checkpointing, pe / 4.0,
                opts.conv_backward_scratch)
    units = [u for u in _unit_rows(table, wrap) if u.numel > 0]
    offload = opts.cpu_offload
    base_f = np.zeros(len(CATEGORIES))
    base_s = np.zeros(len(CATEGORIES))
    P = float(table.param_bytes)
    base_f[PARAMS] = table.buffer_bytes
    if not offload:
        base_s[PARAMS] = P
        if not opts.first_iteration:
            base_s[OPT] = wl.optimizer_state_copies * P

    def gather(p: float, b: float, direction: int, row: int, name: str, label: str) -> None:
        """An all-gather's output (kept by the caller) and the backend's scratch during it."""
        ev.add(p, COMM, b, direction=direction, row=row, label=f"{label} {name}")
        if ag_scratch:
            ev.add(p + 0.0012, COMM, ag_scratch * b, direction=direction, row=row, label=f"all-gather scratch {name}")
            ev.add(p + 0.0018, COMM, -ag_scratch * b, direction=direction, row=row, label=f"all-gather scratch {name}")

    def f_pre(row: int) -> float:  # just before the first forward event of row's subtree
        return pf(tree.post_pos[tree.first_leaf[row]]) + 0.01

    def f_post(row: int) -> float:
        return pf(tree.post_pos[row]) + 0.95

    def b_pre(row: int) -> float:
        return pb(tree.post_pos[row]) + 0.01

    def b_post(row: int) -> float:
        return pb(tree.post_pos[tree.first_leaf[row]]) + 0.96

    last_row = int(tree.end[0]) - 1
    called = [u for u in units if u.row >= 0]
    # Forward: a unit is gathered at its pre-forward; FSDP2 keeps the all-gather output
    # (``comm_ctx.all_gather_state``) until the next unit's copy-out is done, to overlap
    # them, and the root's post-forward frees the last one.
    prev_ag = None
    for u in sorted(called, key=lambda u: f_pre(u.row)):
        b = u.numel * pe
        p = f_pre(u.row)
        if gathered:
            gather(p, b, FWD, u.row, u.name or "root", "all-gather output")
        if offload:  # the shard is first copied to the GPU (host-to-device) as all-gather input
            ev.add(p + 0.001, COMM, 0.0, u.numel * pe, direction=FWD, row=u.row, label="H2D shard")
            ev.add(p + 0.004, COMM, 0.0, -u.numel * pe, direction=FWD, row=u.row, label="H2D shard")
        ev.add(p + 0.002, PARAMS, b, direction=FWD, row=u.row, label=f"unsharded {u.name or 'root'}")
        if prev_ag is not None:
            # wait_for_unshard drops comm_ctx.all_gather_state before the copy-out, but its
            # local ``prev_all_gather_state`` keeps the buffer alive until it returns.
            ev.add(p + 0.003, COMM, -prev_ag[0], direction=FWD, row=u.row, label=f"all-gather output {prev_ag[1]}")
        prev_ag = (b, u.name or "root") if gathered else None
        if reshard_after_forward and (u.row != 0 or reshard_root):
            ev.add(f_post(u.row), PARAMS, -b, direction=FWD, row=int(tree.end[u.row]) - 1, edge=1,
                   label=f"reshard {u.name or 'root'}")
    if prev_ag is not None:
        ev.add(f_post(0) + 0.04, COMM, -prev_ag[0], direction=FWD, row=last_row, edge=1,
               label=f"all-gather output {prev_ag[1]}")
    # Backward: units in reverse post-forward order; a resharded unit is gathered at its
    # pre-backward (unless prefetched), copied out, and prefetches the unit before it.
    post_order = sorted(called, key=lambda u: f_post(u.row))
    prefetched: set[str] = set()
    for idx in range(len(post_order) - 1, -1, -1):
        u = post_order[idx]
        b = u.numel * pe
        resharded = reshard_after_forward and (u.row != 0 or reshard_root)
        p = b_pre(u.row)
        last = int(tree.end[u.row]) - 1  # backward of the unit starts at its last row
        if resharded:
            name = u.name or "root"
            if gathered and u.name not in prefetched:
                gather(p, b, BWD, last, name, "all-gather output")
            ev.add(p + 0.002, PARAMS, b, direction=BWD, row=last, label=f"unsharded {name}")
            if gathered:
                ev.add(p + 0.003, COMM, -b, direction=BWD, row=last, label=f"all-gather output {name}")
        if idx > 0 and gathered:
            v = post_order[idx - 1]
            if reshard_after_forward and v.row != 0:
                gather(p + 0.004, v.numel * pe, BWD, last, v.name, "prefetched all-gather output")
                prefetched.add(v.name)
    # Post-backward, in the order it runs (the root's, whose input needs no gradient, runs
    # in the final callback): reshard, release the previous unit's reduce-scatter input
    # (reduce_scatter_max_input_buffers = 1), reduce-scatter into the sharded gradient.
    rs_held = None
    # With one rank per shard no reduce-scatter runs: foreach_reduce still fills its input
    # buffer and copies it to the output, a gradient copy (filed as a temporary, as
    # FSDPMemTracker does when no collective claims it).
    rs_cat = COMM if gathered else TEMP
    rs_name = "reduce-scatter input" if gathered else "gradient copy"
    for u in sorted(called, key=lambda u: b_post(u.row) if u.row != 0 else pb(0) + 0.99):
        b = u.numel * pe
        q = b_post(u.row) if u.row != 0 else pb(0) + 0.99
        anchor = int(tree.first_leaf[u.row]) if u.row != 0 else 0
        grads_u = float(table.fixed["param_bytes"][u.grad_rows].sum()) * pe / 4.0
        ev.add(q, PARAMS, -b, direction=BWD, row=anchor, edge=1, label=f"reshard {u.name or 'root'}")
        if rs_held is not None:
            ev.add(q + 0.001, rs_cat, -rs_held, direction=BWD, row=anchor, edge=1, label=rs_name)
        rs = u.numel * 4.0
        ev.add(q + 0.002, rs_cat, rs, direction=BWD, row=anchor, edge=1, label=f"{rs_name} {u.name or 'root'}")
        ev.add(q + 0.003, GRADS, -grads_u, direction=BWD, row=anchor, edge=1, label="unsharded gradients")
        ev.add(q + 0.004, GRADS, 0.0, u.numel * 4.0, direction=BWD, row=anchor, edge=1, label="sharded gradient")
        if rs_scratch:  # the backend's scratch while the reduce-scatter runs (after the output exists)
            ev.add(q + 0.0042, COMM, rs_scratch * rs, direction=BWD, row=anchor, edge=1,
                   label=f"reduce-scatter scratch {u.name or 'root'}")
            ev.add(q + 0.0046, COMM, -rs_scratch * rs, direction=BWD, row=anchor, edge=1,
                   label=f"reduce-scatter scratch {u.name or 'root'}")
        if offload:  # copied to host memory right away
            ev.add(q + 0.005, GRADS, 0.0, -u.numel * 4.0, direction=BWD, row=anchor, edge=1, label="D2H gradient")
        rs_held = rs
    if rs_held is not None:
        ev.add(pb(0) + 0.995, rs_cat, -rs_held, direction=BWD, row=0, edge=1, label=rs_name)
    largest = max((p.numel for p in table.params), default=0) * 4.0
    if offload:
        # The optimizer runs on the CPU: nothing on the GPU.
        ev.add(3.0 + 2 * n + 0.9, GRADS, 0.0, 0.0, STEP, label="zero_grad")
    else:
        _optimizer_events(ev, n, wl, opts, 0.0, P, 0.0, largest, 0.0, P)
    return ev.build(base_f, base_s)


def build_timeline(workload: Workload, plan, options: MemoryOptions | None = None) -> Timeline:
    """The memory timeline of one rank (the largest; every SPMD rank is alike) for ``plan``,
    from the builder its strategy's registry entry names."""
    from ..strategies import registry

    return registry.of_plan(plan).memory_timeline(workload, plan, options or MemoryOptions())


def _key(workload: Workload) -> tuple:
    return (workload.table, workload.batch_size, workload.optimizer, workload.precision)


def replica_timeline(workload: Workload, plan, opts: MemoryOptions) -> Timeline:
    """A full replica: every rank holds the whole model (DDP; a PS worker, which has no buckets)."""
    return _replica_timeline(*_key(workload), opts, float(plan.facts.comm_buffer_bytes), False)


def ps_worker_timeline(workload: Workload, plan, opts: MemoryOptions) -> Timeline:
    """A parameter-server worker: a full replica that pushes its gradients and pulls parameters."""
    return _replica_timeline(*_key(workload), opts, 0.0, True)


def fsdp_timeline(workload: Workload, plan, opts: MemoryOptions) -> Timeline:
    """A sharded rank: units gathered and freed around their forward and backward."""
    f = plan.facts
    shard = int(f.shard_size)
    tl = _fsdp_timeline(*_key(workload), opts, f.wrap, bool(f.reshard_after_forward), shard > 1, bool(f.reshard_root))
    return _sharded(tl, shard)


@lru_cache(maxsize=8192)
def _sharded(timeline: Timeline, shard_size: int) -> Timeline:
    # One object per (timeline, shard size), so that results memoised on it are reused.
    return timeline.with_shard_size(shard_size)
