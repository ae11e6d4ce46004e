"""Parameter server on the timeline: staleness, incast, SSP."""

from pathlib import Path

import pytest
import simpy

from simdl.cluster import allocate
from simdl.cluster.topology import build_topology
from simdl.predict import predict
from simdl.sim.collectives import Router
from simdl.sim.network import Network

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def test_sync_staleness_is_zero():
    r = predict("resnet18", "ps-sync", 4, cluster="a10g-ps", engine="sim", return_run=True)
    assert r.result.staleness.max == 0
    assert r.staleness_histogram == {}


def _server_speed(factor):
    """a10g-ps with its server's update bandwidth scaled: 1000 = a server that is never busy."""
    import dataclasses

    from simdl.cluster import load_cluster
    from simdl.provenance import Sourced

    base = load_cluster("a10g-ps")
    ps = base.ps_servers
    bw = Sourced(ps.update_bandwidth.value * factor, "assumed", "test: scaled server")
    return dataclasses.replace(base, ps_servers=dataclasses.replace(ps, update_bandwidth=bw))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_async_staleness_is_n_minus_1_when_the_server_is_never_busy(n):
    # Each worker's pull then reads right after its own update: the other N-1 workers' updates
    # of one cycle land between its pull and its next push. Jitter keeps the workers apart.
    r = predict("resnet18", "ps-async", n, cluster=_server_speed(1000), engine="sim", jitter="lognormal:0.1")
    assert r.staleness.mean == pytest.approx(n - 1, abs=0.1)


@pytest.mark.parametrize("n", [4, 8])
def test_async_pulls_queue_behind_pushes_at_a_busy_server(n):
    # The pull is a request of its own: pushes that reached the shard's CPU first are applied
    # before it reads, so their updates are not stale for the puller (validate/train.py).
    busy = predict("resnet18", "ps-async", n, cluster="a10g-ps", engine="sim", return_run=True)
    idle = predict("resnet18", "ps-async", n, cluster=_server_speed(1000), engine="sim", jitter="lognormal:0.1")
    # Fresher by more than half an update on average (4 workers: 2.0 against 3.0 with the GPU
    # kernel model's longer, host-bound CIFAR steps, which leave the server less busy between
    # pushes), and at most n - 2 updates stale.
    assert busy.result.staleness.mean < idle.staleness.mean - 0.5
    assert busy.result.staleness.mean <= n - 1 - 1.0
    assert min(busy.staleness_histogram) >= 0
    # The analytic engine's queueing model (simdl.analytic.engine.async_staleness) agrees on the
    # direction: below N - 1 at this server.
    assert predict("resnet18", "ps-async", n, cluster="a10g-ps").staleness.mean < n - 1 - 1.0


def test_identical_deterministic_workers_convoy_and_jitter_breaks_it():
    # Without any spread, workers that start together push together and the first pull queues
    # behind the others' pushes every cycle: staleness below N - 1 even at an idle server.
    still = predict("resnet18", "ps-async", 4, cluster=_server_speed(1000), engine="sim", jitter="none")
    moving = predict("resnet18", "ps-async", 4, cluster=_server_speed(1000), engine="sim", jitter="lognormal:0.1")
    assert still.staleness.mean < moving.staleness.mean - 0.1


def test_ps_sim_draws_the_profiles_measured_compute_jitter_by_default():
    from simdl.cluster import load_cluster

    cj = load_cluster(lab("cpu-local-x4")).efficiency.compute_jitter
    assert cj is not None and cj.kind == "calibrated" and cj.value > 0
    kw = dict(cluster=lab("cpu-local-x4"), engine="sim", dataset="mnist", batch_size=32)
    r = predict("resnet50", "ps-async", 4, **kw)
    assert any("per worker and step" in n and "efficiency.compute_jitter" in n for n in r.notes)
    assert r.config["jitter"].startswith(f"lognormal:{cj.value:g}")
    # An explicit choice wins; SPMD plans get no default (their step fit already pays for it).
    none = predict("resnet50", "ps-async", 4, jitter="none", **kw)
    assert not any("heterogeneity" in n for n in none.notes) and "jitter" not in none.config
    ddp = predict("resnet18", "ddp", 4, cluster=lab("cpu-local-x4"), engine="sim")
    assert not any("heterogeneity" in n for n in ddp.notes)


def test_incast_into_the_server_nic_takes_n_times_as_long():
    cluster = allocate("a10g-ps", 8)  # 2 worker nodes, one 40 Gb/s NIC each; server NIC 40 Gb/s
    router = Router(build_topology(cluster), cluster)
    nbytes = 100e6

    def push(workers):
        env = simpy.Environment()
        net = Network(env, router.capacity, router.names)
        ends = []

        def go(w):
            links = router.path(f"gpu:{w}", "ps:0")
            yield net.transfer(links, [1.0] * len(links), nbytes)
            ends.append(env.now)

        for w in workers:
            env.process(go(w))
        env.run()
        return max(ends)

    one = push([0])
    # Workers 0 and 4 sit on different nodes: only the server NIC is shared.
    assert push([0, 4]) == pytest.approx(2 * one, rel=1e-9)
    assert push(range(8)) == pytest.approx(8 * one, rel=1e-9)


def test_async_beats_sync_with_a_straggler():
    # A compute-heavy step (densenet121, batch 128), so the server is not the bottleneck:
    # sync waits for the straggler every iteration, async does not.
    kw = dict(cluster="a10g-ps", engine="sim", straggler="rank=0,factor=3", batch_size=128)
    sync = predict("densenet121", "ps-sync", 4, **kw)
    asyn = predict("densenet121", "ps-async", 4, **kw)
    assert asyn.throughput_samples_per_s > 1.3 * sync.throughput_samples_per_s


def test_ssp_bound_holds_workers_back():
    kw = dict(cluster="a10g-ps", engine="sim", straggler="rank=0,factor=3", iterations=12, warmup=4, batch_size=128)
    run = predict("densenet121", "ps-ssp", 4, staleness_bound=1, return_run=True, **kw)
    asyn = predict("densenet121", "ps-async", 4, **kw)
    ssp = run.result
    assert ssp.throughput_samples_per_s < asyn.throughput_samples_per_s
    # No worker ever finished more than bound + 1 iterations ahead of the straggler.
    ends = {}
    for r in run.records:
        if r.name == "forward":  # one per iteration (load_params precedes it)
            ends.setdefault(r.cls, []).append(r.start)
    for w in range(1, 4):
        for k, t in enumerate(ends[w]):
            done_slow = sum(1 for x in ends[0] if x <= t)
            assert k - done_slow <= 1  # clock k - slowest clock (>= done_slow - 1) <= bound
    # The workers the bound held back are counted: three fast workers against one 3x
    # straggler wait at most pulls; async and the analytic engine report no such figure.
    assert 0.4 < ssp.staleness.held_pulls <= 1.0 and ssp.staleness.held_wait_s > 0
    assert asyn.staleness.held_pulls is None


def test_ssp_bound_that_never_binds_holds_no_pull():
    # Four identical deterministic workers stay within a bound of 3 of each other: SSP runs
    # as async, with the same step time.
    kw = dict(cluster="a10g-ps", engine="sim", iterations=12, warmup=4, jitter="none")
    ssp = predict("resnet50", "ps-ssp", 4, staleness_bound=3, **kw)
    asyn = predict("resnet50", "ps-async", 4, **kw)
    assert ssp.staleness.held_pulls == 0.0 and ssp.staleness.held_wait_s == 0.0
    assert ssp.iteration_time_s == pytest.approx(asyn.iteration_time_s, rel=1e-9)


def test_shared_host_floors_the_simulated_step_at_its_cores():
    """cpu-local-x4: 4 workers and the server share 2 cores. The timeline gives every process
    a core, so the step is floored at the cores' bound, as the analytic engine's; workers with
    GPUs of their own (a10g-ps) are not floored."""
    from simdl.costs.ps import ps_host_floor
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload import workload as wl
    from simdl.workload.library import load_workload

    kw = dict(dataset="mnist", batch_size=32, train_samples=512, epochs=1, optimizer="momentum")
    r = predict("vgg16", "ps-async", 4, cluster=lab("cpu-local-x4"), engine="sim", **kw)
    a = predict("vgg16", "ps-async", 4, cluster=lab("cpu-local-x4"), engine="analytic", **kw)
    cluster = allocate(lab("cpu-local-x4"), 4)
    w = wl.Workload(
        table=load_workload("vgg16", "mnist"),
        batch_size=32,
        train_samples=512,
        epochs=1,
        optimizer="momentum",
        precision="fp32",
    )
    plan = build_plan(w, cluster, StrategyConfig(name="ps-async"))
    floor = ps_host_floor(cluster, plan, a.compute_time_s)
    assert floor > 0 and r.iteration_time_s >= floor * (1 - 1e-9)
    assert any(n.startswith("shared host:") for n in r.notes) == (r.iteration_time_s == pytest.approx(floor))
    g = predict("vgg16", "ps-async", 4, cluster="a10g-ps", engine="sim", **kw)
    assert not any(n.startswith("shared host:") for n in g.notes)
    gplan = build_plan(w, allocate("a10g-ps", 4), StrategyConfig(name="ps-async"))
    assert ps_host_floor(allocate("a10g-ps", 4), gplan, 1.0) == 0
