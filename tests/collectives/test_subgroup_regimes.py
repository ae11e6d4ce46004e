"""Regime curves of groups smaller than a node (``efficiency.collective_regimes_subgroups``):
the schema, which calls they price, and the hybrid plan's step moving with them."""

from __future__ import annotations

import copy

import pytest
import yaml
from simdl.analytic.costs import CommCosts

from simdl.cluster import allocate, load_cluster
from simdl.errors import SimdlError

MB = 1e6
OFF = {"kind": "assumed", "source": "test"}
# The node's curves (4 ranks): all_gather at 1 GB/s bus, all_reduce at 2 GB/s.
NODE = {
    "kind": "calibrated",
    "source": "test node",
    "link_GB_per_s": 2.0,
    "collectives": {
        "all_gather": {
            "overhead_us": 10,
            "regimes": [{"step_bytes": [1000, 64000000], "alpha_us": 50, "bus_GB_per_s": 1.0}],
        },
        "all_reduce": {
            "overhead_us": 10,
            "regimes": [{"step_bytes": [1000, 64000000], "alpha_us": 50, "bus_GB_per_s": 2.0}],
        },
    },
}
# Pairs, measured both at once: all_gather at a quarter of the node's bus rate; no all_reduce curve.
PAIRS = {
    "kind": "calibrated",
    "source": "test pairs",
    "link_GB_per_s": 2.0,
    "collectives": {
        "all_gather": {
            "overhead_us": 30,
            "regimes": [{"step_bytes": [1000, 64000000], "alpha_us": 80, "bus_GB_per_s": 0.25}],
        },
    },
}


def _profile(tmp_path, subgroups, name="p.yaml", gpus_per_node=None):
    eff = {
        "collective_regimes_intra": NODE,
        "collective_load_factor": dict(OFF, value=1.0),
        "collective_load_factor_all_reduce": dict(OFF, value=1.0),
        "collective_load_overhead_us": dict(OFF, value=0.0),
    }
    if subgroups is not ...:
        eff["collective_regimes_subgroups"] = subgroups
    # the link rate the curves were measured at, so that they apply unscaled
    d = {
        "extends": "cpu-local",
        "name": "p",
        "efficiency": eff,
        "intra_node": {"bandwidth_GB_per_s": dict(OFF, value=2.0)},
    }
    if gpus_per_node:
        d["gpus_per_node"] = gpus_per_node
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(p)


def test_a_subgroup_curve_prices_its_group_size_inside_a_node_only(tmp_path):
    spec = load_cluster(_profile(tmp_path, {"2": PAIRS}, gpus_per_node=4))
    assert set(spec.efficiency.collective_regimes_subgroups) == {2}
    comm = CommCosts(allocate(spec, 4))
    m = 32 * MB
    # a pair: the pairs' curve (ring form at n = 2: one step, half the message)
    assert comm.time("all_gather", m, 2, "intra") == pytest.approx(30e-6 + 80e-6 + 0.5 * m / 0.25e9)
    assert comm.time("all_gather", m, 2, "world") == comm.time("all_gather", m, 2, "intra")  # one node
    # the whole node: the node's curve
    assert comm.time("all_gather", m, 4, "intra") == pytest.approx(10e-6 + 3 * 50e-6 + 0.75 * m / 1.0e9)
    # a collective the pairs have no curve for: the node's curve, scaled by the ring to n = 2
    assert comm.time("all_reduce", m, 2, "intra") == pytest.approx(10e-6 + 2 * 50e-6 + m / 2.0e9)


def test_without_subgroup_curves_a_pair_is_the_node_curve_ring_scaled(tmp_path):
    comm = CommCosts(allocate(load_cluster(_profile(tmp_path, ..., gpus_per_node=4)), 4))
    assert comm.time("all_gather", 32 * MB, 2, "intra") == pytest.approx(10e-6 + 50e-6 + 0.5 * 32 * MB / 1.0e9)


def test_round_trip_and_null(tmp_path):
    spec = load_cluster(_profile(tmp_path, {"2": PAIRS, 4: NODE}, gpus_per_node=8))
    d = spec.to_dict()
    assert list(d["efficiency"]["collective_regimes_subgroups"]) == ["2", "4"]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(d, sort_keys=False))
    assert load_cluster(str(again)).efficiency == spec.efficiency
    assert not load_cluster(_profile(tmp_path, None, name="n.yaml")).efficiency.collective_regimes_subgroups


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"1": PAIRS}, "group size '1'; accepted: an integer >= 2"),
        ({"two": PAIRS}, "group size 'two'"),
        ({"2": dict(PAIRS, kind="guessed")}, r"collective_regimes_subgroups: 2: kind"),
        (["2"], "must be a mapping group size"),
    ],
)
def test_bad_subgroup_sections_are_one_line_errors(tmp_path, bad, msg):
    with pytest.raises(SimdlError, match=msg) as e:
        load_cluster(_profile(tmp_path, bad))
    assert "\n" not in str(e.value)


def test_a_slower_pair_all_gather_slows_the_hybrid_step_not_full_sharding(tmp_path):
    from simdl.predict import predict

    slow = copy.deepcopy(PAIRS)
    slow["collectives"]["all_gather"]["regimes"][0]["bus_GB_per_s"] = 0.05
    base = _profile(tmp_path, ..., name="base.yaml", gpus_per_node=4)
    sub = _profile(tmp_path, {"2": slow}, name="sub.yaml", gpus_per_node=4)

    def step(cluster, sharding, **kw):
        return predict(
            model="resnet18",
            strategy="fsdp",
            gpus=4,
            cluster=cluster,
            batch_size=8,
            sharding=sharding,
            engine="analytic",
            **kw,
        ).iteration_time_s

    assert step(sub, "hybrid", shard_group=2) > step(base, "hybrid", shard_group=2) * 1.05
    assert step(sub, "full") == step(base, "full")  # the world group keeps the node's curve
