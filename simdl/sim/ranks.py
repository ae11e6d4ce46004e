"""Ranks executing an SPMD plan: one SimPy process per stream, CUDA-event dependencies.

As PyTorch runs them on a GPU: the tasks of one stream run in order; a task also waits
for the tasks it depends on (a CUDA event recorded on another stream); a collective
occupies its communication stream from the moment the stream reaches it until the
collective has finished on the whole group (NCCL kernels spin until their peers arrive,
which is also why nvidia-smi counts them as busy). A rank starts iteration i+1 when all
its tasks of iteration i have finished (the next forward follows the optimizer step, and
the next iteration's all-gathers read the parameters that step wrote).

Compute durations are the analytic engine's (:func:`simdl.analytic.schedule.task_durations`),
times the rank's speed factor and jitter draw. A forward that starts a micro-step first
takes a batch from the rank's data loader (:class:`Loader`).

Rank classes (symmetry). Without per-rank heterogeneity every rank runs the same plan
with the same durations, and a collective ends at the same time for all members, so all
ranks follow identical timelines: one process stands for a whole *class* of ranks, and a
collective launches once every member rank has arrived (a class's arrival counts for all
its members). This is exact when the ranks of a class have the same speed factor and no
jitter (:meth:`Heterogeneity.classes`): links are still simulated one by one, so link loads
are not approximated. With jitter each rank is its own class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from .collectives import Collectives, group_instances, run_collective

PREFETCH_FACTOR = 2  # torch.utils.data.DataLoader(prefetch_factor=2): batches in flight per worker


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


@dataclass
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


class CollectiveHub:
    """Matches the collective calls of rank classes to group instances and launches each
    instance once all its member ranks have arrived."""

    def __init__(self, env, network, colls: Collectives, plan, classes, free_comm: bool):
        self.env = env
        self.network = network
        self.colls = colls
        self.plan = plan
        self.free = free_comm
        self._instances = {name: group_instances(g, colls.cluster) for name, g in plan.groups.items()}
        # (group, class) -> [(instance index, member count of the class in it)]
        self._touch: dict[tuple[str, int], list[tuple[int, int]]] = {}
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
        self._state: dict[tuple, list] = {}

    def arrive(self, iteration: int, index: int, cls: int) -> simpy.Event:
        task = self.plan.tasks[index]
        events = []
        insts = self._instances[task.group]
        for i, count in self._touch[(task.group, cls)]:
            key = (iteration, index, i)
            st = self._state.get(key)
            if st is None:
                st = self._state[key] = [0, self.env.event()]
            st[0] += count
            kind, ranks = insts[i]
            if st[0] == len(ranks):
                self._launch(task, kind, ranks, st[1], (iteration, index, i))
                del self._state[key]
            events.append(st[1])
        return events[0] if len(events) == 1 else self.env.all_of(events)

    def _launch(self, task, kind, ranks, done: simpy.Event, key) -> None:
        g = self.plan.groups[task.group]
        n = len(ranks)
        if self.free or n <= 1:
            done.succeed()
            return
        phases = self.colls.phases(task.collective, task.comm_bytes, kind, ranks, g.scope)
        overhead = self.colls.overhead(task.collective, task.comm_bytes, n, g.scope)
        proc = self.env.process(run_collective(self.env, self.network, phases, overhead, task.name,
                                               {"task": task.name, "ranks": (ranks[0], n)}))
        proc.callbacks.append(lambda _e: done.succeed())


def run_spmd(env, plan, durations: list[float], hub: CollectiveHub, classes, hetero, iterations: int,
             loader_workers: int, batch_time: float, on_iteration_end=None) -> SpmdRun:
    """Start one process per rank class; returns the run record, filled as the env runs."""
    run = SpmdRun(classes=classes, iteration_end=[[] for _ in classes], data_wait=[[] for _ in classes])
    streams: dict[str, list[int]] = {}
    for i, t in enumerate(plan.tasks):
        streams.setdefault(t.stream, []).append(i)
    compute_idx = [i for i, t in enumerate(plan.tasks) if not t.is_comm]
    starts_micro = {i for i, t in enumerate(plan.tasks)
                    if not t.is_comm and t.phase == "fwd" and t.rows is not None and t.rows[0] == 0
                    and t.direction == "fwd"}
    for c, members in enumerate(classes):
        loader = Loader(env, loader_workers, batch_time)
        env.process(_rank(env, plan, durations, hub, c, members[0], hetero, iterations, streams,
                          compute_idx, starts_micro, loader, run, on_iteration_end))
    return run


def _rank(env, plan, durations, hub, c, rank, hetero, iterations, streams, compute_idx, starts_micro, loader, run,
          on_iteration_end):
    factor = hetero.factor(rank)
    for it in range(iterations):
        draws = hetero.draws(rank, it, len(compute_idx))
        scale = dict(zip(compute_idx, (factor * draws).tolist()))
        done = [env.event() for _ in plan.tasks]
        procs = [env.process(_stream(env, plan, durations, hub, c, it, idxs, done, scale, starts_micro, loader, run))
                 for idxs in streams.values()]
        yield env.all_of(procs)
        run.iteration_end[c].append(env.now)
        if on_iteration_end is not None:
            on_iteration_end(c)


def _stream(env, plan, durations, hub, c, it, idxs, done, scale, starts_micro, loader, run):
    tasks = plan.tasks
    for i in idxs:
        t = tasks[i]
        pending = [done[d] for d in t.deps if not done[d].processed]
        if pending:
            yield pending[0] if len(pending) == 1 else env.all_of(pending)
        if i in starts_micro:
            ev = loader.get()
            if ev is not None:
                t0 = env.now
                yield ev
                run.data_wait[c].append((t0, env.now))
        start = env.now
        if t.is_comm:
            yield hub.arrive(it, i, c)
        else:
            d = durations[i] * scale[i]
            if d > 0:
                yield env.timeout(d)
        run.records.append(TaskRecord(c, it, i, start, env.now, t.stream, t.name, t.phase, t.is_comm))
        done[i].succeed()
