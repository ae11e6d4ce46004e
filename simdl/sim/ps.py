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
    transfers: list[tuple[int, int, float, float, str]] = field(default_factory=list)  # (worker, it, start, end, push|pull), shard 0
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


def run_ps(env, network, router, plan, cluster, durations, hetero, iterations: int,
           loader_workers: int, batch_time: float, update_time, free_comm: bool = False,
           on_iteration_end=None, snapshot_time: float = 0.0, cores=None) -> PSRun:
    """Start the worker processes; ``update_time(k)`` = server seconds for k aggregated
    gradients and their workers' pulls, ``snapshot_time`` = the seconds of one pull;
    ``cores``: a :class:`simdl.sim.cores.SharedCores` the workers' computes and the server's
    work share (processes of one host), or None (workers with devices of their own, servers
    with their own CPUs)."""
    from ..costs.ps import ps_transfer_extras

    N, S = plan.workers, plan.servers
    push_extra, pull_extra = ps_transfer_extras(cluster, plan)
    run = PSRun(N, iteration_end=[[] for _ in range(N)], data_wait=[[] for _ in range(N)])
    shards = [_Shard(env, s) for s in range(S)]
    clocks = [0] * N
    done = [False] * N
    clock_event = [env.event()]

    def tick(w: int) -> None:
        clocks[w] += 1
        old, clock_event[0] = clock_event[0], env.event()
        old.succeed()

    def ssp_wait(w: int):
        """The pull of a worker more than the bound ahead of the slowest active one waits."""
        while True:
            active = [c for c, d in zip(clocks, done) if not d]
            if not active or clocks[w] - min(active) <= plan.staleness_bound:
                return
            yield clock_event[0]

    def transfer(src: str, dst: str, nbytes: float):
        if free_comm:
            return env.timeout(0)
        links = router.path(src, dst)
        latency = float(router.latency[list(links)].sum()) if links else 0.0
        flow = network.transfer(links, [1.0] * len(links), nbytes, latency, name=f"{src}->{dst}")
        extra = push_extra if src.startswith("gpu") else pull_extra
        if nbytes <= 0 or extra <= 0:
            return flow
        # What a calibrated PS transport costs besides the link (fresh receive buffers, the
        # server's copy of a pull's answer): each process its own, after the bytes arrive.
        return env.process(_then_wait(flow, extra))

    def server_work(seconds: float):
        # The server is a process of the workers' host when they share its cores.
        return cores.serve(seconds) if cores is not None else env.timeout(seconds)

    def _then_wait(event, seconds):
        yield event
        yield env.timeout(seconds)

    def exchange(w: int, it: int, shard: _Shard, pulled_version: int):
        """Push to one shard, have it applied, pull it back; returns the version pulled."""
        gpu, server = f"gpu:{w}", f"ps:{shard.index}"
        t0 = env.now
        yield transfer(gpu, server, plan.push_bytes / S)
        if shard.index == 0:
            run.transfers.append((w, it, t0, env.now, "push"))
        if plan.synchronous:
            shard.arrived[it] = shard.arrived.get(it, 0) + 1
            ready = shard.ready.setdefault(it, env.event())
            if shard.arrived[it] == N:
                with shard.cpu.request() as req:
                    yield req
                    yield server_work(update_time(N))
                shard.version += 1
                ready.succeed()
            yield ready
        else:
            with shard.cpu.request() as req:
                yield req
                run.staleness.append(shard.version - pulled_version)
                run.staleness_it.append(it)
                yield server_work(max(update_time(1) - snapshot_time, 0.0))
                shard.version += 1
            if shard.index == 0:
                tick(w)
                if it == iterations - 1:
                    done[w] = True
            # The answer to the push, then the pull's request: messages without payload.
            yield transfer(server, gpu, 0.0)
            yield transfer(gpu, server, 0.0)
            if plan.staleness_bound is not None:
                held = env.now
                yield from ssp_wait(w)
                if shard.index == 0:
                    run.pulls.append((w, it, env.now - held))
            with shard.cpu.request() as req:
                yield req
                version = shard.version
                yield server_work(snapshot_time)
            t0 = env.now
            yield transfer(server, gpu, plan.pull_bytes / S)
            if shard.index == 0:
                run.transfers.append((w, it, t0, env.now, "pull"))
            return version
        version = shard.version
        t0 = env.now
        yield transfer(server, gpu, plan.pull_bytes / S)
        if shard.index == 0:
            run.transfers.append((w, it, t0, env.now, "pull"))
        return version

    def worker(w: int):
        loader = Loader(env, loader_workers, batch_time)
        factor = hetero.factor(w)
        versions = [0] * S
        for it in range(iterations):
            ev = loader.get()
            if ev is not None:
                t0 = env.now
                yield ev
                run.data_wait[w].append((t0, env.now))
            draws = hetero.draws(w, it, len(plan.worker_tasks))
            for k, task in enumerate(plan.worker_tasks):
                start = env.now
                d = durations[k] * factor * float(draws[k])
                if d > 0:
                    yield cores.compute(d) if cores is not None else env.timeout(d)
                run.records.append(TaskRecord(w, it, k, start, env.now, task.stream, task.name, task.phase, False))
            procs = [env.process(exchange(w, it, shards[s], versions[s])) for s in range(S)]
            result = yield env.all_of(procs)
            versions = [result[p] for p in procs]
            if plan.synchronous:
                tick(w)
            run.iteration_end[w].append(env.now)
            if on_iteration_end is not None:
                on_iteration_end(w)

    for w in range(N):
        env.process(worker(w))
    return run
