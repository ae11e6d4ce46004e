"""efficiency.copy_in_step_factor: strategies' buffer copies priced at a multiple of their idle time."""

import dataclasses

import pytest

from simdl.cluster import load_cluster
from simdl.predict import predict
from simdl.provenance import Sourced

KW = dict(model="resnet18", gpus=2, dataset="cifar10", batch_size=8)


def _with_factor(c):
    spec = load_cluster("cpu-local")
    eff = dataclasses.replace(spec.efficiency, copy_in_step_factor=Sourced(c, "assumed", "test") if c else None)
    return dataclasses.replace(spec, efficiency=eff)


@pytest.mark.parametrize("strategy,sharding", [("fsdp", "full"), ("fsdp", "none"), ("ddp", None)])
def test_copies_scale_and_nothing_else_does(strategy, sharding):
    extra = {"sharding": sharding} if sharding else {}
    a = predict(cluster=_with_factor(None), strategy=strategy, **KW, **extra).step_split_s
    b = predict(cluster=_with_factor(3.0), strategy=strategy, **KW, **extra).step_split_s
    assert a["copies"] > 0 and b["copies"] == pytest.approx(3.0 * a["copies"])
    for k in ("compute", "optimizer", "host"):
        assert b[k] == pytest.approx(a[k])


def test_the_step_grows_by_the_extra_copy_time():
    kw = dict(strategy="fsdp", sharding="none", **KW)
    a = predict(cluster=_with_factor(None), **kw)
    b = predict(cluster=_with_factor(2.0), **kw)
    # blocking FSDP on CPU: the copies are on the training thread, the step grows by them
    # (and by the wait per second of compute, which they add to)
    assert b.iteration_time_s - a.iteration_time_s >= a.step_split_s["copies"] * 0.99


def test_parameter_server_copies_keep_their_idle_cost():
    # fitted on DDP/FSDP steps only: a PS worker's parameter load is not scaled
    kw = dict(strategy="ps-async", model="resnet18", gpus=2, dataset="mnist", batch_size=8)
    for engine in ("analytic", "sim"):
        a = predict(cluster=_with_factor(None), engine=engine, **kw)
        b = predict(cluster=_with_factor(5.0), engine=engine, **kw)
        assert b.iteration_time_s == pytest.approx(a.iteration_time_s) and b.step_split_s["copies"] > 0
