"""FSDP2's memory timeline: the rows' events plus each unit's all-gathers, unsharded
parameters, reduce-scatters and sharded gradients.

Follows FSDP2 (``fully_shard``) source in torch 2.14:
torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py (``unshard``,
``wait_for_unshard``, ``post_backward``, ``_backward_prefetch``) and
_fsdp_collectives.py (``foreach_all_gather``, ``foreach_reduce``); the rules are listed
in :mod:`simdl.memory.timeline`'s module doc.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from ..workload.table import WorkloadTable
from ..workload.workload import Workload
from .events import BWD, CATEGORIES, COMM, FWD, GRADS, OPT, PARAMS, STEP, TEMP, MemoryOptions, Timeline, _Events
from .rowevents import _act_factor, _optimizer_events, _positions, _row_events
from .rowtree import RowTree, row_tree


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


@dataclass
class _Fsdp:
    """What the FSDP event builders share: the event list, the row tree's slots, the
    element size of unsharded parameters (``pe``) and the plan's choices."""

    ev: _Events
    tree: RowTree
    pf: Callable
    pb: Callable
    pe: float
    gathered: bool
    offload: bool
    ag_scratch: float
    rs_scratch: float
    reshard_after_forward: bool
    reshard_root: bool

    def gather(self, p: float, b: float, direction: int, row: int, name: str, label: str) -> None:
        """An all-gather's output (kept by the caller) and the backend's scratch during it."""
        self.ev.add(p, COMM, b, direction=direction, row=row, label=f"{label} {name}")
        if self.ag_scratch:
            s = self.ag_scratch * b
            self.ev.add(p + 0.0012, COMM, s, direction=direction, row=row, label=f"all-gather scratch {name}")
            self.ev.add(p + 0.0018, COMM, -s, direction=direction, row=row, label=f"all-gather scratch {name}")

    def resharded(self, u: _UnitRows) -> bool:
        return self.reshard_after_forward and (u.row != 0 or self.reshard_root)

    def f_pre(self, row: int) -> float:  # just before the first forward event of row's subtree
        t = self.tree
        return self.pf(t.post_pos[t.first_leaf[row]]) + 0.01

    def f_post(self, row: int) -> float:
        return self.pf(self.tree.post_pos[row]) + 0.95

    def b_pre(self, row: int) -> float:
        return self.pb(self.tree.post_pos[row]) + 0.01

    def b_post(self, row: int) -> float:
        t = self.tree
        return self.pb(t.post_pos[t.first_leaf[row]]) + 0.96


@lru_cache(maxsize=2048)
def _fsdp_timeline(
    table: WorkloadTable,
    batch: int,
    optimizer: str,
    precision: str,
    opts: MemoryOptions,
    wrap: str,
    reshard_after_forward: bool,
    gathered: bool = True,
    reshard_root: bool = False,
) -> Timeline:
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
    # MixedPrecisionPolicy(param_dtype=16-bit, reduce_dtype=fp32): unsharded parameters,
    # all-gather buffers and autograd's unsharded gradients are 16-bit; reduce-scatter
    # input and output (the sharded gradient) are fp32 (_fsdp_collectives.foreach_reduce).
    pe = 2.0 if wl.mixed_precision else 4.0
    ev = _Events()
    # Under FSDP mixed precision the module computes in 16 bits with 16-bit parameters:
    # no autocast cache; activations in 16 bits.
    _row_events(
        ev,
        table,
        batch,
        _act_factor(wl),
        False,
        opts.activation_checkpointing,
        pe / 4.0,
        opts.conv_backward_scratch,
        mask_bytes=opts.dropout_mask_bytes,
    )
    units = [u for u in _unit_rows(table, wrap) if u.numel > 0]
    c = _Fsdp(
        ev,
        tree,
        pf,
        pb,
        pe,
        gathered,
        opts.cpu_offload,
        opts.all_gather_scratch if gathered else 0.0,
        opts.reduce_scatter_scratch if gathered else 0.0,
        reshard_after_forward,
        reshard_root,
    )
    base_f = np.zeros(len(CATEGORIES))
    base_s = np.zeros(len(CATEGORIES))
    P = float(table.param_bytes)
    base_f[PARAMS] = table.buffer_bytes
    if not c.offload:
        base_s[PARAMS] = P
        if not opts.first_iteration:
            base_s[OPT] = wl.optimizer_state_copies * P
    called = [u for u in units if u.row >= 0]
    _forward_units(c, called)
    _backward_units(c, called)
    _post_backward_units(c, called, table)
    largest = max((p.numel for p in table.params), default=0) * 4.0
    if c.offload:
        # The optimizer runs on the CPU: nothing on the GPU.
        ev.add(3.0 + 2 * n + 0.9, GRADS, 0.0, 0.0, STEP, label="zero_grad")
    else:
        _optimizer_events(ev, n, wl, opts, 0.0, P, 0.0, largest, 0.0, P)
    return ev.build(base_f, base_s)


def _forward_units(c: _Fsdp, called: list[_UnitRows]) -> None:
    """Forward: a unit is gathered at its pre-forward; FSDP2 keeps the all-gather output
    (``comm_ctx.all_gather_state``) until the next unit's copy-out is done, to overlap
    them, and the root's post-forward frees the last one."""
    ev, tree = c.ev, c.tree
    prev_ag = None
    for u in sorted(called, key=lambda u: c.f_pre(u.row)):
        b = u.numel * c.pe
        p = c.f_pre(u.row)
        if c.gathered:
            c.gather(p, b, FWD, u.row, u.name or "root", "all-gather output")
        if c.offload:  # the shard is first copied to the GPU (host-to-device) as all-gather input
            ev.add(p + 0.001, COMM, 0.0, u.numel * c.pe, direction=FWD, row=u.row, label="H2D shard")
            ev.add(p + 0.004, COMM, 0.0, -u.numel * c.pe, direction=FWD, row=u.row, label="H2D shard")
        ev.add(p + 0.002, PARAMS, b, direction=FWD, row=u.row, label=f"unsharded {u.name or 'root'}")
        if prev_ag is not None:
            # wait_for_unshard drops comm_ctx.all_gather_state before the copy-out, but its
            # local ``prev_all_gather_state`` keeps the buffer alive until it returns.
            ev.add(p + 0.003, COMM, -prev_ag[0], direction=FWD, row=u.row, label=f"all-gather output {prev_ag[1]}")
        prev_ag = (b, u.name or "root") if c.gathered else None
        if c.resharded(u):
            ev.add(
                c.f_post(u.row),
                PARAMS,
                -b,
                direction=FWD,
                row=int(tree.end[u.row]) - 1,
                edge=1,
                label=f"reshard {u.name or 'root'}",
            )
    if prev_ag is not None:
        last_row = int(tree.end[0]) - 1
        ev.add(
            c.f_post(0) + 0.04,
            COMM,
            -prev_ag[0],
            direction=FWD,
            row=last_row,
            edge=1,
            label=f"all-gather output {prev_ag[1]}",
        )


def _backward_units(c: _Fsdp, called: list[_UnitRows]) -> None:
    """Backward: units in reverse post-forward order; a resharded unit is gathered at its
    pre-backward (unless prefetched), copied out, and prefetches the unit before it."""
    ev, tree = c.ev, c.tree
    post_order = sorted(called, key=lambda u: c.f_post(u.row))
    prefetched: set[str] = set()
    for idx in range(len(post_order) - 1, -1, -1):
        u = post_order[idx]
        b = u.numel * c.pe
        p = c.b_pre(u.row)
        last = int(tree.end[u.row]) - 1  # backward of the unit starts at its last row
        if c.resharded(u):
            name = u.name or "root"
            if c.gathered and u.name not in prefetched:
                c.gather(p, b, BWD, last, name, "all-gather output")
            ev.add(p + 0.002, PARAMS, b, direction=BWD, row=last, label=f"unsharded {name}")
            if c.gathered:
                ev.add(p + 0.003, COMM, -b, direction=BWD, row=last, label=f"all-gather output {name}")
        if idx > 0 and c.gathered:
            v = post_order[idx - 1]
            if c.reshard_after_forward and v.row != 0:
                c.gather(p + 0.004, v.numel * c.pe, BWD, last, v.name, "prefetched all-gather output")
                prefetched.add(v.name)


def _post_backward_units(c: _Fsdp, called: list[_UnitRows], table: WorkloadTable) -> None:
    """Post-backward, in the order it runs (the root's, whose input needs no gradient, runs
    in the final callback): reshard, release the previous unit's reduce-scatter input
    (reduce_scatter_max_input_buffers = 1), reduce-scatter into the sharded gradient.

    With one rank per shard no reduce-scatter runs: foreach_reduce still fills its input
    buffer and copies it to the output, a gradient copy (filed as a temporary, as
    FSDPMemTracker does when no collective claims it)."""
    ev, tree = c.ev, c.tree
    rs_held = None
    rs_cat = COMM if c.gathered else TEMP
    rs_name = "reduce-scatter input" if c.gathered else "gradient copy"

    def when(u: _UnitRows) -> float:
        return c.b_post(u.row) if u.row != 0 else c.pb(0) + 0.99

    for u in sorted(called, key=when):
        b = u.numel * c.pe
        q = when(u)
        anchor = int(tree.first_leaf[u.row]) if u.row != 0 else 0
        name = u.name or "root"
        grads_u = float(table.fixed["param_bytes"][u.grad_rows].sum()) * c.pe / 4.0
        ev.add(q, PARAMS, -b, direction=BWD, row=anchor, edge=1, label=f"reshard {name}")
        if rs_held is not None:
            ev.add(q + 0.001, rs_cat, -rs_held, direction=BWD, row=anchor, edge=1, label=rs_name)
        rs = u.numel * 4.0
        ev.add(q + 0.002, rs_cat, rs, direction=BWD, row=anchor, edge=1, label=f"{rs_name} {name}")
        ev.add(q + 0.003, GRADS, -grads_u, direction=BWD, row=anchor, edge=1, label="unsharded gradients")
        ev.add(q + 0.004, GRADS, 0.0, u.numel * 4.0, direction=BWD, row=anchor, edge=1, label="sharded gradient")
        if c.rs_scratch:  # the backend's scratch while the reduce-scatter runs (after the output exists)
            ev.add(
                q + 0.0042,
                COMM,
                c.rs_scratch * rs,
                direction=BWD,
                row=anchor,
                edge=1,
                label=f"reduce-scatter scratch {name}",
            )
            ev.add(
                q + 0.0046,
                COMM,
                -c.rs_scratch * rs,
                direction=BWD,
                row=anchor,
                edge=1,
                label=f"reduce-scatter scratch {name}",
            )
        if c.offload:  # copied to host memory right away
            ev.add(q + 0.005, GRADS, 0.0, -u.numel * 4.0, direction=BWD, row=anchor, edge=1, label="D2H gradient")
        rs_held = rs
    if rs_held is not None:
        ev.add(c.pb(0) + 0.995, rs_cat, -rs_held, direction=BWD, row=0, edge=1, label=rs_name)
