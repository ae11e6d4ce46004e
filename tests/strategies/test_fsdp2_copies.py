"""The copies FSDP2 and DDP make around their collectives (what the plans schedule on the
compute stream, and which buffers they allocate), read off PyTorch's source."""

import pytest

from simdl.cluster import allocate
from simdl.strategies import StrategyConfig, build_plan
from simdl.strategies.fsdp_units import fsdp_units
from simdl.workload import workload as wl
from simdl.workload.library import load_workload


def _plan(strategy, sharding="full", gpus=2, model="resnet18"):
    t = load_workload(model, "cifar10")
    w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    return t, build_plan(w, allocate("cpu-local", gpus), StrategyConfig(name=strategy, sharding=sharding))


def _names(plan, prefix):
    return [t for t in plan.tasks if t.name.startswith(prefix)]


@pytest.mark.parametrize("sharding", ["full", "grad_op"])
def test_every_all_gather_has_its_copy_in_and_copy_out(sharding):
    t, plan = _plan("fsdp", sharding)
    units = fsdp_units(t, "block")
    ags = _names(plan, "all_gather")
    assert len(_names(plan, "copy_in")) == len(ags) == len(_names(plan, "copy_out"))
    for i, task in enumerate(plan.tasks):
        if task.name.startswith("all_gather"):
            cin = plan.tasks[task.deps[0]]
            assert cin.name.startswith("copy_in") and cin.stream == "compute"
            # the copy-in allocates the whole gathered buffer and moves this rank's shard
            assert cin.allocs == (task.comm_bytes,) and cin.bytes == pytest.approx(2 * task.comm_bytes / 2)
    # copy-out allocates one unsharded tensor per parameter of the unit
    largest = max(units.units, key=lambda u: u.numel)
    out = [x for x in _names(plan, "copy_out") if x.name.endswith(":" + largest.name)][0]
    assert sum(out.allocs) == largest.numel * 4 and len(out.allocs) == largest.n_tensors
    # each reduce-scatter waits for the copy of the unit's gradients into its flat input
    for task in _names(plan, "reduce_scatter"):
        cin = plan.tasks[task.deps[0]]
        assert cin.name.startswith("rs_copy_in") and cin.allocs[0] == task.comm_bytes


def test_no_shard_copies_locally_once_and_all_reduces():
    t, plan = _plan("fsdp", "none")
    assert not _names(plan, "all_gather") and not _names(plan, "reduce_scatter")
    copies = _names(plan, "copy_out")
    assert copies and all(c.phase == "fwd" for c in copies)  # kept for backward: no second copy
    assert len(_names(plan, "all_reduce")) == len(_names(plan, "rs_copy:"))
    assert len(_names(plan, "rs_copy_in")) == len(_names(plan, "all_reduce"))


def test_ddp_copies_each_bucket_in_before_its_all_reduce():
    _, plan = _plan("ddp")
    ars = _names(plan, "all_reduce")
    assert len(_names(plan, "bucket_copy_in")) == len(ars) == plan.details["buckets"]
    for task in ars:
        cin = plan.tasks[task.deps[0]]
        assert cin.name.startswith("bucket_copy_in") and cin.bytes == pytest.approx(2 * task.comm_bytes)


@pytest.mark.parametrize("sharding,regathered", [("full", True), ("grad_op", False)])
def test_root_given_reshard_after_forward_is_gathered_again_for_backward(sharding, regathered):
    """fully_shard(root, reshard_after_forward=True) given explicitly reshards the root too
    (FSDP2 keeps it only for the default None); grad_op keeps every unit either way."""
    from simdl.memory.timeline import build_timeline

    t = load_workload("resnet18", "cifar10")
    w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    kept, resharded = (
        build_plan(w, allocate("cpu-local", 2), StrategyConfig("fsdp", sharding=sharding, reshard_root=r))
        for r in (False, True)
    )
    assert "all_gather:bwd:root" not in {x.name for x in kept.tasks}
    assert ("all_gather:bwd:root" in {x.name for x in resharded.tasks}) == regathered
    assert resharded.details["reshard_root"] == regathered
    # Memory: the root's unsharded parameters are freed after forward as well as after
    # backward, and gathered again in between.
    tk, tr = build_timeline(w, kept), build_timeline(w, resharded)
    assert list(tk.labels).count("reshard root") == 1
    assert list(tr.labels).count("reshard root") == (2 if regathered else 1)
    assert list(tr.labels).count("unsharded root") == (2 if regathered else 1)


@pytest.mark.parametrize("sharding", ["full", "grad_op", "none"])
def test_fsdp2_collectives_block_the_training_thread_on_cpu(sharding):
    """gloo on CPU: FSDP2's synchronous collectives wait on the host (c10d work.wait()), so
    no unit is prefetched and each unit's backward waits for the previous reduction; on a
    GPU preset the all-gathers and reductions stay on their own streams."""
    from simdl.analytic.costs import CommCosts, device_rates, row_times
    from simdl.analytic.schedule import schedule, stream_busy, task_durations

    def overlap(cluster_name):
        t = load_workload("resnet18", "cifar10")
        w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
        cluster = allocate(cluster_name, 2)
        plan = build_plan(w, cluster, StrategyConfig(name="fsdp", sharding=sharding))
        rates = device_rates(cluster, "fp32")
        d = task_durations(plan, row_times(t, 8, rates), rates, CommCosts(cluster))
        compute, comm, any_busy = stream_busy(plan, schedule(plan, d))
        return plan, compute + comm - any_busy

    plan, concurrent = overlap("cpu-local")
    assert plan.details["blocking_collectives"]
    assert concurrent == pytest.approx(0.0, abs=1e-12)
    # every gradient reduction holds up the training thread: a compute task waits on it
    reductions = [i for i, t in enumerate(plan.tasks) if t.collective and t.stream == "comm_reduce"]
    waited = {d for t in plan.tasks if t.stream == "compute" for d in t.deps}
    assert reductions and all(i in waited for i in reductions)
    gpu_plan, gpu_concurrent = overlap("a100-80gb-nvlink")
    assert not gpu_plan.details["blocking_collectives"] and gpu_concurrent > 0
