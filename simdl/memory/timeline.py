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

The parts: :mod:`simdl.memory.events` (the Timeline and its options),
:mod:`simdl.memory.rowevents` (every row's forward and backward, the optimizer step) and
:mod:`simdl.memory.fsdp_timeline` (FSDP2's units); this module builds the replicas and
picks the builder of a plan's strategy.

Deltas come in two columns, ``fixed`` and ``sharded``: the event's bytes are
``fixed + sharded / shard_size``, so one timeline serves every FSDP world size.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..workload.table import WorkloadTable
from ..workload.workload import Workload
from .events import (
    ACT,
    BWD,
    CATEGORIES,
    COMM,
    DIRECTIONS,
    FWD,
    GRADS,
    NONE,
    OPT,
    PARAMS,
    STEP,
    TEMP,
    MemoryOptions,
    Timeline,
    _Events,
)
from .fsdp_timeline import _fsdp_timeline
from .rowevents import CONV_TYPES, OUT_OF_PLACE_JOIN_TYPES, _act_factor, _optimizer_events, _positions, _row_events

# Re-exported: the strategies' timelines (simdl.strategies.zero_memory) build on these.
__all__ = [
    "ACT",
    "BWD",
    "CATEGORIES",
    "COMM",
    "CONV_TYPES",
    "DIRECTIONS",
    "FWD",
    "GRADS",
    "NONE",
    "OPT",
    "OUT_OF_PLACE_JOIN_TYPES",
    "PARAMS",
    "STEP",
    "TEMP",
    "MemoryOptions",
    "Timeline",
    "_Events",
    "_act_factor",
    "_positions",
    "_row_events",
    "build_timeline",
    "fsdp_timeline",
    "ps_worker_timeline",
    "replica_timeline",
]


# -- replicas: single rank, DDP, PS worker, FSDP no_shard ------------------------------------
@lru_cache(maxsize=2048)
def _replica_timeline(
    table: WorkloadTable,
    batch: int,
    optimizer: str,
    precision: str,
    opts: MemoryOptions,
    bucket_bytes: float,
    ps_worker: bool,
) -> Timeline:
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, precision=precision)
    n = table.n_rows
    ev = _Events()
    grad_scale = 0.0 if opts.gradient_as_bucket_view and bucket_bytes > 0 else 1.0
    _row_events(
        ev,
        table,
        batch,
        _act_factor(wl),
        wl.mixed_precision,
        opts.activation_checkpointing,
        grad_scale,
        opts.conv_backward_scratch,
        opts.autocast_fp32_types,
        opts.dropout_mask_bytes,
    )
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
