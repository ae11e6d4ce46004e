"""The validation parameter server's bookkeeping, driven directly (no RPC, no processes):
staleness counts, the steady-state flag and the event log that benchmarks/ps_staleness_window.py
reads."""

import torch

from validate.experiments import RunSpec
from validate.train import ParameterServer


def _server(workers=2, warmup=1, mode="ps-async"):
    run = RunSpec("exp2", "mnist_cnn", "mnist", mode, workers, 4, 1, 64, 16, warmup_steps=warmup)
    return ParameterServer(run, workers)


def _grads(server):
    return [torch.zeros_like(p) for p in server.params]


def _step(server, w, clock):
    _, version = server.pull(w, clock).wait()
    server.push(w, _grads(server), version, False).wait()


def test_staleness_counts_the_other_workers_updates_between_pull_and_apply():
    s = _server()
    _, v0 = s.pull(0, 0).wait()
    _, v1 = s.pull(1, 0).wait()
    s.push(0, _grads(s), v0, False).wait()
    s.push(1, _grads(s), v1, False).wait()  # worker 0's update landed after worker 1's pull
    assert s.staleness == [0, 1]
    assert s.version == 2


def test_steady_state_starts_once_every_worker_pulled_after_its_profiled_step():
    # warmup 1: each worker's profiler stops after its step 1, so before its pull for step 2.
    s = _server(warmup=1)
    for clock in range(3):
        _step(s, 0, clock)  # worker 0 runs ahead: its step 2 is pulled while worker 1 still profiles
    for clock in range(3):
        _step(s, 1, clock)
    _step(s, 0, 3)
    after_profiling = [(w, c, flag) for w, c, _, flag in s.update_log]
    assert after_profiling == [
        (0, 0, False),
        (0, 1, False),
        (0, 2, False),
        (1, 0, False),
        (1, 1, False),
        (1, 2, True),
        (0, 3, True),
    ]


def test_event_log_orders_each_update_and_pull():
    s = _server()
    _step(s, 0, 0)
    _step(s, 1, 0)
    assert [e[0] for e in s.push_events] == [0, 1] and [e[0] for e in s.pull_events] == [0, 1]
    for w, arrived, taken, done, version in s.push_events + s.pull_events:
        assert 0.0 <= arrived <= taken <= done
    assert [e[4] for e in s.push_events] == [1, 2]  # the version each apply produced
    assert [e[4] for e in s.pull_events] == [0, 1]  # the version each snapshot read


def test_ssp_server_logs_the_pulls_its_bound_held():
    s = _server(workers=2, mode="ps-ssp")  # RunSpec's default bound
    bound = s.bound
    for clock in range(bound + 1):
        _step(s, 0, clock)  # worker 0 runs bound + 1 steps ahead of worker 1 (clock 0)
    held = s.pull(0, bound + 1)
    assert not held.done() and s.held == []
    _step(s, 1, 0)  # worker 1's update brings the slowest clock to 1: the pull is released
    assert held.done()
    assert [(w, c) for w, c, _, _ in s.held] == [(0, bound + 1)]
    w, c, arrived, released = s.held[0]
    assert 0.0 <= arrived <= released
    assert len(s.pull_events) == bound + 3  # every pull logged, the held one on its release


def test_sync_round_applies_the_mean_from_a_sum_kept_across_rounds():
    """ps-sync: each round's pushes are averaged into one buffer allocated once (a fresh one
    per round faults its pages in again); the update is SGD on the mean, and the event log
    times each push's part of the sum and the round's mean and update."""
    s = _server(workers=2, mode="ps-sync")
    s.opt = torch.optim.SGD(s.params, lr=1.0)  # plain SGD: p -= mean
    before = [p.detach().clone() for p in s.params]
    for rnd in range(2):
        futs = [s.push(w, [torch.full_like(p, float(w + 1 + rnd)) for p in s.params], rnd, False) for w in range(2)]
        assert [f.wait() for f in futs] == [rnd + 1, rnd + 1]
        if rnd == 0:
            buffers = [t.data_ptr() for t in s.round_sum]
    assert [t.data_ptr() for t in s.round_sum] == buffers
    # Means 1.5 then 2.5: each parameter moved by -4.
    for p, b in zip(s.params, before):
        assert torch.allclose(p.detach(), b - 4.0)
    assert s.staleness == [0, 0, 0, 0] and s.version == 2
    assert [e[0] for e in s.push_events] == [0, 1, 0, 1] and len(s.round_events) == 2
    assert len(s.sum_cpu_s) == 4 and all(c >= 0 for c in s.sum_cpu_s)
    for t_mean, t_update, t_done in s.round_events:
        assert t_mean <= t_update <= t_done
