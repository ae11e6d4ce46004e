"""Parameter server on the timeline: staleness, incast, SSP."""

import pytest
import simpy

from simdl.cluster import allocate
from simdl.cluster.topology import build_topology
from simdl.predict import predict
from simdl.sim.collectives import Router
from simdl.sim.network import Network


def test_sync_staleness_is_zero():
    r = predict("resnet18", "ps-sync", 4, cluster="a10g-ps", engine="sim", return_run=True)
    assert r.result.staleness.max == 0
    assert r.staleness_histogram == {}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_async_staleness_centres_on_n_minus_1(n):
    r = predict("resnet18", "ps-async", n, cluster="a10g-ps", engine="sim", return_run=True)
    st = r.result.staleness
    assert st.p50 == n - 1
    assert st.mean == pytest.approx(n - 1, abs=0.5)


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
    kw = dict(cluster="a10g-ps", engine="sim", straggler="rank=0,factor=3", iterations=12, warmup=4,
              batch_size=128)
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
