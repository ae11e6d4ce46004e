"""Rank placement rules and the analytic bandwidth model of simdl.cluster.allocate."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from simdl.cluster import allocate, load_cluster
from simdl.errors import SimdlError


def test_fill_one_node():
    c = allocate(load_cluster("dgx-a100"), 8)
    assert (c.gpus, c.nodes, c.gpus_per_node) == (8, 1, 8)
    assert [c.node_of(r) for r in (0, 7)] == [0, 0]


def test_fill_many_nodes_and_placement():
    c = allocate("dgx-a100", 1024)
    assert (c.nodes, c.ranks_per_node) == (128, 8)
    assert c.node_of(0) == 0 and c.node_of(8) == 1 and c.node_of(1023) == 127
    assert c.local_rank(9) == 1
    assert c.group_ranks("inter", 9) == tuple(n * 8 + 1 for n in range(128))
    assert c.group_ranks("intra", 9) == tuple(range(8, 16))
    assert c.group_size("world") == 1024


def test_partial_node_and_explicit_nodes():
    c = allocate("dgx-a100", 12)  # ceil(12/8) = 2 nodes of 6
    assert (c.nodes, c.gpus_per_node) == (2, 6)
    c = allocate("dgx-a100", 8, nodes=2)
    assert (c.nodes, c.gpus_per_node) == (2, 4)


def test_default_size_is_the_preset_size():
    c = allocate("a100-40gb-2node")
    assert (c.gpus, c.nodes) == (8, 2)


def test_gpus_zero_rejected():
    with pytest.raises(SimdlError, match=r"^--gpus 0: must be >= 1$"):
        allocate("dgx-a100", 0)


def test_nodes_zero_rejected():
    with pytest.raises(SimdlError, match=r"--nodes 0: must be >= 1"):
        allocate("dgx-a100", 8, nodes=0)


def test_uneven_split_rejected():
    with pytest.raises(SimdlError, match=r"--gpus 6 --nodes 4: gpus must be a multiple of nodes"):
        allocate("dgx-a100", 6, nodes=4)
    with pytest.raises(SimdlError, match=r"--gpus 9 .* accepted: --gpus 8 or 10"):
        allocate("dgx-a100", 9)


def test_too_many_per_node_rejected():
    with pytest.raises(SimdlError, match=r"16 GPUs per node but preset 'dgx-a100' has 8 per node"):
        allocate("dgx-a100", 16, nodes=1)


def test_single_node_preset_rejects_more_gpus_and_suggests_multi_node():
    with pytest.raises(SimdlError) as exc:
        allocate("a100-80gb-nvlink", 8)
    msg = str(exc.value)
    assert "\n" not in msg
    assert "'a100-80gb-nvlink'" in msg and "4 GPUs" in msg and "multi-node preset" in msg
    assert "'dgx-a100'" in msg  # same GPU type first


def test_max_nodes_rejected():
    with pytest.raises(SimdlError, match=r"at most 2 nodes \(8 GPUs\)"):
        allocate("a100-40gb-2node", 12)


def test_bad_rank_rejected():
    c = allocate("dgx-a100", 8)
    with pytest.raises(SimdlError, match="rank 8 out of range"):
        c.node_of(8)
    with pytest.raises(SimdlError, match="unknown communication group 'global'"):
        c.group_bandwidth("global")


# --------------------------------------------------------------------------- bandwidth model


def test_single_node_groups_use_the_intra_link():
    c = allocate("dgx-a100", 8)
    assert c.group_bandwidth("world") == c.group_bandwidth("intra") == pytest.approx(300e9)
    assert c.group_bus_bandwidth("world") == pytest.approx(300e9 * 0.775)


def test_flat_ring_uses_all_nics_of_a_node():
    # nccl-tests #175: 8-GPU nodes with 4 x 200 Gb/s -> 'theoretical 100 GB/s' bus bandwidth.
    c = allocate("dgx-a100", 16)
    assert c.group_bandwidth("world") == pytest.approx(200e9)  # 8 NICs x 25 GB/s, below NVSwitch 300
    assert c.group_bandwidth("inter") == pytest.approx(25e9)  # 8 concurrent per-local-rank groups share 8 NICs
    assert c.group_bus_bandwidth("world") == pytest.approx(200e9 * 0.86)
    # Inter-node alpha: the Polaris fit (simdl.calibrate.published, 1.64 us; the <= 1 KiB rows gave 1.64-1.8).
    assert c.group_latency("world") == pytest.approx(max(0.7e-6, 1.7e-6), rel=0.05)


def test_study2_nic_variants():
    one = allocate("a100-40gb-2node", 8)
    two = allocate("a100-40gb-2node-2nic", 8)
    assert one.group_bandwidth("world") == pytest.approx(25e9)
    assert one.group_bandwidth("inter") == pytest.approx(25e9 / 4)
    assert two.group_bandwidth("world") == pytest.approx(50e9)
    # Polaris (2 NICs) measured 36.08 GB/s bus bandwidth on 2 nodes at 1 GiB: the preset, fitted to all
    # Polaris rows >= 64 MiB (35.6 GB/s asymptote, simdl.calibrate.published), reproduces it within 2 %.
    assert two.group_bus_bandwidth("world") == pytest.approx(36.08e9, rel=0.02)


def test_mesh_with_fewer_gpus_uses_only_the_direct_bundles():
    # 2 of 4 GPUs on an HGX A100 4-GPU board: one 4-link bundle, 100 GB/s.
    assert allocate("a100-80gb-nvlink", 2).group_bandwidth("intra") == pytest.approx(100e9)
    assert allocate("a100-80gb-nvlink", 4).group_bandwidth("intra") == pytest.approx(300e9)
    # DGX-1 GPUs 0 and 1 share a single NVLink2.
    assert allocate("v100-dgx1", 2).group_bandwidth("intra") == pytest.approx(25e9)
    assert allocate("v100-dgx1", 8).group_bandwidth("intra") == pytest.approx(150e9)


def test_pcie_preset():
    c = allocate("a100-80gb-pcie", 4)
    assert c.group_bandwidth("world") == pytest.approx(32e9)


def test_parameter_server_bandwidth():
    c = allocate("a10g-ps", 4)
    # 4 workers share the node's 40 Gb/s NIC; the server's 40 Gb/s NIC is shared by 4 too.
    assert c.ps_bandwidth() == pytest.approx(5e9 / 4)
    assert c.ps_latency() == pytest.approx(30e-6)
    with pytest.raises(SimdlError, match="has no ps_servers"):
        allocate("dgx-a100", 8).ps_bandwidth()


def test_shared_cpu_device_is_split_between_ranks():
    c = allocate("cpu-local", 2)
    assert c.device_share == 0.5
    assert c.per_rank_peak_flops("fp32") == pytest.approx(c.spec.gpu.peak("fp32") / 2)
    assert allocate("dgx-a100", 8).per_rank_peak_flops("fp32") == pytest.approx(19.5e12)


def test_cluster_is_hashable_and_analytic_path_has_no_networkx():
    c = allocate("dgx-a100", 64)
    assert hash(c) == hash(allocate("dgx-a100", 64))
    assert c == allocate("dgx-a100", 64)
    # Only topology.py may import networkx; the analytic path (spec, allocate) stays pure Python.
    # (importlib: the package attribute `simdl.cluster.allocate` is the function, not the module)
    for name in ("simdl.cluster.allocate", "simdl.cluster.spec"):
        source = Path(importlib.import_module(name).__file__).read_text()
        assert "import networkx" not in source and "from networkx" not in source
