"""Hybrid sharding with a shard group smaller than a node (StrategyConfig.shard_group): FSDP2's
2-D mesh of any shape, e.g. 2 replicas x 2 shards on one 4-rank host, as validate/train.py
runs it with init_device_mesh(..., (2, 2))."""

from pathlib import Path

import pytest

import simdl
from simdl.cluster import allocate
from simdl.errors import SimdlError
from simdl.sim.collectives import group_instances
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload import workload as wl
from simdl.workload.library import load_workload

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def _plan(cluster, gpus, shard_group=None, sharding="hybrid", nodes=None):
    t = load_workload("resnet18", "cifar10")
    w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    c = allocate(cluster, gpus, nodes)
    return c, build_plan(w, c, StrategyConfig(name="fsdp", sharding=sharding, shard_group=shard_group))


def test_two_by_two_on_one_host_shards_in_pairs_and_all_reduces_the_shard_across_pairs():
    c, plan = _plan(lab("cpu-epyc-x4"), 4, shard_group=2)
    assert (plan.details["shard_size"], plan.details["replicas"]) == (2, 2)
    assert plan.groups["shard"].size == 2 and plan.groups["replicate"].size == 2
    assert plan.groups["shard"].scope == plan.groups["replicate"].scope == "intra"  # one node
    units = plan.details["unit_bytes"]
    rs = [t for t in plan.tasks if t.collective == "reduce_scatter"]
    ar = [t for t in plan.tasks if t.collective == "all_reduce"]
    assert len(rs) == len(ar) == len(units)
    # the replicas all-reduce the reduce-scattered shard: half of each unit's gradient
    assert sorted(t.comm_bytes for t in ar) == pytest.approx(sorted(b / 2 for b in units))
    assert all(t.group == "shard" for t in rs) and all(t.group == "replicate" for t in ar)


def test_the_sim_lays_the_mesh_out_row_major():
    c, plan = _plan(lab("cpu-epyc-x4"), 4, shard_group=2)
    assert group_instances(plan.groups["shard"], c) == [("block", (0, 1)), ("block", (2, 3))]
    assert group_instances(plan.groups["replicate"], c) == [("strided", (0, 2)), ("strided", (1, 3))]


def test_default_shard_group_is_a_node_as_before():
    _, default = _plan("dgx-a100", 16)
    _, explicit = _plan("dgx-a100", 16, shard_group=8)
    assert default.tasks == explicit.tasks and default.groups == explicit.groups
    assert default.groups["replicate"].scope == "inter"
    kw = dict(model="resnet50", strategy="fsdp", gpus=16, cluster="dgx-a100", sharding="hybrid")
    assert simdl.predict(**kw).iteration_time_s == simdl.predict(shard_group=8, **kw).iteration_time_s


def test_a_smaller_shard_group_across_nodes_replicates_over_the_world():
    c, plan = _plan("dgx-a100", 16, shard_group=4)
    assert plan.groups["shard"].scope == "intra" and plan.groups["replicate"].scope == "world"
    r = simdl.predict("resnet50", "fsdp", 16, cluster="dgx-a100", sharding="hybrid", shard_group=4, engine="sim")
    assert r.iteration_time_s > 0


def test_memory_and_bytes_sit_between_full_and_none():
    kw = dict(model="vgg16", strategy="fsdp", gpus=4, cluster=lab("cpu-epyc-x4"), dataset="cifar10")
    full, none = simdl.predict(sharding="full", **kw), simdl.predict(sharding="none", **kw)
    hybrid = simdl.predict(sharding="hybrid", shard_group=2, **kw)
    assert full.peak_tensor_bytes < hybrid.peak_tensor_bytes < none.peak_tensor_bytes
    # half the all-gather and reduce-scatter bytes of full sharding, plus the replicas' all-reduce
    assert none.comm_bytes_per_iteration < hybrid.comm_bytes_per_iteration < full.comm_bytes_per_iteration


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(sharding="full", shard_group=2), "FSDP hybrid sharding only"),
        (dict(sharding="hybrid", shard_group=3), "shard group 3 must divide"),
        (dict(sharding="hybrid", shard_group=0), "must be an integer >= 1"),
    ],
)
def test_bad_shard_groups_are_one_line_errors(kw, message):
    with pytest.raises(SimdlError, match=message):
        simdl.predict("vgg16", "fsdp", 4, cluster=lab("cpu-epyc-x4"), **kw)


def test_the_cli_takes_and_echoes_the_mesh(capsys):
    from simdl.cli import main

    assert main(
        [
            "predict",
            "--model",
            "vgg16",
            "--strategy",
            "fsdp",
            "--sharding",
            "hybrid",
            "--gpus",
            "4",
            "--shard-group",
            "2",
            "--cluster",
            lab("cpu-epyc-x4"),
        ]
    ) in (0, None)
    assert "fsdp-hybrid (2 replicas x 2 shards)" in capsys.readouterr().out
    assert main(["predict", "--strategy", "ddp", "--shard-group", "2"]) == 2
    err = capsys.readouterr().err
    assert "--shard-group 2 applies to fsdp" in err and "'ddp'" in err and len(err.strip().splitlines()) == 1
