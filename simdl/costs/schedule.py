"""Evaluate an SPMD plan in closed form: a max-plus recurrence over streams.

Each task starts when its stream is free and its dependencies have finished, and runs
for its cost; nothing contends (each stream and each link runs one thing at a time at
full rate). This is the no-contention limit the simulator must agree with.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..strategies.plan import COMPUTE, SpmdPlan
from .comm import CommCosts
from .rates import Rates
from .tasks import RowTimes, compute_task_time


@dataclass(frozen=True)
class Schedule:
    start: list[float]
    end: list[float]
    duration: list[float]

    @property
    def makespan(self) -> float:
        return max(self.end) if self.end else 0.0


def task_durations(plan: SpmdPlan, rows: RowTimes, rates: Rates, comm: CommCosts) -> list[float]:
    out = compute_durations(plan, rows, rates)
    for i, t in enumerate(plan.tasks):
        if t.collective:
            g = plan.groups[t.group]
            out[i] = comm.time(t.collective, t.comm_bytes, g.size, g.scope)
    return out


# The compute tasks' seconds of the (plan, rows, rates) last asked for: a sweep's link variants
# (simdl.explore.vector) ask again for what their template's prediction computed.
_COMPUTE: dict[tuple[int, int, int], tuple] = {}


def compute_durations(plan: SpmdPlan, rows: RowTimes, rates: Rates) -> list:
    """Each task's seconds where it computes (None for a collective): a new list each call,
    memoised by the inputs' identity (kept, so that their ids are not reused)."""
    key = (id(plan), id(rows), id(rates))
    hit = _COMPUTE.get(key)
    if hit is None or hit[0] is not plan or hit[1] is not rows or hit[2] is not rates:
        value = tuple(None if t.collective else compute_task_time(t, rows, rates) for t in plan.tasks)
        if len(_COMPUTE) >= 64:
            _COMPUTE.clear()
        hit = _COMPUTE[key] = (plan, rows, rates, value)
    return list(hit[3])


def schedule(plan: SpmdPlan, durations: list[float]) -> Schedule:
    free: dict[str, float] = {}
    start: list[float] = []
    end: list[float] = []
    for t, d in zip(plan.tasks, durations):
        s = free.get(t.stream, 0.0)
        for dep in t.deps:
            if end[dep] > s:
                s = end[dep]
        start.append(s)
        end.append(s + d)
        free[t.stream] = s + d
    return Schedule(start, end, durations)


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals."""
    total = 0.0
    cur_s = 0.0
    cur_e: float | None = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def stream_busy(plan: SpmdPlan, sched: Schedule) -> tuple[float, float, float]:
    """(compute-stream busy, communication busy, any-kernel busy) seconds."""
    comp = [(s, e) for t, s, e in zip(plan.tasks, sched.start, sched.end) if t.stream == COMPUTE]
    comm = [(s, e) for t, s, e in zip(plan.tasks, sched.start, sched.end) if t.stream != COMPUTE]
    return busy_time(comp), busy_time(comm), busy_time(comp + comm)
