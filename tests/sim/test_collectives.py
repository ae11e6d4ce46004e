"""Collectives over the topology against the closed forms of simdl.collectives.cost."""

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
        yield env.process(
            run_collective(env, net, colls.phases(op, nbytes, kind, ranks, scope), colls.overhead(op, nbytes, n, scope))
        )
        ends[k] = env.now

    for k, call in enumerate(calls):
        env.process(go(k, *call))
    env.run()
    return [ends[k] for k in range(len(calls))], comm, cluster


@pytest.mark.parametrize(
    "cluster_name,gpus", [("a100-80gb-nvlink", 4), ("a100-80gb-nvlink", 2), ("dgx-a100", 8), ("a100-80gb-pcie", 4)]
)
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
    calls = [("all_reduce", m, "inter", (lr, 4 + lr), "inter") for lr in range(4)]
    ends, comm, _ = _run("a100-40gb-2node", 8, calls)
    for t in ends:
        assert t == pytest.approx(comm.time("all_reduce", m, 2, "inter"), rel=1e-9)
    assert cluster.group_bandwidth("inter") * 4 == pytest.approx(cluster.node_network_bandwidth)


# ---------------------------------------------------------------------------- size regimes

REGIMES = {
    "kind": "calibrated",
    "source": "test",
    "link_GB_per_s": None,
    "collectives": {
        "all_reduce": {
            "overhead_us": 20,
            "regimes": [
                {"step_bytes": [1000, 1000000], "alpha_us": 100, "bus_GB_per_s": 1.0},
                {"step_bytes": [4000000, 64000000], "alpha_us": 0, "bus_GB_per_s": 0.5},
            ],
        },
        "all_gather": {
            "overhead_us": 10,
            "regimes": [
                {"step_bytes": [1000, 8000000], "alpha_us": 50, "bus_GB_per_s": 0.8},
                {"step_bytes": [16000000, 64000000], "alpha_us": 3000, "bus_GB_per_s": 0.5},
            ],
        },
        "reduce_scatter": {
            "overhead_us": 30,
            "regimes": [{"step_bytes": [1000, 64000000], "alpha_us": 250, "bus_GB_per_s": 0.4}],
        },
        "broadcast": {
            "overhead_us": 12,
            "regimes": [
                {"step_bytes": [4000, 700000], "alpha_us": 140, "bus_GB_per_s": 7.0},
                {"step_bytes": [1000000, 12000000], "alpha_us": 220, "bus_GB_per_s": 4.0},
            ],
        },
    },
}


def _regime_preset(tmp_path, base):
    import yaml

    from simdl.cluster import load_cluster

    link = load_cluster(base).intra_node.bandwidth.value / 1e9
    p = tmp_path / f"{base}-regimes.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "extends": base,
                "name": f"{base}-regimes",
                "efficiency": {"collective_regimes_intra": dict(REGIMES, link_GB_per_s=link)},
            }
        )
    )
    return str(p)


@pytest.mark.parametrize("base,gpus", [("cpu-local", 2), ("a100-80gb-nvlink", 4), ("dgx-a100", 8)])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast"])
def test_size_regimes_agree_with_the_analytic_engine_without_contention(tmp_path, base, gpus, op):
    path = _regime_preset(tmp_path, base)
    # Sizes inside regimes, in the gaps between them (blended) and beyond both ends.
    for m in (1e3, 64e3, 1.5e6, 5e6, 12e6, 40e6, 300e6):
        (t,), comm, _ = _run(path, gpus, [(op, m, "world", tuple(range(gpus)), "intra")], algorithm="auto")
        assert comm.curve(op, "intra") is not None
        assert t == pytest.approx(comm.time(op, m, gpus, "intra"), rel=1e-9), m


def test_a_collective_slower_than_the_base_rate_shares_its_whole_bandwidth_term(tmp_path):
    # Two concurrent all_gathers priced by a regime at a fraction of the link: each takes its
    # latency plus twice its bandwidth term (the extra time is bytes on the link, not a delay).
    path = _regime_preset(tmp_path, "cpu-local")
    m, ranks = 32e6, (0, 1)
    (alone,), comm, _ = _run(path, 2, [("all_gather", m, "world", ranks, "intra")])
    o, alpha, bw, _ = comm.parts("all_gather", m, 2, "intra")
    wire = 0.5 * m / bw
    assert alone == pytest.approx(o + alpha + wire, rel=1e-9)
    (t1, t2), _, _ = _run(path, 2, [("all_gather", m, "world", ranks, "intra")] * 2)
    assert t1 == pytest.approx(o + alpha + 2 * wire, rel=1e-9) and t2 == pytest.approx(t1, rel=1e-12)


def test_per_collective_factors_without_regimes_agree_too(tmp_path):
    import yaml

    p = tmp_path / "f.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "extends": "cpu-local",
                "name": "f",
                "efficiency": {
                    "collective_regimes_intra": None,
                    **{
                        f"collective_bandwidth_factor_{c}": {"value": v, "kind": "assumed", "source": "test"}
                        for c, v in (("all_gather", 0.5), ("reduce_scatter", 0.28), ("broadcast", 2.5))
                    },
                },
            }
        )
    )
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        (t,), comm, _ = _run(str(p), 2, [(op, 8e6, "world", (0, 1), "intra")], algorithm="auto")
        assert comm.curve(op, "intra") is None
        assert t == pytest.approx(comm.time(op, 8e6, 2, "intra"), rel=1e-9)
