"""FSDP2's sharded gradients on a glibc host: freed together at zero_grad from the heap's
top, trimmed back to the OS, faulted in again next step (simdl.strategies.fsdp
asks simdl.hosts.cpu_glibc's GlibcCpuHost.refault_limit; simdl.cluster.allocator)."""

import dataclasses
from pathlib import Path

import pytest
from simdl.analytic.costs import compute_task_time, device_rates, row_times

from simdl.cluster import allocate
from simdl.cluster.allocator import GLIBC_MMAP_THRESHOLD_MAX, mmap_threshold, trim_threshold
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload import workload as wl
from simdl.workload.library import load_workload

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


MiB = 1024 * 1024


def _plan(cluster, model="vit_b_32", sharding="none", gpus=2):
    t = load_workload(model, "cifar10")
    w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    c = allocate(cluster, gpus)
    return w, c, build_plan(w, c, StrategyConfig(name="fsdp", sharding=sharding))


def test_thresholds_follow_glibcs_dynamic_adjustment_and_are_absent_on_gpus():
    cpu = allocate(lab("cpu-epyc-milan"), 2)
    assert mmap_threshold(cpu) == GLIBC_MMAP_THRESHOLD_MAX == 32 * MiB
    assert trim_threshold(cpu) == 64 * MiB  # malloc.c: trim_threshold = 2 * mmap_threshold
    assert mmap_threshold(allocate("a100-80gb-nvlink", 2)) is None
    assert trim_threshold(allocate("a100-80gb-nvlink", 2)) is None


@pytest.mark.parametrize("sharding,shard", [("none", 1), ("full", 2), ("grad_op", 2)])
def test_each_sub_threshold_reduce_output_refaults_once_per_step(sharding, shard):
    _, _, plan = _plan(lab("cpu-epyc-milan"), sharding=sharding)
    cins = [t for t in plan.tasks if t.name.startswith("rs_copy_in")]
    assert cins
    for t in cins:
        out = t.allocs[1]  # the reduce output: the unit's gradient shard, kept to zero_grad
        assert out == pytest.approx(t.allocs[0] / shard)
        assert t.refaults == (out if out <= 32 * MiB else 0.0)  # larger ones count as mapped
    # ViT-B/32's encoder blocks: 7.1 M parameters, 28 MB of fp32 gradients per unit
    assert max(t.refaults for t in cins) == pytest.approx(7087872 * 4 / shard, rel=1e-3)
    # nothing else in the plan refaults
    assert all(t.refaults == 0 for t in plan.tasks if not t.name.startswith("rs_copy_in"))


def test_gradients_below_the_trim_threshold_in_total_are_kept_by_the_heap():
    # mnist_cnn's gradients total well under 64 MiB: a heap top that small is never trimmed
    w, _, plan = _plan(lab("cpu-epyc-milan"), model="mnist_cnn")
    assert w.param_bytes < 64 * MiB
    assert all(t.refaults == 0 for t in plan.tasks)


def test_no_refaults_where_memory_does_not_come_from_glibc():
    _, _, plan = _plan("a100-80gb-nvlink")
    assert all(t.refaults == 0 for t in plan.tasks)
    # a CPU profile without a page-fault cost prices none either
    _, c, _ = _plan(lab("cpu-epyc-milan"))
    host = dataclasses.replace(c.spec.host, page_fault_per_byte=None)
    spec = dataclasses.replace(c.spec, host=host)
    t = load_workload("vit_b_32", "cifar10")
    w = wl.Workload(table=t, batch_size=8, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    bare = build_plan(w, allocate(spec, 2), StrategyConfig(name="fsdp", sharding="none"))
    assert all(t.refaults == 0 for t in bare.tasks)


def test_a_refaulting_copy_costs_its_bytes_at_the_hosts_page_fault_rate():
    w, c, plan = _plan(lab("cpu-epyc-milan"))
    rates = device_rates(c, "fp32")
    rows = row_times(w.table, w.batch_size, rates)
    t = next(t for t in plan.tasks if t.refaults)
    without = compute_task_time(dataclasses.replace(t, refaults=0.0), rows, rates)
    added = compute_task_time(t, rows, rates) - without
    # the fault time is a copy's, so it scales with the copy factor like the copy itself
    assert added == pytest.approx(t.refaults * rates.page_fault_per_byte * rates.copy_factor)
    assert rates.page_fault_per_byte == pytest.approx(0.5967e-9)  # cpu-epyc-milan's calibration (2026-11-27)


def test_a_profile_whose_ranks_never_trim_the_heap_refaults_nothing(tmp_path):
    # Ranks run with MALLOC_TRIM_THRESHOLD_ far above any step's heap: the profile says so
    # (host.trim_threshold_MiB) and the gradients stay mapped; mapped buffers are unchanged.
    path = tmp_path / "keep.yaml"
    path.write_text(
        f"name: keep\nextends: {lab('cpu-epyc-milan')}\nhost:\n  trim_threshold_MiB:\n"
        "    value: 65536\n    kind: framework\n    source: MALLOC_TRIM_THRESHOLD_=68719476736\n"
    )
    from simdl.cluster import load_cluster

    keep = allocate(load_cluster(str(path)), 2)
    assert trim_threshold(keep) == 65536 * MiB and mmap_threshold(keep) == 32 * MiB
    _, _, plan = _plan(load_cluster(str(path)))
    _, _, base = _plan(lab("cpu-epyc-milan"))
    assert sum(t.refaults for t in base.tasks) > 0
    assert all(t.refaults == 0 for t in plan.tasks)
    assert [t.allocs for t in plan.tasks] == [t.allocs for t in base.tasks]


def test_calibration_takes_the_thresholds_from_the_ranks_environment():
    from simdl.calibrate.profile import _allocator_thresholds

    got = _allocator_thresholds({"MALLOC_TRIM_THRESHOLD_": "68719476736", "MALLOC_MMAP_THRESHOLD_": "33554432"}, "r")
    assert got["trim_threshold_MiB"]["value"] == 65536 and got["mmap_threshold_MiB"]["value"] == 32
    assert "MALLOC_TRIM_THRESHOLD_=68719476736" in got["trim_threshold_MiB"]["source"]
    assert _allocator_thresholds({}, "r") == {}


def test_a_plan_that_refaults_says_so_and_one_that_does_not_is_silent():
    _, _, plan = _plan(lab("cpu-epyc-milan"))
    note = [n for n in plan.notes if n.startswith("glibc heap trimming")]
    mb = sum(t.refaults for t in plan.tasks) / 1e6
    assert len(note) == 1 and f"{mb:.0f} MB" in note[0] and "MALLOC_TRIM_THRESHOLD_" in note[0]
    _, _, gpu = _plan("a100-80gb-nvlink")
    assert not any(n.startswith("glibc") for n in gpu.notes)
