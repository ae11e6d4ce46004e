"""A host's cores shared by its processes: processor sharing.

When a ``shared_device`` cluster's workers are processes of one host (cpu-local: N worker
processes and the parameter server on K cores), the kernel's scheduler shares the cores among
the processes that are runnable (Linux CFS, Documentation/scheduler/sched-design-CFS.rst) and
moves them between cores to keep the cores evenly loaded. Modelled at the limit of that
balancing: n runnable jobs each progress at min(1, K/n) of a core. So a worker that computes
while others wait for the server runs faster than one that computes alongside them, and the
server's update runs slower while workers compute. Both couple the workers' timing in ways a
model of independent workers misses. On the EPYC the server's event log found workers that
push back to back again and again (lab/CAMPAIGN.md, "Where asynchronous updates lose staleness"),
and on the Emerald Rapids the VGG16 server's update took 0.43 s (median) in async, where
workers compute meanwhile, against 0.21 s in SSP(0), where they mostly wait
(lab/records/xeon-emr-x4.jsonl.xz, ``server_update_time_s``).

Pinning each process to one core (no balancing, the other limit) was tried too. It
under-predicted VGG16's staleness by 12-22 % on the EPYC and the Intel Xeon. Balancing
gave the smaller errors on both (lab/CAMPAIGN.md, "Where VGG16 PS sync's time goes").

A job's *work* is its duration on a whole core. The compute profile of a shared device was
measured with every rank computing at once, so a duration d from it is d x min(1, K/N)
core-seconds of work (simdl.analytic.costs._measured scales it to this share). The server's
update and snapshot rates were calibrated alone on a core (simdl.calibrate.ps): their
seconds are their work. Transfers are left to the network model; the CPU they take is not
counted here (the analytic engine's ps_host_floor counts it).
"""

from __future__ import annotations

import simpy


class SharedCores:
    """``cores`` cores shared by the jobs running on them: each of n jobs progresses at
    min(1, cores / n) of a core. :meth:`compute` runs a worker's compute measured with all
    its workers computing (``share`` of a core each); :meth:`serve` runs work measured alone."""

    def __init__(self, env: simpy.Environment, cores: int, share: float):
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        self.env = env
        self.cores = cores
        self.share = share
        self.jobs: dict[int, list] = {}  # job id -> [remaining work (core-seconds), done event]
        self.last = env.now
        self.generation = 0
        self._next_id = 0

    def compute(self, seconds: float) -> simpy.Event:
        return self.run(seconds * self.share)

    def serve(self, seconds: float) -> simpy.Event:
        return self.run(seconds)

    def rate(self) -> float:
        """Cores per job now."""
        return min(1.0, self.cores / len(self.jobs)) if self.jobs else 1.0

    def run(self, work: float) -> simpy.Event:
        """An event that fires when ``work`` core-seconds are done."""
        done = self.env.event()
        if work <= 0:
            done.succeed()
            return done
        self._advance()
        self.jobs[self._next_id] = [work, done]
        self._next_id += 1
        self._schedule()
        return done

    def _advance(self) -> None:
        elapsed = self.env.now - self.last
        if self.jobs and elapsed > 0:
            step = elapsed * self.rate()
            for job in self.jobs.values():
                job[0] -= step
        self.last = self.env.now

    def _schedule(self) -> None:
        self.generation += 1
        if not self.jobs:
            return
        first = min(job[0] for job in self.jobs.values())
        gen = self.generation
        timer = self.env.timeout(max(first, 0.0) / self.rate())
        timer.callbacks.append(lambda _ev: self._finish(gen))

    def _finish(self, gen: int) -> None:
        if gen != self.generation:  # a job came or went since: a newer timer stands
            return
        self._advance()
        # Jobs within a rounding error of their end finish together.
        ended = [k for k, job in self.jobs.items() if job[0] <= 1e-12 * max(1.0, self.env.now)]
        for k in ended:
            self.jobs.pop(k)[1].succeed()
        self._schedule()
