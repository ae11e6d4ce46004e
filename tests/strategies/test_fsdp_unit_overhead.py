"""FSDP2's host time per unit (strategies.fsdp.unit_overhead_us): one task per unit and step."""

import dataclasses

import pytest

from simdl.cluster import allocate, load_cluster
from simdl.predict import predict
from simdl.provenance import Sourced
from simdl.strategies import StrategyConfig, build_plan
from simdl.strategies.fsdp_units import fsdp_units
from simdl.workload import workload as wl
from simdl.workload.library import load_workload


def _with_unit_overhead(name, seconds):
    spec = load_cluster(name)
    return dataclasses.replace(
        spec, strategies=spec.strategies.with_fsdp(unit_overhead=Sourced(seconds, "assumed", "test"))
    )


def _plan(spec, sharding, accumulation=1):
    t = load_workload("resnet18", "cifar10")
    w = wl.Workload(
        table=t,
        batch_size=8,
        train_samples=100,
        epochs=1,
        optimizer="momentum",
        precision="fp32",
        grad_accumulation=accumulation,
    )
    return t, build_plan(w, allocate(spec, 2), StrategyConfig(name="fsdp", sharding=sharding))


@pytest.mark.parametrize("sharding", ["full", "grad_op", "none"])
def test_one_hook_task_per_unit_whatever_the_collectives(sharding):
    spec = _with_unit_overhead("cpu-local", 4e-3)
    t, plan = _plan(spec, sharding)
    hooks = [x for x in plan.tasks if x.name.startswith("fsdp_hooks:")]
    assert len(hooks) == len(fsdp_units(t, "block").units)
    assert all(h.host_s == 4e-3 and h.stream == "compute" for h in hooks)
    _, plan2 = _plan(spec, sharding, accumulation=2)  # the hooks run every micro-step
    assert sum(x.name.startswith("fsdp_hooks:") for x in plan2.tasks) == 2 * len(hooks)


def test_the_step_grows_by_the_hooks_and_ddp_and_profiles_without_the_key_do_not():
    shipped = load_cluster("cpu-local")
    # a profile without the key (calibrated before 2026-11-25): no hook tasks, predictions as before
    base = dataclasses.replace(shipped, strategies=shipped.strategies.with_fsdp(unit_overhead=None))
    _, plan = _plan(base, "full")
    assert not any(x.name.startswith("fsdp_hooks:") for x in plan.tasks)
    kw = dict(model="resnet18", gpus=2, dataset="cifar10", batch_size=8)
    with_u = _with_unit_overhead("cpu-local", 4e-3)
    units = len(fsdp_units(load_workload("resnet18", "cifar10"), "block").units)
    a = predict(cluster=base, strategy="fsdp", sharding="none", **kw).iteration_time_s
    b = predict(cluster=with_u, strategy="fsdp", sharding="none", **kw).iteration_time_s
    # blocking FSDP on CPU runs the hooks on the training thread: the step grows by them
    # (and by the peers' wait per second of compute, which they add to)
    assert b - a == pytest.approx(units * 4e-3, rel=0.25)
    assert (
        predict(cluster=base, strategy="ddp", **kw).iteration_time_s
        == predict(cluster=with_u, strategy="ddp", **kw).iteration_time_s
    )
