"""Place a memory timeline's events in time, given a schedule of the plan's tasks.

The timeline anchors every event to (direction, table row, edge); this resolves the
anchor to the compute task that runs that row and to the moment inside it, using the
per-row times. The analytic engine's schedule is used by :func:`analytic_memory_curve`;
the simulator can call :func:`event_times` with its own task start/end times.
"""

from __future__ import annotations

import numpy as np

from ..strategies.plan import PSPlan, SpmdPlan, Task
from .timeline import BWD, FWD, STEP, Timeline


def _row_tasks(tasks: tuple[Task, ...], n_rows: int) -> dict[str, np.ndarray]:
    """For each direction, the index of the last task that runs each row (-1: none)."""
    out = {d: np.full(n_rows, -1, dtype=np.int64) for d in ("fwd", "bwd")}
    for i, t in enumerate(tasks):
        if t.rows and t.phase == t.direction and t.direction in out:
            out[t.direction][t.rows[0] : t.rows[1]] = i
    return out


def task_of_events(timeline: Timeline, tasks: tuple[Task, ...], n_rows: int) -> np.ndarray:
    """Plan task index of each event (-1: before the iteration's first task)."""
    rt = _row_tasks(tasks, n_rows)
    opt = max((i for i, t in enumerate(tasks) if t.phase == "opt"), default=len(tasks) - 1)
    out = np.full(len(timeline.category), -1, dtype=np.int64)
    rows = np.maximum(timeline.row, 0)
    out[timeline.direction == FWD] = rt["fwd"][rows[timeline.direction == FWD]]
    out[timeline.direction == BWD] = rt["bwd"][rows[timeline.direction == BWD]]
    out[timeline.direction == STEP] = opt
    return out


def event_anchors(timeline: Timeline, tasks: tuple[Task, ...], row_times) -> tuple[np.ndarray, ...]:
    """Where each event sits: ``(task, offset, fraction)`` -- its plan task (-1: none), and its
    time from that task's start as ``offset`` seconds plus ``fraction`` of the task's length.

    A row event happens when that row's forward (or backward) starts (edge 0) or ends
    (edge 1) inside its task; optimizer events at the optimizer task's start or end.
    """
    task = task_of_events(timeline, tasks, len(row_times.fwd))
    offset = np.zeros(len(task))
    fraction = np.zeros(len(task))
    for k in np.flatnonzero(task >= 0).tolist():
        tk = tasks[task[k]]
        d, r, e = timeline.direction[k], timeline.row[k], timeline.edge[k]
        if d == FWD and tk.rows:
            offset[k] = row_times.fwd_cum[r + e] - row_times.fwd_cum[tk.rows[0]]
        elif d == BWD and tk.rows:
            offset[k] = row_times.bwd_cum[tk.rows[1]] - row_times.bwd_cum[r + 1 - e]
        else:
            fraction[k] = e
    return task, offset, fraction


def event_times(timeline: Timeline, tasks: tuple[Task, ...], start, end, row_times, anchors=None) -> np.ndarray:
    """Seconds from the iteration start at which each event happens (:func:`event_anchors`),
    never past its task's end.

    ``start``/``end``: per-task times, or one row of them per rank class (2-D: one row of
    event times each); ``row_times``: a :class:`simdl.analytic.costs.RowTimes`.
    """
    task, offset, fraction = anchors if anchors is not None else event_anchors(timeline, tasks, row_times)
    start = np.asarray(start, dtype=float)
    end = np.asarray(end, dtype=float)
    at = np.maximum(task, 0)
    s, e = start[..., at], end[..., at]
    t = np.minimum(s + np.maximum(offset + fraction * (e - s), 0.0), e)
    t[..., task < 0] = 0.0
    return t


def analytic_memory_curve(workload, cluster, plan: SpmdPlan | PSPlan, timeline: Timeline | None = None):
    """(times, levels) of one rank over one iteration on the analytic schedule.

    ``levels`` is (events + 1, categories) as :meth:`Timeline.levels`; ``times[0] = 0``.
    """
    from ..analytic.costs import (
        CommCosts,
        compute_task_time,
        device_rates,
        memory_bound_time,
        row_times,
        spmd_or_ps_rates,
    )
    from ..analytic.schedule import schedule, task_durations
    from .model import timeline_for

    tl = timeline or timeline_for(workload, plan, cluster)
    rates = spmd_or_ps_rates(device_rates(cluster, workload.precision, workload.memory_format), plan, workload.table)
    rows = row_times(workload.table, workload.batch_size, rates)
    if isinstance(plan, PSPlan):
        tasks = plan.worker_tasks
        durations = [compute_task_time(t, rows, rates) for t in tasks]
        start, end, clock = [], [], 0.0
        for d in durations:
            start.append(clock)
            clock += d
            end.append(clock)
        # The worker's push/pull at the end: one pseudo task for the STEP events.
        tasks = tasks + (Task("push_pull", "compute", "opt"),)
        start.append(clock)
        end.append(clock + memory_bound_time(plan.push_bytes + plan.pull_bytes, 0, rates))
    else:
        tasks = plan.tasks
        sched = schedule(plan, task_durations(plan, rows, rates, CommCosts.for_plan(cluster, plan)))
        start, end = sched.start, sched.end
    times = event_times(tl, tasks, start, end, rows)
    # Events are in program order; keep time monotone where anchors tie or cross streams.
    times = np.maximum.accumulate(times) if len(times) else times
    return np.concatenate([[0.0], times]), tl.levels()
