"""Blocking collectives (FSDP2 on CPU) priced by the profile's measured factors and wait."""

import dataclasses

import pytest
from simdl.analytic.costs import CommCosts

from simdl.cluster import allocate, load_cluster
from simdl.cluster.spec import FrozenMap
from simdl.provenance import Sourced


def _cluster(**eff):
    spec = load_cluster("cpu-local")
    e = dataclasses.replace(spec.efficiency, **eff)
    return allocate(dataclasses.replace(spec, efficiency=e), 2, None)


def _src(v):
    return Sourced(v, "assumed", "test")


def test_a_blocking_call_takes_its_factor_times_the_idle_wire_time_plus_the_delay():
    idle = CommCosts(
        _cluster(
            collective_load_factor=None,
            collective_load_factor_all_reduce=None,
            collective_load_half_size=None,
            collective_load_overhead=None,
        )
    )
    c = _cluster(collective_blocking_factors=FrozenMap({"all_gather": _src(1.5)}), collective_load_overhead=_src(1e-3))
    blocking, overlapped = CommCosts(c, blocking=True), CommCosts(c)
    n = 64e6
    o, alpha, bw, _ = idle.parts("all_gather", n, 2, "world")
    ob, ab, bwb, _ = blocking.parts("all_gather", n, 2, "world")
    assert (ob, ab, bwb) == pytest.approx((o + 1e-3, 1.5 * alpha, bw / 1.5))
    # a collective without a factor, and a plan whose calls do not block: the load factors
    assert blocking.parts("all_reduce", n, 2, "world") == overlapped.parts("all_reduce", n, 2, "world")
    assert overlapped.time("all_gather", n, 2, "world") != blocking.time("all_gather", n, 2, "world")


def test_blocking_keys_round_trip_through_the_profile_format():
    from simdl.cluster.spec import _parse_efficiency
    from simdl.errors import SimdlError

    raw = load_cluster("cpu-local").efficiency.to_dict()
    raw["collective_blocking_factor_reduce_scatter"] = {"value": 1.4, "kind": "calibrated", "source": "t"}
    raw["collective_blocking_wait"] = {"value": 0.1, "kind": "calibrated", "source": "t"}
    eff = _parse_efficiency(raw, "test", multi_node=False)
    assert eff.collective_blocking_factors["reduce_scatter"].value == 1.4
    assert eff.collective_blocking_wait.value == pytest.approx(0.1)
    assert _parse_efficiency(eff.to_dict(), "again", multi_node=False) == eff
    raw["collective_blocking_factor_reduce_scatter"]["value"] = 40
    with pytest.raises(SimdlError, match="collective_blocking_factor_reduce_scatter = 40"):
        _parse_efficiency(raw, "test", multi_node=False)


def test_blocking_plans_wait_for_peers_in_proportion_to_their_compute():
    from simdl.predict import predict

    shipped = load_cluster("cpu-local")
    # the shipped profile may have its own calibrated wait: start from none
    spec = dataclasses.replace(
        shipped, efficiency=dataclasses.replace(shipped.efficiency, collective_blocking_wait=None)
    )
    kw = dict(model="resnet18", strategy="fsdp", gpus=2, dataset="cifar10", batch_size=16)
    base = predict(cluster=spec, **kw)
    e = dataclasses.replace(spec.efficiency, collective_blocking_wait=_src(0.1))
    waited = predict(cluster=dataclasses.replace(spec, efficiency=e), **kw)
    assert waited.iteration_time_s == pytest.approx(base.iteration_time_s + 0.1 * base.compute_time_s, rel=1e-6)
    # DDP's collectives do not block: no wait
    ddp = dict(kw, strategy="ddp")
    assert predict(cluster=dataclasses.replace(spec, efficiency=e), **ddp).iteration_time_s == pytest.approx(
        predict(cluster=spec, **ddp).iteration_time_s, rel=1e-9
    )
