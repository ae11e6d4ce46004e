"""Sweep points that differ only in links, answered together: one prediction, then numpy.

Grid points that share every key but the link overrides (:data:`LINK_KEYS`: the NIC rate
and count, the inter-node latency, the intra-node rate and latency) share the workload,
the plan, the row times, every compute task's duration and the memory estimate: none of
these reads a link (:mod:`simdl.cluster.linkfree` says what each reads). Such a group is
answered by

1. one ordinary :func:`simdl.predict` of its first point (the template), whose inputs the
   analytic engine hands over (``simdl.analytic.engine.CAPTURE``);
2. for every point, the template's included, only what its links change: each collective's
   duration (:class:`simdl.costs.tasks.CommCosts` of the point's cluster), then the stream
   recurrence of :mod:`simdl.costs.schedule` over all points at once (arrays of tasks x
   points: the same float operations, one numpy call per task instead of one per task and
   point), the busy unions (:func:`union_lengths`) and the step's tail
   (:func:`simdl.analytic.engine.result_of`, the band and the epoch counts as predict adds
   them).

The template's row computed this way must equal its ordinary row (every number to 1e-12
relative, everything else exactly); if it does not, or the template is not an SPMD
analytic prediction (a parameter-server plan's closed form, the simulator, an error), the
group is answered point by point. Notes are not sweep columns and are not recomputed.

Cost per group: one prediction (its memory estimate, 10-20 ms per distinct workload,
plan and device, dominates a cold grid) plus, per task, a few numpy calls over the
group's points, plus per point its collectives' prices and its row.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

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
    key = tuple(sorted((k, v) for k, v in params.items() if k not in LINK_KEYS))
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
    from .sweep import run_one

    workload, cluster, plan, rows, rates, algorithm, loader_workers, config, notes = captured
    if registry.of_plan(plan).evaluate is not None:
        return None  # a strategy's own closed form (the parameter servers'), point by point
    clusters: list = []
    failed: dict[int, dict] = {}
    for i, p in enumerate(points):
        try:
            clusters.append(_cluster(p))
        except SimdlError:
            failed[i] = run_one(p)  # the point's own error row
            clusters.append(None)
    ok = [i for i, c in enumerate(clusters) if c is not None]
    if 0 not in ok:
        return None
    from ..analytic.engine import memory_of

    timings = spmd_timings(workload, [clusters[i] for i in ok], plan, rows, rates, algorithm)
    memory = memory_of(workload, plan, cluster)  # the template's: no link enters it
    out: list[dict[str, Any] | None] = [None] * len(points)
    for i, timing in zip(ok, timings):
        out[i] = _row(points[i], workload, clusters[i], plan, timing, loader_workers, config, notes, memory)
    if out[0] is None or not _same_row(out[0], first):
        return None
    out[0] = first
    for i, r in failed.items():
        out[i] = r
    return out  # type: ignore[return-value]


def _cluster(params: Mapping[str, Any]):
    """The placed cluster ``simdl.predict`` builds for this point (SPMD strategies: no
    parameter-server placement)."""
    from ..cluster import allocate
    from ..predict import _DEFAULTS, DEFAULT_CLUSTER
    from .grid import to_call
    from .whatif import derive_cluster

    kwargs, over = to_call(params)
    spec = derive_cluster(kwargs.get("cluster") or DEFAULT_CLUSTER, **over)
    return allocate(spec, kwargs.get("gpus", _DEFAULTS["gpus"]), kwargs.get("nodes"))


def _row(params, workload, cluster, plan, timing, loader_workers, config, notes, memory) -> dict[str, Any]:
    from ..analytic.engine import result_of
    from ..predict_notes import with_band, with_epoch_counts
    from .sweep import _plain, result_row

    echo = dict(config, cluster=cluster.spec.name)
    result = result_of(
        workload, cluster, plan, timing, loader_workers=loader_workers, config=echo, notes=notes, memory=memory
    )
    result = with_epoch_counts(with_band(result, cluster.spec), workload, plan)
    return result_row({k: _plain(v) for k, v in params.items()}, result)


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


def spmd_timings(workload, clusters: Sequence, plan, rows, rates, algorithm: str) -> list[tuple]:
    """:func:`simdl.analytic.engine._spmd_timing` of one plan on each of ``clusters`` (which
    differ only in links), as a list of its tuples."""
    from ..costs.step import bytes_sent
    from ..costs.tasks import CommCosts, blocking_wait_time, compute_split, compute_task_time
    from ..strategies.plan import COMPUTE

    tasks = plan.tasks
    n, k = len(tasks), len(clusters)
    dur = np.empty((n, k))
    comm_rows = []
    for i, t in enumerate(tasks):
        if t.collective:
            comm_rows.append(i)
        else:
            dur[i] = compute_task_time(t, rows, rates)
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
    # Durations of compute tasks are the same on every cluster: one split for all.
    kinds = compute_split(tasks, rows, dur[:, 0].tolist())
    sent = bytes_sent(plan, clusters[0])
    out = []
    for j, c in enumerate(clusters):
        cp, cm, ab = float(compute[j]), float(comm[j]), float(any_busy[j])
        interference = c.spec.efficiency.comm_compute_interference
        slowdown = 0.0
        if interference is not None and interference.value > 0.0:
            slowdown = interference.value * max(cp + cm - ab, 0.0)  # as simdl.analytic.engine
        wait = blocking_wait_time(c, plan, cp)
        out.append(
            (
                float(makespan[j]) + slowdown + wait,
                cp,
                cm,
                ab,
                sent,
                _staleness(),
                dict(kinds),
                {"interference": slowdown, "blocking_wait": wait},
            )
        )
    return out


def _staleness():
    from ..result import Staleness

    return Staleness()


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


def rows_by_groups(points: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rows for ``points`` in their order, grouped by :func:`group_key`; and how many were
    answered by the vectorised path."""
    groups: dict[Any, list[int]] = {}
    for i, p in enumerate(points):
        key = group_key(p)
        groups.setdefault(("single", i) if key is None else key, []).append(i)
    out: list[dict[str, Any] | None] = [None] * len(points)
    vectorised = 0
    for idx in groups.values():
        rows, vec = run_group([points[i] for i in idx])
        vectorised += len(idx) if vec else 0
        for i, r in zip(idx, rows):
            out[i] = r
    return out, vectorised  # type: ignore[return-value]
