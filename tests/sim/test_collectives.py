"""Collectives over the topology against the closed forms of simdl.collectives.cost."""

import numpy as np
import pytest
import simpy

from simdl.analytic.costs import CommCosts
from simdl.cluster import allocate
from simdl.cluster.topology import build_topology
from simdl.sim.collectives import Collectives, Router, run_collective
from simdl.sim.network import Network

MB = 1e6


def _run(cluster_name, gpus, calls, algorithm="ring"):
    """calls: list of (op, nbytes, kind, ranks, scope); all start at 0; returns end times."""
    cluster = allocate(cluster_name, gpus)
    router = Router(build_topology(cluster), cluster)
    comm = CommCosts(cluster, algorithm)
    colls = Collectives(router, cluster, comm, algorithm)
    env = simpy.Environment()
    net = Network(env, router.capacity, router.names)
    ends = {}

    def go(k, op, nbytes, kind, ranks, scope):
        n = len(ranks)
        yield env.process(run_collective(env, net, colls.phases(op, nbytes, kind, ranks, scope),
                                         colls.overhead(op, nbytes, n, scope)))
        ends[k] = env.now

    for k, call in enumerate(calls):
        env.process(go(k, *call))
    env.run()
    return [ends[k] for k in range(len(calls))], comm, cluster


@pytest.mark.parametrize("cluster_name,gpus", [("a100-80gb-nvlink", 4), ("a100-80gb-nvlink", 2),
                                               ("dgx-a100", 8), ("a100-80gb-pcie", 4)])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_ring_collective_matches_closed_form(cluster_name, gpus, op):
    m = 64 * MB
    (t,), comm, cluster = _run(cluster_name, gpus, [(op, m, "world", tuple(range(gpus)), "intra")])
    assert t == pytest.approx(comm.time(op, m, gpus, "intra"), rel=1e-9)


def test_ring_all_reduce_by_hand_on_nvswitch():
    # dgx-a100: 8 GPUs on NVSwitch, 300 GB/s per GPU port; ring all-reduce of 100 MB:
    # 2 (n-1) alpha + 2 (n-1)/n m / (b e) + overhead.
    m, n = 100 * MB, 8
    (t,), comm, cluster = _run("dgx-a100", n, [("all_reduce", m, "world", tuple(range(n)), "intra")])
    eff = cluster.spec.efficiency
    b = cluster.spec.intra_node.bandwidth.value * eff.collective_bandwidth_intra.value
    alpha = eff.collective_latency_intra.value
    overhead = eff.collective_overhead.value if eff.collective_overhead else 0.0
    assert t == pytest.approx(2 * (n - 1) * alpha + 2 * (n - 1) / n * m / b + overhead, rel=1e-9)


@pytest.mark.parametrize("cluster_name", ["a100-40gb-2node", "a100-40gb-2node-2nic", "a100-40gb-2node-4nic"])
def test_two_node_ring_matches_closed_form(cluster_name):
    m = 256 * MB
    (t,), comm, _ = _run(cluster_name, 8, [("all_reduce", m, "world", tuple(range(8)), "world")])
    assert t == pytest.approx(comm.time("all_reduce", m, 8, "world"), rel=1e-9)


@pytest.mark.parametrize("op", ["all_reduce", "broadcast"])
def test_tree_on_one_node_matches_closed_form(op):
    m = 32 * MB
    (t,), comm, _ = _run("dgx-a100", 8, [(op, m, "world", tuple(range(8)), "intra")], algorithm="tree")
    assert t == pytest.approx(comm.time(op, m, 8, "intra"), rel=1e-9)


def test_two_concurrent_all_reduces_share_the_links():
    m, n = 512 * MB, 8
    ranks = tuple(range(n))
    (alone,), comm, _ = _run("dgx-a100", n, [("all_reduce", m, "world", ranks, "intra")])
    (t1, t2), _, _ = _run("dgx-a100", n, [("all_reduce", m, "world", ranks, "intra")] * 2)
    latency = alone - 2 * (n - 1) / n * m / comm.bandwidth("intra")
    # Both take twice the bandwidth term of one alone (plus the same latency).
    assert t1 == pytest.approx(latency + 2 * (alone - latency), rel=1e-9)
    assert t2 == pytest.approx(t1, rel=1e-12)


def test_hybrid_replicate_groups_share_the_node_nic():
    # a100-40gb-2node: one NIC per node; the 4 'inter' groups (one rank per node each) all
    # cross it at once, so each gets a quarter: the analytic 'inter' bandwidth.
    cluster = allocate("a100-40gb-2node", 8)
    m = 64 * MB
    calls = [("all_reduce", m, "inter", (l, 4 + l), "inter") for l in range(4)]
    ends, comm, _ = _run("a100-40gb-2node", 8, calls)
    for t in ends:
        assert t == pytest.approx(comm.time("all_reduce", m, 2, "inter"), rel=1e-9)
    assert cluster.group_bandwidth("inter") * 4 == pytest.approx(cluster.node_network_bandwidth)
