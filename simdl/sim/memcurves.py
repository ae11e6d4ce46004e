"""Memory over time per rank class: the memory timeline's events at simulated times.

The allocation events of :mod:`simdl.memory.timeline` happen in program order; each is
anchored to a task of the plan (:func:`simdl.memory.place.event_anchors`, computed once),
and the simulated start and end of that task in the last iteration place it in time. All
classes are placed together, ``CHUNK`` classes per numpy call (memory stays bounded at
16,384 classes), and classes with the same task times share one array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHUNK = 1024  # rank classes per numpy call: CHUNK x events floats per temporary


@dataclass(frozen=True)
class MemoryCurve:
    """One rank class's live tensor bytes per category (simdl.memory.timeline.CATEGORIES)
    after each allocation event, and the simulated time of each event."""

    times: np.ndarray
    levels: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.levels.sum(axis=1)


def task_windows(records: list, n_tasks: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every task in ``iteration``, from that iteration's first start;
    a task with no record there (a pseudo task) sits at the iteration's end."""
    last = [r for r in records if r.iteration == iteration]
    t0 = min((r.start for r in last), default=0.0)
    t1 = max((r.end for r in last), default=0.0) - t0
    start = [t1] * n_tasks
    stop = [t1] * n_tasks
    for r in last:
        if 0 <= r.task < n_tasks:
            start[r.task], stop[r.task] = r.start - t0, r.end - t0
    return np.array(start), np.array(stop)


def memory_curves(timeline, tasks, by_class: list[list], iteration: int, row_times) -> dict[int, MemoryCurve]:
    """class -> :class:`MemoryCurve` over ``iteration``, for records grouped by class."""
    from ..memory.place import event_anchors, event_times

    levels = timeline.levels()
    n = len(tasks)
    windows = [task_windows(recs, n, iteration) for recs in by_class]
    if len(levels) <= 1:
        zero = np.zeros(1)
        return {c: MemoryCurve(zero, levels) for c in range(len(by_class))}
    anchors = event_anchors(timeline, tasks, row_times)
    unique: dict[bytes, int] = {}
    rows: list[int] = []
    starts: list[np.ndarray] = []
    stops: list[np.ndarray] = []
    for s, e in windows:
        key = s.tobytes() + e.tobytes()
        if key not in unique:
            unique[key] = len(starts)
            starts.append(s)
            stops.append(e)
        rows.append(unique[key])
    times: list[np.ndarray] = []
    for lo in range(0, len(starts), CHUNK):
        t = event_times(
            timeline, tasks, np.array(starts[lo : lo + CHUNK]), np.array(stops[lo : lo + CHUNK]), row_times, anchors
        )
        t = np.maximum.accumulate(t, axis=1)
        zeros = np.zeros((len(t), 1))
        times.extend(np.concatenate([zeros, t], axis=1))
    return {c: MemoryCurve(times[k], levels) for c, k in enumerate(rows)}
