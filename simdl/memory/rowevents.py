"""The events every timeline shares: each table row's forward and backward, and the optimizer step.

Rows are ordered by the module-call tree (:mod:`simdl.memory.rowtree`): forward in
post-order, backward in reverse post-order. What each event stands for is listed in
:mod:`simdl.memory.timeline`'s module doc.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..workload.table import WorkloadTable
from ..workload.workload import Workload
from .events import ACT, BWD, FWD, GRADS, OPT, STEP, TEMP, MemoryOptions, _Events
from .rowdtypes import RowDtypes, row_dtypes
from .rowtree import block_rows, row_tree


@dataclass(frozen=True)
class _Rows:
    """Per-row byte columns at one batch, in the precision's element sizes."""

    saved: np.ndarray
    out: np.ndarray
    params: np.ndarray  # parameter bytes (fp32) owned by the row
    grad_in: np.ndarray  # bytes of the input gradient the row's backward produces
    working: np.ndarray  # largest gradient bytes one backward op of the row reads and writes
    fwd_working: np.ndarray  # the row's forward temporaries at their peak, above what it keeps


def _rows(table: WorkloadTable, batch: int, f: RowDtypes) -> _Rows:
    tree = row_tree(table)
    saved = table.column("saved_bytes", batch) * f.saved
    out = table.column("output_bytes", batch) * f.out
    params = table.fixed["param_bytes"].astype(float)
    grad_in = np.where(tree.leaf & (tree.prev_leaf >= 0), out[np.maximum(tree.prev_leaf, 0)], 0.0)
    working = table.column("bwd_working_bytes", batch) * f.working
    fwd_working = table.column("fwd_working_bytes", batch) * f.out
    return _Rows(saved, out, params, grad_in, working, fwd_working)


def _positions(n: int):
    tree_pos_f = lambda k: 1.0 + k  # noqa: E731  forward slot of post-order position k
    tree_pos_b = lambda k: 2.0 + n + (n - 1 - k)  # noqa: E731  backward slot (reverse post-order)
    return tree_pos_f, tree_pos_b


CONV_TYPES = ("Conv1d", "Conv2d", "Conv3d")


# Containers whose input's two gradients are summed out of place (see _row_events).
OUT_OF_PLACE_JOIN_TYPES = ("SqueezeExcitation",)


def _row_events(
    ev: _Events,
    table: WorkloadTable,
    batch: int,
    act_factor: float,
    mixed: bool,
    checkpoint: bool,
    grad_scale: float,
    conv_scratch: float = 0.0,
    fp32_types: tuple[str, ...] = (),
    mask_bytes: float = 0.0,
) -> None:
    """Forward and backward events of the rows: activations, temporaries, gradients.
    ``act_factor``: activations' element size against fp32, row by row as
    :func:`simdl.memory.rowdtypes.row_dtypes` refines it with ``fp32_types`` (the device's
    autocast fp32 ops, when ``mixed`` says autocast runs) and ``mask_bytes`` (dropout masks)."""
    tree = row_tree(table)
    r = _rows(table, batch, row_dtypes(tuple(table.types), act_factor, mixed, fp32_types, mask_bytes))
    pf, pb = _positions(table.n_rows)
    k = tree.post_pos  # post-order position of each row
    # Time anchors: a row's events happen with the last row of its subtree (a container's
    # own ops run after its children in forward and before them in backward).
    rows = tree.end - 1
    fwd = pf(k)
    bwd = pb(k)
    in_block = _checkpoint_events(ev, table, tree, r, fwd, bwd) if checkpoint else np.zeros(table.n_rows, dtype=bool)
    _forward_events(ev, tree, r, fwd, bwd, rows, in_block, mixed)
    g = r.params * grad_scale
    _backward_events(ev, table, tree, r, pb, bwd, rows, g)
    if conv_scratch:
        _conv_scratch_events(ev, table, tree, r, bwd, rows, g, conv_scratch)
    ev.add(bwd + 0.7, ACT, -r.saved, direction=BWD, row=rows, edge=1, label="saved activations")
    ev.add(bwd + 0.8, TEMP, -np.where(tree.leaf, r.out, 0.0), direction=BWD, row=rows, edge=1, label="output gradient")


def _checkpoint_events(
    ev: _Events, table: WorkloadTable, tree, r: _Rows, fwd: np.ndarray, bwd: np.ndarray
) -> np.ndarray:
    """Activation checkpointing: rows inside a block save nothing in forward; the block
    keeps its input; in backward the block's forward is recomputed first. Returns which
    rows are inside a block."""
    in_block = np.zeros(table.n_rows, dtype=bool)
    blocks = block_rows(table)
    for start, stop in blocks:
        in_block[start:stop] = True
    for start, stop in blocks:
        first = tree.first_leaf[start]
        p = tree.prev_leaf[first]
        inp = r.out[p] if p >= 0 else 0.0
        if p >= 0 and not in_block[p] and r.saved[p] >= r.out[p]:
            inp = 0.0  # the row before saves its output already: the same storage
        ev.add(fwd[start] + 0.5, ACT, inp, direction=FWD, row=stop - 1, edge=1, label="checkpoint input")
        ev.add(
            bwd[start] + 0.05,
            ACT,
            r.saved[start:stop].sum(),
            direction=BWD,
            row=stop - 1,
            label="recomputed activations",
        )
        ev.add(bwd[first] + 0.97, ACT, -inp, direction=BWD, row=first, edge=1, label="checkpoint input")
    return in_block


def _forward_events(
    ev: _Events, tree, r: _Rows, fwd: np.ndarray, bwd: np.ndarray, rows: np.ndarray, in_block: np.ndarray, mixed: bool
) -> None:
    """Saved activations, the running row's output and autocast's weight copies."""
    fwd_saved = np.where(in_block, 0.0, r.saved)
    ev.add(fwd + 0.5, ACT, fwd_saved, direction=FWD, row=rows, edge=1, label="saved activations")
    # The running row's output in forward (freed once the next row has consumed it).
    leaf_out = np.where(tree.leaf, r.out, 0.0)
    ev.add(fwd + 0.6, TEMP, leaf_out, direction=FWD, row=rows, edge=1, label="forward output")
    ev.add(fwd + 0.9, TEMP, -leaf_out, direction=FWD, row=rows, edge=1, label="forward output")
    # A row of many functional ops (shifted-window attention's pad, roll, window partition,
    # score matmuls) holds temporaries in forward that it neither saves nor returns: Python
    # frees each when its last reference goes, so at the row's busiest op its storages exceed
    # what it keeps at its end (its saved activations and output) by this much.
    extra = r.fwd_working
    ev.add(fwd + 0.65, TEMP, extra, direction=FWD, row=rows, edge=1, label="forward temporaries")
    ev.add(fwd + 0.66, TEMP, -extra, direction=FWD, row=rows, edge=1, label="forward temporaries")
    if mixed:
        # autocast caches the 16-bit copy of each weight it casts (leaf tensors that
        # require grad: aten/src/ATen/autocast_mode.cpp, cached_cast); the op saves it for
        # backward, so it lives until that row's backward.
        cast = np.where(tree.castable, r.params / 2.0, 0.0)
        ev.add(
            fwd + 0.4, ACT, np.where(in_block, 0.0, cast), direction=FWD, row=rows, edge=1, label="autocast weight copy"
        )
        ev.add(
            bwd + 0.71,
            ACT,
            -np.where(in_block, 0.0, cast),
            direction=BWD,
            row=rows,
            edge=1,
            label="autocast weight copy",
        )


def _backward_events(
    ev: _Events, table: WorkloadTable, tree, r: _Rows, pb, bwd: np.ndarray, rows: np.ndarray, g: np.ndarray
) -> None:
    """Backward, rows in reverse post-order: the loss gradient, skip-path gradients, the
    parameter gradients (``g`` bytes per row) and each row's input gradient."""
    last_leaf = int(np.flatnonzero(tree.leaf)[-1]) if tree.leaf.any() else 0
    ev.add(
        pb(tree.post_pos[0]) + 0.15, TEMP, r.out[last_leaf], direction=BWD, row=table.n_rows - 1, label="loss gradient"
    )
    held = np.where(tree.merge, r.out, 0.0)
    ev.add(bwd + 0.1, TEMP, held, direction=BWD, row=rows, label="skip-path gradient")
    ev.add(
        bwd[tree.first_leaf] + 0.95, TEMP, -held, direction=BWD, row=tree.first_leaf, edge=1, label="skip-path gradient"
    )
    # A squeeze-and-excitation block multiplies its input by a scale computed from that
    # input: the two gradients of the input (the multiply's, held; the squeeze path's,
    # from its first row) are summed into a new tensor before both are freed, where a
    # residual add's are summed in place. Seen in MemTracker's trace of MobileNetV3-Large
    # (features.12.block.2, batch 32): +X at the end of the avgpool's backward, then -2X.
    joins = np.where(tree.merge & np.isin(np.asarray(table.types), OUT_OF_PLACE_JOIN_TYPES), r.out, 0.0)
    ev.add(bwd[tree.first_leaf] + 0.93, TEMP, joins, direction=BWD, row=tree.first_leaf, edge=1, label="gradient sum")
    ev.add(bwd[tree.first_leaf] + 0.94, TEMP, -joins, direction=BWD, row=tree.first_leaf, edge=1, label="gradient sum")
    # A parameter gradient is first autograd's output (a temporary) and becomes ``.grad``
    # when AccumulateGrad steals it, after the row's backward kernels.
    ev.add(bwd + 0.2, TEMP, g, direction=BWD, row=rows, label="gradients")
    ev.add(bwd + 0.75, TEMP, -g, direction=BWD, row=rows, edge=1, label="gradients")
    ev.add(bwd + 0.75, GRADS, g, direction=BWD, row=rows, edge=1, label="gradients")
    ev.add(bwd + 0.3, TEMP, r.grad_in, direction=BWD, row=rows, label="input gradient")
    # Inside a row of many functional ops (shifted-window attention's pad, roll, window
    # partition and score matmuls) one backward op can read and write more gradient bytes
    # made by the row's own backward than the row's input and parameter gradients:
    # autograd runs a node with its incoming gradients and allocates its outputs before
    # the inputs are released (torch/csrc/autograd/engine.cpp, Engine::evaluate_function:
    # call_function, then the outputs go to the next nodes' InputBuffers). The excess is
    # live while that op runs.
    extra = np.maximum(r.working - r.grad_in - g, 0.0)
    ev.add(bwd + 0.35, TEMP, extra, direction=BWD, row=rows, label="backward op working set")
    ev.add(bwd + 0.36, TEMP, -extra, direction=BWD, row=rows, label="backward op working set")


def _conv_scratch_events(
    ev: _Events,
    table: WorkloadTable,
    tree,
    r: _Rows,
    bwd: np.ndarray,
    rows: np.ndarray,
    g: np.ndarray,
    conv_scratch: float,
) -> None:
    """The kernel's own copies beside the input gradient it has produced: oneDNN reorders
    the input and output gradient, or, when the weight is the larger (deep layers at small
    spatial size), works on a weight-sized gradient buffer instead -- measured: the larger
    of the two (cluster key conv_backward_scratch)."""
    conv = tree.leaf & np.isin(np.asarray(table.types), CONV_TYPES)
    sc = np.where(conv, conv_scratch * np.maximum(r.grad_in + r.out, g), 0.0)
    ev.add(bwd + 0.32, TEMP, sc, direction=BWD, row=rows, label="convolution backward scratch")
    ev.add(bwd + 0.34, TEMP, -sc, direction=BWD, row=rows, label="convolution backward scratch")


def _optimizer_events(
    ev: _Events,
    n: int,
    workload: Workload,
    opts: MemoryOptions,
    local_fixed: float,
    local_sharded: float,
    largest_fixed: float,
    largest_sharded: float,
    grads_fixed: float,
    grads_sharded: float,
) -> None:
    """The optimizer step: lazily created state, Adam's sqrt scratch, ``zero_grad``."""
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
