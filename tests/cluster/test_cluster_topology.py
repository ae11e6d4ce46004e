"""The networkx topology agrees with the analytic bandwidth model (allocate.py)."""

from __future__ import annotations

import pytest

from simdl.cluster import allocate
from simdl.cluster.topology import (
    build_topology,
    flat_rings,
    flow_rates,
    intra_egress,
    node_network_egress,
    path_bottleneck,
    ring_bus_bandwidth,
    route,
)
from simdl.errors import SimdlError

# (preset, gpus): full nodes, so every NIC has its GPUs (see allocate.py docstring).
MULTI_NODE = [
    ("dgx-a100", 16),
    ("dgx-a100", 32),
    ("h100-hgx", 16),
    ("a100-40gb-2node", 8),
    ("a100-40gb-2node-2nic", 8),
    ("a100-40gb-2node-4nic", 8),
    ("a10g-ps", 8),
    ("v100-dgx1", 16),
]
SINGLE_NODE = [
    ("dgx-a100", 8),
    ("a100-80gb-nvlink", 4),
    ("a100-80gb-nvlink", 2),
    ("a100-80gb-pcie", 4),
    ("a10g-ps", 4),
    ("cpu-local", 2),
    ("h100-hgx", 8),
    ("v100-dgx1", 8),
]


def test_dgx_a100_two_nodes_node_and_edge_counts():
    g = build_topology(allocate("dgx-a100", 16))
    kinds = {}
    for _, data in g.nodes(data=True):
        kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
    # per node: 8 GPUs, 1 NVSwitch, 8 PCIe switches, 1 host, 8 NICs; plus the network.
    assert kinds == {"gpu": 16, "nvswitch": 2, "pcie": 16, "host": 2, "nic": 16, "net": 1}
    assert g.number_of_nodes() == 53
    # per node, both directions: GPU-NVSwitch 16, GPU-PCIe 16, PCIe-host 16, NIC-PCIe 16, NIC-net 16.
    assert g.number_of_edges() == 160
    assert all({"bandwidth", "latency", "kind"} <= set(d) for _, _, d in g.edges(data=True))


@pytest.mark.parametrize("preset,gpus", SINGLE_NODE + MULTI_NODE)
def test_intra_node_pair_matches_group_bandwidth(preset, gpus):
    c = allocate(preset, gpus)
    g = build_topology(c)
    ranks = list(c.ranks_on_node(0))
    egress = min(intra_egress(g, r) for r in ranks)
    assert egress == pytest.approx(c.group_bandwidth("intra"))
    if c.spec.intra_node.link != "nvlink":  # switch-like fabrics: one pair sees the whole port
        bw, lat = path_bottleneck(g, f"gpu:{ranks[0]}", f"gpu:{ranks[1]}")
        assert bw == pytest.approx(c.group_bandwidth("intra"))
        assert lat == pytest.approx(c.link_latency("intra"))


@pytest.mark.parametrize("preset,gpus", MULTI_NODE)
def test_inter_node_pairs_match_group_bandwidth(preset, gpus):
    c = allocate(preset, gpus)
    g = build_topology(c)
    per = c.ranks_per_node
    # Every local rank talks to its peer on the next node at once (the 'inter' groups).
    pairs = [(f"gpu:{lr}", f"gpu:{per + lr}") for lr in range(per)]
    assert min(flow_rates(g, pairs)) == pytest.approx(c.group_bandwidth("inter"))
    bw, lat = path_bottleneck(g, "gpu:0", f"gpu:{per}")
    assert bw == pytest.approx(min(c.spec.inter_node.nic_bandwidth.value, c.spec.intra_node.pcie_bandwidth.value))
    assert lat == pytest.approx(c.link_latency("inter"))
    assert node_network_egress(g, 0) == pytest.approx(c.spec.inter_node.node_bandwidth)


@pytest.mark.parametrize("preset,gpus", [p for p in MULTI_NODE if p[0] != "v100-dgx1"] + SINGLE_NODE[:1])
def test_flat_rings_match_world_bandwidth(preset, gpus):
    # v100-dgx1 is left out: its irregular mesh needs NCCL's per-channel ring orders, which
    # flat_rings does not reproduce; the analytic value there is an upper bound.
    c = allocate(preset, gpus)
    g = build_topology(c)
    assert ring_bus_bandwidth(g, flat_rings(c)) == pytest.approx(c.group_bandwidth("world"))


def test_dgx1_ring_follows_nvlink():
    c = allocate("v100-dgx1", 8)
    g = build_topology(c)
    ring = flat_rings(c)[0]
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert [g.edges[e]["kind"] for e in route(g, f"gpu:{a}", f"gpu:{b}")] == ["nvlink"]
    # GPUs 0 and 5 have no direct NVLink: the route goes over PCIe and the host, not through a GPU.
    kinds = [g.nodes[v]["kind"] for _, v in route(g, "gpu:0", "gpu:5")]
    assert "gpu" not in kinds[:-1] and "host" in kinds


@pytest.mark.parametrize("preset,gpus", [("a10g-ps", 4), ("a10g-ps", 8), ("cpu-local", 2)])
def test_parameter_server_routes_match(preset, gpus):
    c = allocate(preset, gpus)
    g = build_topology(c)
    rates = flow_rates(g, [(f"gpu:{r}", "ps:0") for r in range(c.gpus)])
    assert min(rates) == pytest.approx(c.ps_bandwidth())
    _, lat = path_bottleneck(g, "gpu:0", "ps:0")
    assert lat == pytest.approx(c.ps_latency())


def test_route_is_deterministic_and_uses_the_nearest_nic():
    c = allocate("dgx-a100", 16)
    g = build_topology(c)
    for local in range(8):
        path = route(build_topology(c), f"gpu:{local}", f"gpu:{8 + local}")
        assert path == route(g, f"gpu:{local}", f"gpu:{8 + local}")
        nics = [v for _, v in path if v.startswith("nic:")]
        assert nics == [f"nic:0:{local}", f"nic:1:{local}"]


def test_route_errors():
    g = build_topology(allocate("a100-80gb-nvlink", 4))
    with pytest.raises(SimdlError, match="no node 'gpu:9'"):
        route(g, "gpu:0", "gpu:9")
