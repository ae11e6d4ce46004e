"""Per-rank memory over time, from allocation and free events derived from the timeline.

The categories and sizes are those of :mod:`simdl.memory.model`; what the timeline adds is
*when* each tensor lives, so that the peak is read off the simulated schedule instead of
being assumed (for example two FSDP units gathered at once because a prefetch ran ahead).

Events, per rank, for the steady-state (last) iteration:

* static: parameters (a 1/shard slice under FSDP), optimizer state, DDP's gradient buckets,
  the PS worker's pulled-parameter buffer -- allocated before the iteration;
* forward rows: saved activations of row r allocated when row r finishes (the forward
  task's duration is split over its rows in proportion to their row times);
* backward rows, in reverse: when row r starts, its output and input gradients (transient)
  and its parameters' gradients (a 1/shard slice under FSDP) appear; when it ends, the
  transient gradients and row r's saved activations are freed -- the same accounting as
  ``memory.model._backward_peak``, so with the same schedule the peaks agree;
* FSDP: the all-gather output buffer lives from the all-gather's start to the end of its
  copy-out; the unsharded unit from the copy-out's start until the unit's last forward run
  (reshard after forward, root excepted) or last backward run; the reduce-scatter input and
  the replicate all-reduce buffer live while their collective runs;
* mixed precision under DDP: autocast's 16-bit weight copies (P/2) from the first forward
  to the end of backward.

Process overheads (context, workspace, fragmentation) are added on top of the tensor peak
as the analytic model does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..result import MEMORY_CATEGORIES
from ..strategies.plan import COMPUTE

_CAT = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}


@dataclass(frozen=True)
class MemoryTimeline:
    times: np.ndarray  # event times (s)
    by_category: np.ndarray  # (len(times), len(MEMORY_CATEGORIES)) bytes after each event
    peak_tensor_bytes: float
    peak_time: float
    breakdown: dict[str, float]  # at the peak, tensors only

    @property
    def total(self) -> np.ndarray:
        return self.by_category.sum(axis=1)


def _unit_of(name: str) -> str:
    """'forward:layer1.0[3:9]' -> 'layer1.0'; 'all_gather:fwd:root' -> 'root'."""
    head = name.rpartition("[")[0] if name.endswith("]") else name
    return head.rsplit(":", 1)[-1]


def build(workload, plan, cluster, act_factor: float, records, rows, *, tasks=None, ps: bool = False) -> MemoryTimeline:
    """``records``: TaskRecord-like objects (task, start, end) of one iteration of one rank."""
    tasks = plan.tasks if tasks is None else tasks
    table = workload.table
    b = workload.batch_size
    P = workload.param_bytes
    saved = table.column("saved_bytes", b) * act_factor
    out = table.column("output_bytes", b) * act_factor
    prev_out = np.concatenate([[0.0], out[:-1]])
    transient = out + prev_out
    details = getattr(plan, "details", {})
    strategy = plan.strategy
    fsdp = strategy.startswith("fsdp")
    shard = details.get("shard_size", 1) if fsdp else 1
    grads = table.fixed["param_bytes"] * (1.0 / shard)

    t0 = min((r.start for r in records), default=0.0)
    ev: list[tuple[float, int, int, float]] = []  # (time, order, category, delta)
    seq = [0]

    def add(t: float, cat: str, delta: float) -> None:
        if delta:
            seq[0] += 1
            ev.append((t, seq[0], _CAT[cat], float(delta)))

    before = t0 - 1e-9
    if ps:
        add(before, "params", P)
        add(before, "comm_buffers", details.get("comm_buffer_bytes", P))
    elif fsdp:
        add(before, "params", P / shard)
        add(before, "optimizer", workload.optimizer_state_copies * P / shard)
    else:
        add(before, "params", P)
        add(before, "optimizer", workload.optimizer_state_copies * P)
        add(before, "comm_buffers", details.get("comm_buffer_bytes", 0.0))

    # FSDP: where each unit's unsharded parameters are freed.
    last_run: dict[tuple[str, str], int] = {}
    if fsdp:
        for i, t in enumerate(tasks):
            if t.stream == COMPUTE and t.rows is not None:
                last_run[(_unit_of(t.name), t.direction)] = i
    reshard = details.get("reshard_after_forward", False)
    unsharded: dict[str, float] = {}
    ag_buffer: dict[str, float] = {}
    amp_ddp = workload.mixed_precision and not fsdp and not ps
    first_fwd = min((r.start for r in records if tasks[r.task].phase == "fwd"), default=t0)
    last_bwd = max((r.end for r in records if tasks[r.task].direction == "bwd"), default=t0)
    if amp_ddp:
        add(first_fwd, "activations", P / 2)
        add(last_bwd, "activations", -P / 2)

    for r in sorted(records, key=lambda r: (r.start, r.task)):
        t = tasks[r.task]
        if t.is_comm:
            if t.collective == "all_gather":
                ag_buffer[_unit_of(t.name)] = t.comm_bytes
                add(r.start, "comm_buffers", t.comm_bytes)
            elif fsdp:  # DDP all-reduces in place in its static buckets
                add(r.start, "comm_buffers", t.comm_bytes)
                add(r.end, "comm_buffers", -t.comm_bytes)
            continue
        if t.name.startswith("copy_out:"):
            u = _unit_of(t.name)
            size = t.bytes / 2.0
            unsharded[u] = unsharded.get(u, 0.0) + size
            add(r.start, "params", size)
            add(r.end, "comm_buffers", -ag_buffer.pop(u, 0.0))
            continue
        if t.rows is None:
            continue
        a, z = t.rows
        if z <= a:
            continue
        span = r.end - r.start
        if t.direction == "fwd":
            w = rows.fwd[a:z]
            tot = float(w.sum())
            ends = r.start + span * (np.cumsum(w) / tot if tot > 0 else np.linspace(1, 1, z - a))
            for k, row in enumerate(range(a, z)):
                add(float(ends[k]), "activations", saved[row])
        else:
            idx = np.arange(z - 1, a - 1, -1)
            w = rows.bwd[idx]
            tot = float(w.sum())
            cum = np.concatenate([[0.0], np.cumsum(w)]) / tot if tot > 0 else np.linspace(0, 1, len(idx) + 1)
            for k, row in enumerate(idx.tolist()):
                ts, te = r.start + span * cum[k], r.start + span * cum[k + 1]
                add(ts, "activations", transient[row])
                add(ts, "grads", grads[row])
                add(te, "activations", -transient[row] - saved[row])
        if fsdp:
            u = _unit_of(t.name)
            free = (t.direction == "fwd" and reshard and u != "root" and last_run.get((u, "fwd")) == r.task) or \
                   (t.direction == "bwd" and last_run.get((u, "bwd")) == r.task)
            if free and unsharded.get(u):
                add(r.end, "params", -unsharded.pop(u))

    ev.sort()
    times = np.array([e[0] for e in ev])
    deltas = np.zeros((len(ev), len(MEMORY_CATEGORIES)))
    for k, e in enumerate(ev):
        deltas[k, e[2]] = e[3]
    levels = np.cumsum(deltas, axis=0)
    total = levels.sum(axis=1)
    k = int(np.argmax(total)) if len(total) else 0
    breakdown = {c: float(levels[k, i]) if len(total) else 0.0 for c, i in _CAT.items()}
    return MemoryTimeline(times, levels, float(total[k]) if len(total) else 0.0,
                          float(times[k]) if len(times) else 0.0, breakdown)


def process_overheads(cluster, tensor_bytes: float) -> float:
    """Context + workspace + fragmentation, as :func:`simdl.memory.model.estimate_memory` adds them."""
    mem = cluster.spec.memory
    return mem.context_bytes.value + mem.workspace_bytes.value + mem.allocator_fragmentation.value * tensor_bytes
