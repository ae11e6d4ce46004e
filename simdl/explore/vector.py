"""Sweep points that differ only in links, answered together: one prediction, then numpy.

Grid points that share every key but the link overrides (:data:`LINK_KEYS`: the NIC rate
and count, the inter-node latency, the intra-node rate and latency) share the workload,
the plan, the row times, every compute task's duration and the memory estimate: none of
these reads a link (:mod:`simdl.cluster.linkfree` says what each reads). Such a group is
answered by

1. one ordinary :func:`simdl.predict` of its first point (the template), whose inputs the
   analytic engine hands over (``simdl.analytic.engine.CAPTURE``);
2. for all points at once, the template's included, only what their links change: each
   point's placed cluster (:func:`simdl.explore.linkcost.point_clusters`, one per link
   variant of a grid), the collectives' durations as arrays over the points' bandwidths
   and latencies (:func:`simdl.explore.linkcost.comm_durations`: the closed forms of
   :class:`simdl.costs.comm.CommCosts`; a profile's regime curves are priced cluster by
   cluster), the stream recurrence of :mod:`simdl.costs.schedule` (arrays of tasks x
   points: the same float operations, one numpy call per task instead of one per task and
   point), the busy unions (:func:`union_lengths`) and the step's tail as columns
   (:func:`_rows_of`: what :func:`simdl.analytic.engine.result_of` and ``simdl.predict``'s
   band and epoch counts compute, with the same float operations);
3. each point's row: its own keys, then the template's result columns with the columns its
   links change.

Two checks: the template's row assembled this way must equal its ordinary row, and the last
point's assembled row must equal its row through the Result (from its own timing): every
number to 1e-12 relative, everything else exactly. If either fails, or the template is not
an SPMD analytic prediction (a parameter-server plan's closed form, the simulator, an
error), the group is answered point by point. Notes are not sweep columns and are not
recomputed.

Cost per group: one prediction, whose memory estimate (a caching-allocator replay, 5-20 ms
per distinct workload, plan and device) dominates; plus, per task, a few numpy calls over
the group's points; plus, per point, its cluster looked up and its row's dictionary built
(tens of microseconds). On benchmarks/bench_scale.py's network what-if grid (288 groups of
72 points) the memory estimates take half the CPU time: about 8,500 points per CPU second in
all, 18,000 for the rest (the bench prints both).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import SimdlError

#: Cluster overrides that change only links (simdl.explore.whatif): the points of a grid that
#: differ only in these share one vectorised evaluation. ``pcie_GB_per_s`` is not among them:
#: the ZeRO plan prices its offload copies by it.
LINK_KEYS = ("intra_bandwidth_GB_per_s", "intra_latency_us", "nic_Gb_per_s", "nics_per_node", "inter_latency_us")
#: Relative difference above which the template's vectorised row counts as not matching.
SELF_CHECK_RTOL = 1e-12


def group_key(params: Mapping[str, Any]) -> tuple | None:
    """What a point shares with the others of its group (None: not groupable)."""
    if params.get("engine", "analytic") != "analytic":
        return None
    # The type is part of the key: 16 and 16.0 GPUs are equal but not the same point.
    key = tuple(sorted((k, type(v).__name__, v) for k, v in params.items() if k not in LINK_KEYS))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def run_group(points: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Rows for points that share a :func:`group_key`, in their order, and whether they were
    answered by the vectorised path (False: point by point)."""
    from ..analytic import engine
    from .sweep import run_one

    captured: list = []
    token = engine.CAPTURE.set(captured)
    try:
        first = run_one(points[0])
    finally:
        engine.CAPTURE.reset(token)
    if len(points) == 1:
        return [first], False
    rows = None
    if first.get("error") is None and len(captured) == 1:
        rows = _vector_rows(points, captured[0], first)
    if rows is None:
        return [first] + [run_one(p) for p in points[1:]], False
    return rows, True


def _vector_rows(points, captured, first: dict) -> list[dict[str, Any]] | None:
    from ..strategies import registry
    from .linkcost import point_clusters
    from .sweep import run_one

    workload, cluster, plan, rows, rates, algorithm, loader_workers, config, notes = captured
    if registry.of_plan(plan).evaluate is not None:
        return None  # a strategy's own closed form (the parameter servers'), point by point
    placed = point_clusters(points)
    ok = [i for i, c in enumerate(placed) if not isinstance(c, SimdlError)]
    if not ok or ok[0] != 0:
        return None
    clusters = [placed[i] for i in ok]
    timing = spmd_timings(workload, clusters, plan, rows, rates, algorithm)
    if timing is None:
        return None
    from ..analytic.engine import memory_of

    memory = memory_of(workload, plan, cluster)  # the template's: no link enters it
    base = _row({}, workload, clusters[0], plan, timing.point(0), loader_workers, config, notes, memory)
    params = _plain_params([points[i] for i in ok])
    built = _rows_of(params, base, workload, clusters, plan, timing, loader_workers, config.get("gpus", 1))
    if built is None or not _same_row(built[0], first):
        return None
    # The last point differs from the template in its links: its row from its own timing
    # tuple through the Result path must be the one assembled from the columns.
    last = _row(points[ok[-1]], workload, clusters[-1], plan, timing.point(-1), loader_workers, config, notes, memory)
    if not _same_row(built[-1], last):
        return None
    out: list[dict[str, Any] | None] = [None] * len(points)
    for i, r in zip(ok, built):
        out[i] = r
    out[0] = first
    for i, c in enumerate(placed):
        if isinstance(c, SimdlError):
            out[i] = run_one(points[i])  # the point's own error row
    return out  # type: ignore[return-value]


_PLAIN = (str, int, float, bool, type(None))


def _plain(v: Any) -> Any:
    """As :func:`simdl.explore.sweep._plain`: a CSV-ready value, else its str."""
    return v if v.__class__ in _PLAIN or isinstance(v, _PLAIN) else str(v)


def _plain_params(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each point's own keys as its row holds them; the points share every value but their
    links' (and its type: :func:`group_key`), so only those are converted per point."""
    keys = tuple(points[0])
    shared = {k: _plain(v) for k, v in points[0].items()}
    links = [k for k in keys if k in LINK_KEYS]
    out = []
    for p in points:
        if tuple(p) == keys:
            row = dict(shared)
            for k in links:
                row[k] = _plain(p[k])
        else:
            row = {k: _plain(v) for k, v in p.items()}
        out.append(row)
    return out


def _row(params, workload, cluster, plan, timing, loader_workers, config, notes, memory) -> dict[str, Any]:
    """A point's row through the Result, as ``simdl.predict`` and the sweep build it."""
    from ..analytic.engine import result_of
    from ..predict_notes import with_band, with_epoch_counts
    from .sweep import result_row

    echo = dict(config, cluster=cluster.spec.name)
    result = result_of(
        workload, cluster, plan, timing, loader_workers=loader_workers, config=echo, notes=notes, memory=memory
    )
    result = with_epoch_counts(with_band(result, cluster.spec), workload, plan)
    return result_row({k: _plain(v) for k, v in params.items()}, result)


def _rows_of(params, base, workload, clusters, plan, timing, loader_workers, gpus) -> list[dict[str, Any]] | None:
    """Every point's row: its own keys, then ``base`` (the template's result columns) with the
    columns links change replaced, computed over all points as
    :func:`simdl.analytic.engine.result_of`, :func:`simdl.costs.step.step_split`,
    :func:`simdl.predict_notes.with_band` and ``with_epoch_counts`` compute them one by one
    (the same float operations); None where a point's own key is also a result column."""
    from ..band import band, step_spread
    from ..costs.step import data_time
    from ..workload.epoch import epoch_counts, short_epoch_note, throughput

    if any(k in base for k in set().union(*params)):
        return None
    it, cp, cm, ab = timing.iteration, timing.compute, timing.comm, timing.any_busy
    cols: dict[str, Any] = {}
    cols["exposed_comm_time_s"] = np.where(cm > 0, np.maximum(it - cp, 0.0), 0.0)
    loader = data_time(workload, clusters[0], loader_workers) * workload.grad_accumulation
    stalled = loader > it
    stall = np.where(stalled, loader - it, 0.0)
    it = np.where(stalled, loader, it)
    total = sum(timing.kinds.values())
    scale = cp / total if total > 0 else np.zeros(len(it))
    for k, v in timing.kinds.items():
        cols[f"step_{k}_s"] = v * scale
    cols["step_interference_s"] = timing.slowdown
    cols["step_blocking_wait_s"] = timing.wait
    cols["step_exposed_comm_s"] = np.maximum(it - stall - cp - timing.slowdown - timing.wait, 0.0)
    cols["step_input_stall_s"] = stall
    spi = workload.batch_size * workload.grad_accumulation * plan.data_parallel
    epoch = math.ceil(workload.train_samples / spi) * it
    positive = it > 0
    safe = np.where(positive, it, 1.0)
    cols["iteration_time_s"] = it
    cols["epoch_time_s"] = epoch
    cols["total_time_s"] = total_time = epoch * workload.epochs
    cols["gpu_hours"] = total_time * gpus / 3600.0  # as simdl.explore.sweep.result_row
    counts = epoch_counts(workload.train_samples, plan.data_parallel, workload.batch_size, workload.grad_accumulation)
    if short_epoch_note(counts, workload.batch_size, workload.grad_accumulation) is None:
        cols["throughput_samples_per_s"] = np.where(positive, spi / safe, 0.0)
    else:
        cols["throughput_samples_per_s"] = np.array([throughput(counts, x) for x in it.tolist()])
    cols["gpu_utilization"] = np.where(positive, np.minimum(cp / safe, 1.0), 0.0)
    cols["gpu_utilization_any_kernel"] = np.where(positive, np.minimum(ab / safe, 1.0), 0.0)
    cols["compute_time_s"], cols["comm_time_s"] = cp, cm
    spread = step_spread(clusters[0].spec)
    if spread is not None:
        lo, hi = band(1.0, spread.sigma)
        cols["iteration_time_band_low_s"], cols["iteration_time_band_high_s"] = it * lo, it * hi
    cols["config.cluster"] = [c.spec.name for c in clusters]
    if any(k not in base for k in cols):
        return None
    names = list(cols)
    values = [v.tolist() if isinstance(v, np.ndarray) else v for v in cols.values()]
    out = []
    for p, vals in zip(params, zip(*values)):
        row = dict(p)
        row.update(base)
        row.update(zip(names, vals))
        out.append(row)
    return out


def _same_row(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if list(a) != list(b):
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or abs(x - y) <= SELF_CHECK_RTOL * max(abs(x), abs(y))):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


# ----------------------------------------------------------------------------- the timing


class Timings(NamedTuple):
    """:func:`simdl.analytic.engine._spmd_timing` of one plan on several clusters: one array
    entry per cluster, and what is the same on all."""

    iteration: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    any_busy: np.ndarray
    slowdown: np.ndarray
    wait: np.ndarray
    sent: float
    kinds: dict[str, float]

    def point(self, j: int) -> tuple:
        """The timing tuple of cluster ``j``, as ``_spmd_timing`` returns it."""
        from ..result import Staleness

        return (
            float(self.iteration[j]),
            float(self.compute[j]),
            float(self.comm[j]),
            float(self.any_busy[j]),
            self.sent,
            Staleness(),
            dict(self.kinds),
            {"interference": float(self.slowdown[j]), "blocking_wait": float(self.wait[j])},
        )


def spmd_timings(workload, clusters: Sequence, plan, rows, rates, algorithm: str) -> Timings | None:
    """:func:`simdl.analytic.engine._spmd_timing` of one plan on each of ``clusters`` (which
    differ only in links); None where they differ in more."""
    from ..costs.comm import CommCosts
    from ..costs.schedule import compute_durations
    from ..costs.step import bytes_sent
    from ..costs.tasks import compute_split
    from ..strategies.plan import COMPUTE
    from .linkcost import comm_durations, shared_key

    tasks = plan.tasks
    n, k = len(tasks), len(clusters)
    base = shared_key(clusters[0])
    if any(shared_key(c) != base for c in {id(c): c for c in clusters}.values()):
        return None
    dur = np.empty((n, k))
    own = compute_durations(plan, rows, rates)
    comm_rows = [i for i, d in enumerate(own) if d is None]
    if n:
        dur[:] = np.array([0.0 if d is None else d for d in own])[:, None]
    priced = comm_durations(plan, clusters, algorithm, comm_rows) if comm_rows else None
    if priced is not None:
        dur[comm_rows] = priced
    elif comm_rows:  # regime curves: each cluster's own CommCosts
        for j, c in enumerate(clusters):
            costs = CommCosts.for_plan(c, plan, algorithm)
            for i in comm_rows:
                t = tasks[i]
                g = plan.groups[t.group]
                dur[i, j] = costs.time(t.collective, t.comm_bytes, g.size, g.scope)
    start, end = _schedule(tasks, dur)
    on_compute = np.array([t.stream == COMPUTE for t in tasks], dtype=bool)
    compute = union_lengths(start[on_compute], end[on_compute])
    comm = union_lengths(start[~on_compute], end[~on_compute])
    any_busy = union_lengths(start, end)
    makespan = end.max(axis=0) if n else np.zeros(k)
    # The clusters share their efficiency factors (linkcost.shared_key): one set of scalars.
    eff = clusters[0].spec.efficiency
    interference = eff.comm_compute_interference
    slowdown = np.zeros(k)
    if interference is not None and interference.value > 0.0:
        slowdown = interference.value * np.maximum(compute + comm - any_busy, 0.0)  # as simdl.analytic.engine
    w = eff.collective_blocking_wait  # simdl.costs.comm.blocking_wait_time
    wait = w.value * compute if w is not None and plan.facts.blocking_collectives else np.zeros(k)
    # Durations of compute tasks are the same on every cluster: one split for all.
    kinds = compute_split(tasks, rows, dur[:, 0].tolist())
    iteration = makespan + slowdown + wait
    return Timings(iteration, compute, comm, any_busy, slowdown, wait, bytes_sent(plan, clusters[0]), kinds)


def _schedule(tasks, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simdl.costs.schedule.schedule` over the columns of ``dur`` (tasks x points)."""
    n, k = dur.shape
    start = np.empty((n, k))
    end = np.empty((n, k))
    zero = np.zeros(k)
    free: dict[str, np.ndarray] = {}
    for i, t in enumerate(tasks):
        s = free.get(t.stream, zero)
        for dep in t.deps:
            s = np.maximum(s, end[dep])
        start[i] = s
        e = end[i]
        np.add(s, dur[i], out=e)
        free[t.stream] = e
    return start, end


def union_lengths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`simdl.costs.schedule.busy_time` of each column's intervals: intervals sorted by
    start, empty ones skipped, a run merged while the next starts at or before its end, the
    runs' lengths summed in order (the same additions as the scalar version)."""
    n, k = start.shape
    if n == 0:
        return np.zeros(k)
    order = np.argsort(start, axis=0, kind="stable")
    s = np.take_along_axis(start, order, axis=0)
    e = np.take_along_axis(end, order, axis=0)
    valid = e > s
    reach = np.maximum.accumulate(np.where(valid, e, -math.inf), axis=0)
    before = np.vstack([np.full((1, k), -math.inf), reach[:-1]])
    opens = valid & (s > before)
    # Runs in column order: (column, row) of every run's first interval.
    col, row = np.nonzero(opens.T)
    last_of_col = np.ones(len(col), dtype=bool)
    last_of_col[:-1] = col[1:] != col[:-1]
    run_end = np.empty(len(col))
    nxt = np.flatnonzero(~last_of_col)
    run_end[nxt] = before[row[nxt + 1], col[nxt + 1]]
    run_end[last_of_col] = reach[-1, col[last_of_col]]
    lengths = run_end - s[row, col]
    return np.bincount(col, weights=lengths, minlength=k)


def link_groups(points: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The indices of ``points`` by :func:`group_key`, in first-seen order (one ungroupable: alone)."""
    groups: dict[Any, list[int]] = {}
    for i, p in enumerate(points):
        key = group_key(p)
        groups.setdefault(("single", i) if key is None else key, []).append(i)
    return list(groups.values())


def rows_of_groups(groups: Sequence[Sequence[Mapping[str, Any]]], between=None) -> tuple[list[dict[str, Any]], int]:
    """:func:`run_group` of each group, ``between()`` after each: rows, how many vectorised."""
    out: list[dict[str, Any]] = []
    vectorised = 0
    for g in groups:
        rows, vec = run_group(g)
        vectorised += len(g) if vec else 0
        out.extend(rows)
        if between is not None:
            between()
    return out, vectorised


def rows_by_groups(points: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rows for ``points`` in their order, grouped by :func:`group_key`; and how many were
    answered by the vectorised path."""
    idx = link_groups(points)
    rows, vectorised = rows_of_groups([[points[i] for i in g] for g in idx])
    out: list[dict[str, Any] | None] = [None] * len(points)
    for i, r in zip((i for g in idx for i in g), rows):
        out[i] = r
    return out, vectorised  # type: ignore[return-value]
