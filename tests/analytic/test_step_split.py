"""Result.step_split_s: where a predicted step's seconds go, by kind, adding up to the step."""

import dataclasses
from pathlib import Path

import pytest
from simdl.analytic.costs import SPLIT_KINDS

from simdl.cluster import load_cluster
from simdl.predict import predict
from simdl.provenance import Sourced
from simdl.strategies.fsdp_units import fsdp_units
from simdl.workload.library import load_workload

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


KW = dict(model="resnet18", gpus=2, dataset="cifar10", batch_size=8)
CASES = [("ddp", None), ("fsdp", "full"), ("fsdp", "grad_op"), ("fsdp", "none")]


@pytest.mark.parametrize("engine", ["analytic", "sim"])
@pytest.mark.parametrize("strategy,sharding", CASES)
def test_split_adds_up_to_the_step(engine, strategy, sharding):
    extra = {"sharding": sharding} if sharding else {}
    r = predict(cluster="cpu-local", strategy=strategy, engine=engine, **KW, **extra)
    s = r.step_split_s
    assert set(SPLIT_KINDS) <= set(s) and all(v >= 0 for v in s.values())
    assert sum(s.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)
    # the compute-stream kinds are the compute time the result reports
    assert sum(s[k] for k in SPLIT_KINDS) == pytest.approx(r.compute_time_s, rel=1e-9)
    assert s["compute"] > 0 and s["optimizer"] > 0
    if strategy == "fsdp":  # FSDP2 packs its collective buffers: copies on the compute stream
        assert s["copies"] > 0


def test_ps_worker_split_and_the_rest_is_communication():
    r = predict(
        cluster=lab("cpu-local-x4"), strategy="ps-sync", model="resnet18", gpus=4, dataset="mnist", batch_size=8
    )
    s = r.step_split_s
    assert s["compute"] > 0 and s["interference"] == 0 and s["blocking_wait"] == 0
    assert s["exposed_comm"] == pytest.approx(r.iteration_time_s - r.compute_time_s, rel=1e-9)


def test_host_kind_is_fsdp2s_time_per_unit():
    spec = load_cluster("cpu-local")
    spec = dataclasses.replace(
        spec, strategies=spec.strategies.with_fsdp(unit_overhead=Sourced(2e-3, "assumed", "test"))
    )
    units = len(fsdp_units(load_workload("resnet18", "cifar10"), "block").units)
    s = predict(cluster=spec, strategy="fsdp", sharding="full", **KW).step_split_s
    assert s["host"] == pytest.approx(units * 2e-3)
    assert predict(cluster=spec, strategy="ddp", **KW).step_split_s["host"] == 0.0


def test_row_flattens_the_split():
    row = predict(cluster="cpu-local", strategy="ddp", **KW).row()
    assert "step_split_s" not in row and row["step_copies_s"] >= 0 and "step_exposed_comm_s" in row


def test_split_index_is_kept_per_task_list_not_per_id():
    """compute_split keeps each plan's task classification: the same list splits the same
    way again, and a different list is classified afresh (the kept entry holds its list, so
    its id is not reused while kept); each split matches the sums worked by hand."""
    import numpy as np
    from simdl.analytic.costs import RowTimes, compute_split

    from simdl.strategies.plan import Task

    rows = RowTimes(np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([0.0, 1.0, 3.0]), np.array([0.0, 3.0, 7.0]))
    a = [
        Task("f", "compute", "fwd", rows=(0, 2), direction="fwd"),
        Task("c", "compute", "bwd", bytes=8.0, kernels=1, host_s=0.5),
        Task("ar", "comm", "comm", collective="all_reduce", comm_bytes=8.0),
    ]
    first = compute_split(a, rows, [3.0, 2.0, 9.0])
    assert first == compute_split(a, rows, [3.0, 2.0, 9.0])  # the kept index gives the same split
    assert first["compute"] == 3.0 and first["host"] == 0.5 and first["copies"] == 1.5
    b = [Task("o", "compute", "opt", bytes=8.0, kernels=1)]
    assert compute_split(b, rows, [0.25]) == dict(dict.fromkeys(SPLIT_KINDS, 0.0), optimizer=0.25)
