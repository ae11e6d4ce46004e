"""Ranks executing an SPMD plan: streams in order, CUDA-event dependencies, collectives.

As PyTorch runs them on a GPU: the tasks of one stream run in order; a task also waits
for the tasks it depends on (a CUDA event recorded on another stream); a collective
occupies its communication stream from the moment the stream reaches it until the
collective has finished on the whole group (NCCL kernels spin until their peers arrive,
which is also why nvidia-smi counts them as busy). A rank starts iteration i+1 when all
its tasks of iteration i have finished (the next forward follows the optimizer step, and
the next iteration's all-gathers read the parameters that step wrote).

Compute durations are the analytic engine's (:func:`simdl.analytic.schedule.task_durations`),
times the rank's speed factor and jitter draw. A forward that starts a micro-step first
takes a batch from the rank's data loader (:class:`LoaderClock`).

Rank classes (symmetry). Without per-rank heterogeneity every rank runs the same plan
with the same durations, and a collective ends at the same time for all members, so all
ranks follow identical timelines: one class stands for a whole set of ranks, and a
collective launches once every member rank has arrived (a class's arrival counts for all
its members). This is exact when the ranks of a class have the same speed factor and no
jitter (:meth:`Heterogeneity.classes`): links are still simulated one by one, so link loads
are not approximated. With jitter each rank is its own class.

Only the network lives on the SimPy timeline. A rank class is not a SimPy process: its
compute tasks and its arrivals at collectives are resolved by arithmetic (a task starts at
the latest of its stream predecessor's end and its dependencies' ends, as the SimPy
processes of one stream would resume, and ends ``duration`` later), and it is woken only
when a collective it waits for ends. A collective instance launches on the timeline at the
exact time its last member arrives. The data loader is a bounded queue solved the same
way. Cost: O(classes x tasks x iterations) arithmetic plus one timeline event per
collective instance launched, independent of how many ranks wait for it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import simpy

from .clock import PREFETCH_FACTOR, LoaderClock, call_at
from .collectives import Collectives, group_instances, run_collective


class Loader:
    """A rank's DataLoader: ``workers`` processes each producing a batch every ``batch_time``
    seconds (batch size x per-sample cost), so one batch per ``batch_time / workers`` in
    steady state, as the analytic model's ``data_time``, into a queue of ``PREFETCH_FACTOR x workers`` batches (0 workers: the main
    process loads, modelled as one worker, as the analytic model does)."""

    def __init__(self, env: simpy.Environment, workers: int, batch_time: float):
        self.env = env
        n = max(workers, 1)
        self.batches = simpy.Store(env, capacity=PREFETCH_FACTOR * n)
        self.batch_time = batch_time
        if batch_time > 0:
            for _ in range(n):
                env.process(self._worker())

    def _worker(self):
        while True:
            yield self.env.timeout(self.batch_time)
            yield self.batches.put(1)

    def get(self):
        if self.batch_time <= 0:
            return None
        return self.batches.get()


@dataclass(slots=True)
class TaskRecord:
    cls: int
    iteration: int
    task: int
    start: float
    end: float
    stream: str
    name: str
    phase: str
    is_comm: bool


@dataclass
class SpmdRun:
    classes: list[tuple[int, ...]]
    records: list[TaskRecord] = field(default_factory=list)
    iteration_end: list[list[float]] = field(default_factory=list)  # per class, per iteration
    data_wait: list[list] = field(default_factory=list)  # per class: (start, end) of waits for data
    shared: _Shared | None = None  # the classes' shared state while the run is live

    def close(self) -> None:
        """Drop the rank classes once the timeline has run: they and their shared state point
        at each other, and unbroken that cycle would keep every record alive until a full
        garbage collection walks them all."""
        sh, self.shared = self.shared, None
        if sh is not None:
            sh.classes = []
            sh.hub.notify = None


class CollectiveHub:
    """Matches the collective calls of rank classes to group instances and launches each
    instance on the timeline when all its member ranks have arrived; tells every class
    that touches the instance when it has finished."""

    def __init__(self, env, network, colls: Collectives, plan, classes, free_comm: bool):
        self.env = env
        self.network = network
        self.colls = colls
        self.plan = plan
        self.free = free_comm
        self._instances = {name: group_instances(g, colls.cluster) for name, g in plan.groups.items()}
        # (group, class) -> [(instance index, member count of the class in it)]
        self._touch: dict[tuple[str, int], list[tuple[int, int]]] = {}
        # (group, instance index) -> classes with members in it
        self._members: dict[tuple[str, int], list[int]] = {}
        for name, insts in self._instances.items():
            rank_inst = {}
            for i, (_, ranks) in enumerate(insts):
                for r in ranks:
                    rank_inst[r] = i
            for c, members in enumerate(classes):
                counts: dict[int, int] = {}
                for r in members:
                    counts[rank_inst[r]] = counts.get(rank_inst[r], 0) + 1
                self._touch[(name, c)] = sorted(counts.items())
                for i in counts:
                    self._members.setdefault((name, i), []).append(c)
        self._state: dict[tuple, list] = {}
        # Set by run_spmd: notify(cls, iteration, task index, end time); None once the run is closed.
        self.notify: Callable[[int, int, int, float], None] | None = None

    def instances_of(self, group: str, cls: int) -> int:
        return len(self._touch[(group, cls)])

    def arrive(self, iteration: int, index: int, cls: int, when: float) -> None:
        """Class ``cls`` reaches collective ``index`` of ``iteration`` at time ``when``."""
        task = self.plan.tasks[index]
        insts = self._instances[task.group]
        for i, count in self._touch[(task.group, cls)]:
            key = (iteration, index, i)
            st = self._state.get(key)
            if st is None:
                st = self._state[key] = [0, when]
            st[0] += count
            if when > st[1]:
                st[1] = when
            kind, ranks = insts[i]
            if st[0] == len(ranks):
                del self._state[key]
                self._launch(task, kind, ranks, iteration, index, i, st[1])

    def _finish(self, group: str, i: int, iteration: int, index: int, when: float) -> None:
        notify = self.notify
        if notify is None:  # no run attached: no class waits for the instance
            return
        for c in self._members[(group, i)]:
            notify(c, iteration, index, when)

    def _launch(self, task, kind, ranks, iteration, index, i, when: float) -> None:
        g = self.plan.groups[task.group]
        n = len(ranks)
        if self.free or n <= 1:
            self._finish(task.group, i, iteration, index, when)
            return
        env = self.env

        def start() -> None:
            phases = self.colls.phases(task.collective, task.comm_bytes, kind, ranks, g.scope)
            overhead = self.colls.overhead(task.collective, task.comm_bytes, n, g.scope)
            proc = env.process(
                run_collective(
                    env, self.network, phases, overhead, task.name, {"task": task.name, "ranks": (ranks[0], n)}
                )
            )
            proc.callbacks.append(lambda _e: self._finish(task.group, i, iteration, index, env.now))

        if when <= env.now:
            start()
        else:
            call_at(env, when, start)


class _Shared:
    """What every rank class of one run reads: the plan's streams and the loop's state."""

    def __init__(self, env, plan, durations, hub, hetero, iterations, run, on_iteration_end) -> None:
        self.env = env
        self.tasks = plan.tasks
        self.durations = durations
        self.hub = hub
        self.hetero = hetero
        self.iterations = iterations
        self.run = run
        self.on_iteration_end = on_iteration_end
        streams: dict[str, list[int]] = {}
        for i, t in enumerate(plan.tasks):
            streams.setdefault(t.stream, []).append(i)
        self.streams = list(streams.values())
        self.compute_idx = [i for i, t in enumerate(plan.tasks) if not t.is_comm]
        self.starts_micro = {
            i
            for i, t in enumerate(plan.tasks)
            if not t.is_comm and t.phase == "fwd" and t.rows is not None and t.rows[0] == 0 and t.direction == "fwd"
        }
        # Per task, what resolving it reads: (deps, 0 compute | 1 collective | 2 compute that
        # takes a batch, record fields).
        self.info = [
            (t.deps, 1 if t.is_comm else 2 if i in self.starts_micro else 0, t.stream, t.name, t.phase, t.is_comm)
            for i, t in enumerate(plan.tasks)
        ]
        self.classes: list[_RankClass] = []
        self._queue: deque = deque()
        self._draining = False

    def notify(self, cls: int, iteration: int, index: int, when: float) -> None:
        """A collective instance ``cls`` waits for ended at ``when``; resolve what follows."""
        self._queue.append((cls, iteration, index, when))
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                c, it, i, t = self._queue.popleft()
                self.classes[c].comm_done(it, i, t)
        finally:
            self._draining = False


class _RankClass:
    """One rank class's iterations, resolved task by task as far as its collectives allow."""

    def __init__(self, shared: _Shared, c: int, rank: int, loader: LoaderClock):
        self.sh = shared
        self.c = c
        self.rank = rank
        self.factor = shared.hetero.factor(rank)
        self.loader = loader
        self.it = -1

    def start_iteration(self, it: int, t0: float) -> None:
        sh = self.sh
        self.it = it
        draws = sh.hetero.draws(self.rank, it, len(sh.compute_idx))
        n = len(sh.tasks)
        self.scale = [1.0] * n
        for i, v in zip(sh.compute_idx, (self.factor * draws).tolist()):
            self.scale[i] = v
        self.end: list[float | None] = [None] * n
        self.comm_start: dict[int, float] = {}
        self.waits: dict[int, list] = {}  # collective -> [instances still running, latest end]
        self.cursor = [0] * len(sh.streams)
        self.ready = [t0] * len(sh.streams)
        self.left = n
        self.last = t0

    def comm_done(self, it: int, i: int, when: float) -> None:
        if it != self.it or self.end[i] is not None:
            raise RuntimeError(f"rank class {self.c}: collective {i} of iteration {it} ended out of order")
        w = self.waits[i]
        w[0] -= 1
        if when > w[1]:
            w[1] = when
        if w[0] == 0:  # the last of the class's instances (env.all_of would fire now)
            self._resolved(i, self.comm_start[i], w[1])
            self.advance()

    def _resolved(self, i: int, start: float, end: float) -> None:
        _, _, stream, name, phase, is_comm = self.sh.info[i]
        self.end[i] = end
        self.sh.run.records.append(TaskRecord(self.c, self.it, i, start, end, stream, name, phase, is_comm))
        self.left -= 1
        if end > self.last:
            self.last = end

    def advance(self) -> None:
        """Resolve every task whose inputs are known; arrive at collectives; end iterations."""
        sh = self.sh
        while True:
            progress = True
            while progress:
                progress = False
                for s, idxs in enumerate(sh.streams):
                    if self._stream(s, idxs):
                        progress = True
            if self.left:
                return
            if not self._end_iteration():
                return

    def _stream(self, s: int, idxs: list[int]) -> bool:
        sh = self.sh
        info, end, durations, scale = sh.info, self.end, sh.durations, self.scale
        k = self.cursor[s]
        ready = self.ready[s]
        moved = False
        while k < len(idxs):
            i = idxs[k]
            deps, kind = info[i][0], info[i][1]
            if kind == 1 and i in self.comm_start:
                e = end[i]
                if e is None:
                    break  # the collective is running
                ready = e
                k += 1
                moved = True
                continue
            start = ready
            blocked = False
            for d in deps:
                e = end[d]
                if e is None:
                    blocked = True
                    break
                if e > start:
                    start = e
            if blocked:
                break
            if kind == 1:
                self.comm_start[i] = start
                self.waits[i] = [sh.hub.instances_of(sh.tasks[i].group, self.c), start]
                self.cursor[s], self.ready[s] = k, ready
                sh.hub.arrive(self.it, i, self.c, start)
                return True
            if kind == 2:
                got = self.loader.take(start)
                if got is not None:
                    sh.run.data_wait[self.c].append((start, got))
                    start = got
            d = durations[i] * scale[i]
            ready = start + d if d > 0 else start
            self._resolved(i, start, ready)
            k += 1
            moved = True
        self.cursor[s], self.ready[s] = k, ready
        return moved

    def _end_iteration(self) -> bool:
        """Record the iteration's end; start the next one. False when the run is over."""
        sh = self.sh
        t = self.last
        sh.run.iteration_end[self.c].append(t)
        if sh.on_iteration_end is not None:
            c, fn = self.c, sh.on_iteration_end
            if t <= sh.env.now:
                fn(c)
            else:
                call_at(sh.env, t, lambda: fn(c))
        if self.it + 1 >= sh.iterations:
            return False
        self.start_iteration(self.it + 1, t)
        return True


def run_spmd(
    env,
    plan,
    durations: list[float],
    hub: CollectiveHub,
    classes,
    hetero,
    iterations: int,
    loader_workers: int,
    batch_time: float,
    on_iteration_end=None,
) -> SpmdRun:
    """Set up every rank class at time 0; returns the run record, filled as the env runs."""
    run = SpmdRun(classes=classes, iteration_end=[[] for _ in classes], data_wait=[[] for _ in classes])
    sh = _Shared(env, plan, durations, hub, hetero, iterations, run, on_iteration_end)
    hub.notify = sh.notify
    sh.classes = [
        _RankClass(sh, c, members[0], LoaderClock(loader_workers, batch_time)) for c, members in enumerate(classes)
    ]

    def begin() -> None:
        sh._draining = True  # arrivals that finish a collective at once queue their notices
        try:
            for rc in sh.classes:
                rc.start_iteration(0, env.now)
                rc.advance()
        finally:
            sh._draining = False
        if sh._queue:
            sh.notify(*sh._queue.popleft())

    call_at(env, env.now, begin)
    run.shared = sh
    return run
