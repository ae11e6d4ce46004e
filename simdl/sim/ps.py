"""Parameter server on the timeline: worker and server processes, staleness accounting.

Workers (GPU ranks) loop: take a batch, forward + backward, push 1/S of the gradients to
each of the S server shards, pull the shard's parameters once the push is applied. Pushes
and pulls are flows from ``gpu:<rank>`` to ``ps:<s>`` over the topology (GPU -> PCIe -> NIC
-> network -> server NIC), so an incast of N workers into one server NIC shares it.
PS transfers are plain point-to-point messages: link bandwidth at face value, the route's
latency (as the analytic model: no collective efficiency).

Each shard has its own CPU (a SimPy ``Resource`` of capacity 1): updates to one shard are
applied one after another; the cost of one is the analytic model's
:func:`simdl.costs.ps.ps_update_time`.

* ``ps-sync``: a shard waits for the pushes of all N workers for the iteration, applies one
  update of the aggregated gradient, then answers every worker's pull (staleness 0).
* ``ps-async``: each push is applied on arrival (Li et al., OSDI 2014). The staleness of an
  update is the number of updates other workers applied to the shard between this
  worker's pull (the parameter version it computed on) and the application of its push.
  The pull is a request of its own, sent when the push has been answered, and the shard's
  CPU serves updates and snapshots one at a time (validate/train.py: ``push`` and ``pull``
  each take the server's lock; a pull copies the parameters with their version): pushes
  that reached the shard first are applied before the pull reads it. The shard's work per
  update is the analytic :func:`~simdl.costs.ps.ps_update_time` for one gradient,
  of which :func:`~simdl.costs.ps.ps_snapshot_time` is spent serving the pull.
* ``ps-ssp``: as async, but a worker's pull waits while its clock (updates applied) is more
  than the bound ahead of the slowest worker still training (Ho et al., NIPS 2013; the
  server of validate/train.py holds the pull). The share of pulls held and the mean wait
  per pull are the result's ``staleness.held_pulls`` / ``held_wait_s``, which validate
  compares with the pulls the real server held.

On a shared host (cpu-local) the workers' computes and the server's work share the host's
cores (simdl.sim.cores): a compute runs faster while other workers wait for the server, an
update slower while they compute.

Whether workers drift apart depends on how their step times vary: the engine draws them
from the profile's measured ``efficiency.compute_jitter`` (simdl.sim.stragglers). Workers
with identical, deterministic steps fall into lockstep convoys, which real ones do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from .ranks import Loader, TaskRecord


@dataclass
class PSRun:
    workers: int
    records: list[TaskRecord] = field(default_factory=list)
    iteration_end: list[list[float]] = field(default_factory=list)  # per worker
    transfers: list[tuple[int, int, float, float, str]] = field(
        default_factory=list
    )  # (worker, it, start, end, push|pull), shard 0
    staleness: list[int] = field(default_factory=list)  # one per applied push (per shard)
    staleness_it: list[int] = field(default_factory=list)  # iteration of each staleness sample
    data_wait: list[list] = field(default_factory=list)
    # ps-ssp: one per pull, (worker, iteration, seconds the bound held it; 0 if not held).
    pulls: list[tuple[int, int, float]] = field(default_factory=list)


class _Shard:
    def __init__(self, env, index: int):
        self.index = index
        self.cpu = simpy.Resource(env, capacity=1)
        self.version = 0
        self.arrived: dict[int, int] = {}  # sync: iteration -> pushes arrived
        self.ready: dict[int, simpy.Event] = {}  # sync: iteration -> update applied


def run_ps(
    env,
    network,
    router,
    plan,
    cluster,
    durations,
    hetero,
    iterations: int,
    loader_workers: int,
    batch_time: float,
    update_time,
    free_comm: bool = False,
    on_iteration_end=None,
    snapshot_time: float = 0.0,
    cores=None,
) -> PSRun:
    """Start the worker processes; ``update_time(k)`` = server seconds for k aggregated
    gradients and their workers' pulls, ``snapshot_time`` = the seconds of one pull;
    ``cores``: a :class:`simdl.sim.cores.SharedCores` the workers' computes and the server's
    work share (processes of one host), or None (workers with devices of their own, servers
    with their own CPUs)."""
    ps = _ParameterServer(
        env,
        network,
        router,
        plan,
        cluster,
        durations,
        hetero,
        iterations,
        loader_workers,
        batch_time,
        update_time,
        free_comm,
        on_iteration_end,
        snapshot_time,
        cores,
    )
    for w in range(plan.workers):
        env.process(ps.worker(w))
    return ps.run


class _ParameterServer:
    """The shards, the workers' clocks and the processes of one run: a worker's iteration,
    its exchange with each shard (push, the update applied, pull) and the transfers."""

    def __init__(
        self,
        env,
        network,
        router,
        plan,
        cluster,
        durations,
        hetero,
        iterations: int,
        loader_workers: int,
        batch_time: float,
        update_time,
        free_comm: bool,
        on_iteration_end,
        snapshot_time: float,
        cores,
    ):
        from ..costs.ps import ps_transfer_extras

        self.env, self.network, self.router, self.plan = env, network, router, plan
        self.durations, self.hetero, self.iterations = durations, hetero, iterations
        self.loader_workers, self.batch_time, self.update_time = loader_workers, batch_time, update_time
        self.free_comm, self.on_iteration_end, self.snapshot_time, self.cores = (
            free_comm,
            on_iteration_end,
            snapshot_time,
            cores,
        )
        N, S = plan.workers, plan.servers
        self.push_extra, self.pull_extra = ps_transfer_extras(cluster, plan)
        self.run = PSRun(N, iteration_end=[[] for _ in range(N)], data_wait=[[] for _ in range(N)])
        self.shards = [_Shard(env, s) for s in range(S)]
        self.clocks = [0] * N
        self.done = [False] * N
        self.clock_event = env.event()

    def tick(self, w: int) -> None:
        self.clocks[w] += 1
        old, self.clock_event = self.clock_event, self.env.event()
        old.succeed()

    def ssp_wait(self, w: int):
        """The pull of a worker more than the bound ahead of the slowest active one waits."""
        while True:
            active = [c for c, d in zip(self.clocks, self.done) if not d]
            if not active or self.clocks[w] - min(active) <= self.plan.staleness_bound:
                return
            yield self.clock_event

    def transfer(self, src: str, dst: str, nbytes: float):
        if self.free_comm:
            return self.env.timeout(0)
        router = self.router
        links = router.path(src, dst)
        latency = float(router.latency[list(links)].sum()) if links else 0.0
        flow = self.network.transfer(links, [1.0] * len(links), nbytes, latency, name=f"{src}->{dst}")
        extra = self.push_extra if src.startswith("gpu") else self.pull_extra
        if nbytes <= 0 or extra <= 0:
            return flow
        # What a calibrated PS transport costs besides the link (fresh receive buffers, the
        # server's copy of a pull's answer): each process its own, after the bytes arrive.
        return self.env.process(self._then_wait(flow, extra))

    def _then_wait(self, event, seconds):
        yield event
        yield self.env.timeout(seconds)

    def server_work(self, seconds: float):
        # The server is a process of the workers' host when they share its cores.
        return self.cores.serve(seconds) if self.cores is not None else self.env.timeout(seconds)

    def exchange(self, w: int, it: int, shard: _Shard, pulled_version: int):
        """Push to one shard, have it applied, pull it back; returns the version pulled."""
        gpu, server = f"gpu:{w}", f"ps:{shard.index}"
        yield from self._move(w, it, shard, gpu, server, self.plan.push_bytes, "push")
        if self.plan.synchronous:
            yield from self._apply_sync(it, shard)
            version = shard.version
        else:
            yield from self._apply_async(w, it, shard, pulled_version)
            version = yield from self._snapshot(w, it, shard)
        yield from self._move(w, it, shard, server, gpu, self.plan.pull_bytes, "pull")
        return version

    def _move(self, w: int, it: int, shard: _Shard, src: str, dst: str, nbytes: float, kind: str):
        """A push or a pull of the shard's 1/S of the bytes; shard 0's are recorded."""
        t0 = self.env.now
        yield self.transfer(src, dst, nbytes / self.plan.servers)
        if shard.index == 0:
            self.run.transfers.append((w, it, t0, self.env.now, kind))

    def _apply_sync(self, it: int, shard: _Shard):
        """ps-sync: the last of the N pushes of the iteration has the shard apply one update."""
        shard.arrived[it] = shard.arrived.get(it, 0) + 1
        ready = shard.ready.setdefault(it, self.env.event())
        if shard.arrived[it] == self.plan.workers:
            with shard.cpu.request() as req:
                yield req
                yield self.server_work(self.update_time(self.plan.workers))
            shard.version += 1
            ready.succeed()
        yield ready

    def _apply_async(self, w: int, it: int, shard: _Shard, pulled_version: int):
        """ps-async/ssp: the push applied on arrival, its staleness counted, then the answer
        and the pull's request."""
        with shard.cpu.request() as req:
            yield req
            self.run.staleness.append(shard.version - pulled_version)
            self.run.staleness_it.append(it)
            yield self.server_work(max(self.update_time(1) - self.snapshot_time, 0.0))
            shard.version += 1
        if shard.index == 0:
            self.tick(w)
            if it == self.iterations - 1:
                self.done[w] = True
        gpu, server = f"gpu:{w}", f"ps:{shard.index}"
        # The answer to the push, then the pull's request: messages without payload.
        yield self.transfer(server, gpu, 0.0)
        yield self.transfer(gpu, server, 0.0)

    def _snapshot(self, w: int, it: int, shard: _Shard):
        """ps-async/ssp: the pull, held by the SSP bound, reads the shard's parameters under
        its lock; returns their version."""
        if self.plan.staleness_bound is not None:
            held = self.env.now
            yield from self.ssp_wait(w)
            if shard.index == 0:
                self.run.pulls.append((w, it, self.env.now - held))
        with shard.cpu.request() as req:
            yield req
            version = shard.version
            yield self.server_work(self.snapshot_time)
        return version

    def worker(self, w: int):
        env, plan, run = self.env, self.plan, self.run
        loader = Loader(env, self.loader_workers, self.batch_time)
        factor = self.hetero.factor(w)
        versions = [0] * plan.servers
        for it in range(self.iterations):
            ev = loader.get()
            if ev is not None:
                t0 = env.now
                yield ev
                run.data_wait[w].append((t0, env.now))
            draws = self.hetero.draws(w, it, len(plan.worker_tasks))
            for k, task in enumerate(plan.worker_tasks):
                start = env.now
                d = self.durations[k] * factor * float(draws[k])
                if d > 0:
                    yield self.cores.compute(d) if self.cores is not None else env.timeout(d)
                run.records.append(TaskRecord(w, it, k, start, env.now, task.stream, task.name, task.phase, False))
            procs = [env.process(self.exchange(w, it, self.shards[s], versions[s])) for s in range(plan.servers)]
            result = yield env.all_of(procs)
            versions = [result[p] for p in procs]
            if plan.synchronous:
                self.tick(w)
            run.iteration_end[w].append(env.now)
            if self.on_iteration_end is not None:
                self.on_iteration_end(w)
