"""DDP and FSDP framework costs on GPU ranks (simdl.costs.gpu_framework)."""

from __future__ import annotations

import pytest
from simdl.analytic.costs import compute_task_time, device_rates, row_times, spmd_or_ps_rates

from simdl import predict
from simdl.cluster import allocate
from simdl.costs.gpu_framework import copy_kernels_time, framework_host_rows
from simdl.costs.gpu_rows import DEVICE_FLOOR_S
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload


def _plan(model, strategy, gpus=4, cluster="a100-80gb-nvlink", **config):
    wl = Workload(load_workload(model, dataset="cifar10"))
    alloc = allocate(cluster, gpus)
    plan = build_plan(wl, alloc, StrategyConfig(strategy, **config))
    return wl, alloc, plan


def _host_s(wl, alloc, plan) -> float:
    rates = spmd_or_ps_rates(device_rates(alloc, wl.precision), plan, wl.table)
    return sum(map(sum, rates.framework_host))


def test_copy_kernels_pay_the_device_floor_and_stream_at_the_gpus_bandwidth():
    profile = allocate("a100-80gb-nvlink", 1).spec.gpu.kernels
    assert copy_kernels_time(profile, 0.0, 10) == pytest.approx(10 * DEVICE_FLOOR_S)
    rate = profile.memory_bandwidth * profile.param("elementwise").memory_efficiency
    big = copy_kernels_time(profile, 1e10, 1)
    assert big == pytest.approx(1e10 / rate, rel=1e-3)
    assert 1e10 / profile.memory_bandwidth < big  # never faster than the datasheet bandwidth


def test_ddp_framework_host_time_lands_in_the_step_split_as_host():
    r = predict("efficientnet_v2_l", "ddp", 4)
    split = r.step_split_s
    assert split["host"] > 1e-3
    assert split["host_bound"] > 0.0
    assert sum(split.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)
    # One GPU: no reducer traffic, so no bucket work to price.
    assert predict("efficientnet_v2_l", "ddp", 1).step_split_s["host"] == 0.0


def test_bucket_copies_are_one_kernel_per_parameter_and_the_view_drops_only_the_copy_out():
    """reducer.cpp: mark_variable_ready_dense writes every gradient into its bucket (also under
    the view, zero_grad(set_to_none=True) leaving a fresh gradient each step);
    finalize_bucket_dense copies each one back (copy_bucket_to_grad) unless the view is on."""
    wl, alloc, copied = _plan("resnet50", "ddp")
    _, _, viewed = _plan("resnet50", "ddp", gradient_as_bucket_view=True)
    n_params = len(wl.table.params)
    grad_bytes = sum(4.0 * p.numel for p in wl.table.params)

    def tasks(plan, head):
        return [t for t in plan.tasks if t.name.partition(":")[0] == head]

    for plan in (copied, viewed):
        cin = tasks(plan, "bucket_copy_in")
        assert len(cin) == plan.details["buckets"] > 1
        assert sum(t.kernels for t in cin) == n_params
        assert sum(t.bytes for t in cin) == pytest.approx(2 * grad_bytes)
    (out_copied,), (out_viewed,) = tasks(copied, "bucket_copy_out"), tasks(viewed, "bucket_copy_out")
    assert out_copied.kernels == n_params and out_copied.bytes == pytest.approx(2 * grad_bytes)
    assert out_viewed.kernels == 0 and out_viewed.bytes == 0.0

    rates = device_rates(alloc, wl.precision)
    rows = row_times(wl.table, wl.batch_size, rates)

    def copies(plan):
        return sum(compute_task_time(t, rows, rates) for t in plan.tasks if t.name.startswith("bucket_copy"))

    # The view saves exactly the copy-out kernels, each at the device floor plus its bytes.
    saved = copy_kernels_time(alloc.spec.gpu.kernels, 2 * grad_bytes, n_params)
    assert copies(copied) - copies(viewed) == pytest.approx(saved, rel=1e-9)
    assert saved > n_params * DEVICE_FLOOR_S
    # Host: the copy-out's C++ ops become light calls (the view's pointer swap).
    assert _host_s(wl, alloc, viewed) < _host_s(wl, alloc, copied)


def test_fsdp_host_time_grows_with_the_number_of_units():
    wl, alloc, per_block = _plan("efficientnet_v2_l", "fsdp")
    _, _, one_unit = _plan("efficientnet_v2_l", "fsdp", wrap="none")
    units = per_block.details["units"]
    assert units > 50
    many, one = _host_s(wl, alloc, per_block), _host_s(wl, alloc, one_unit)
    # Per-parameter work (sharded-gradient views, DTensors) is the same for both wraps; the
    # rest is per unit: at least two Python ops (one collective launch each way) per extra unit.
    py = alloc.spec.gpu.kernels.param("elementwise").floor_s
    assert many - one > 2 * py * (units - 1)
    # and FSDP's difference from DDP grows with it
    ddp = predict("efficientnet_v2_l", "ddp", 4).iteration_time_s
    assert (
        predict("efficientnet_v2_l", "fsdp", 4).iteration_time_s - ddp
        > predict("efficientnet_v2_l", "fsdp", 4, wrap="none").iteration_time_s - ddp
    )


def test_framework_host_time_is_charged_before_the_rows_it_delays():
    wl, alloc, plan = _plan("resnet18", "fsdp")
    fwd, bwd = framework_host_rows(plan, wl.table, alloc.spec.gpu.kernels)
    assert len(fwd) == len(bwd) == wl.table.n_rows
    assert fwd[0] > 0.0  # the root's pre-forward all-gather precedes the first row
    assert all(x >= 0.0 for x in fwd + bwd)


def test_cpu_ranks_have_no_gpu_framework_host_stream():
    wl, alloc, plan = _plan("resnet18", "ddp", gpus=2, cluster="cpu-local")
    rates = spmd_or_ps_rates(device_rates(alloc, wl.precision), plan, wl.table)
    assert rates.framework_host == ()
