"""Processor sharing of a host's cores (simdl.sim.cores)."""

import pytest
import simpy

from simdl.sim.cores import SharedCores


def _finish_times(cores, jobs, share=1.0):
    """jobs: (start, work); returns each job's end."""
    env = simpy.Environment()
    host = SharedCores(env, cores, share)
    ends = [None] * len(jobs)

    def job(i, start, work):
        yield env.timeout(start)
        yield host.run(work)
        ends[i] = env.now

    for i, (start, work) in enumerate(jobs):
        env.process(job(i, start, work))
    env.run()
    return ends


def test_a_job_alone_runs_at_a_whole_core():
    assert _finish_times(2, [(0.0, 1.0)]) == [pytest.approx(1.0)]


def test_more_jobs_than_cores_share_them_equally():
    assert _finish_times(2, [(0.0, 1.0)] * 3) == [pytest.approx(1.5)] * 3
    assert _finish_times(2, [(0.0, 1.0)] * 2) == [pytest.approx(1.0)] * 2


def test_a_job_speeds_up_when_another_leaves_and_slows_when_one_comes():
    # One core. A alone for 0.5 s (0.5 done); with B both at half: A's last 0.5 takes 1 s.
    # B has 0.5 done at 1.5 and finishes alone at 2.0.
    assert _finish_times(1, [(0.0, 1.0), (0.5, 1.0)]) == [pytest.approx(1.5), pytest.approx(2.0)]


def test_compute_is_measured_with_every_worker_computing():
    # 4 workers on 2 cores, each measured at half a core: together they take what was measured,
    # and one alone takes half of it.
    env = simpy.Environment()
    host = SharedCores(env, 2, 0.5)
    ends = []

    def worker(seconds):
        yield host.compute(seconds)
        ends.append(env.now)

    for _ in range(4):
        env.process(worker(2.0))
    env.run()
    assert ends == [pytest.approx(2.0)] * 4
    env2 = simpy.Environment()
    alone = SharedCores(env2, 2, 0.5)
    ev = alone.compute(2.0)
    env2.run(ev)
    assert env2.now == pytest.approx(1.0)


def test_no_cores_is_refused():
    with pytest.raises(ValueError, match="cores must be >= 1, got 0"):
        SharedCores(simpy.Environment(), 0, 1.0)
