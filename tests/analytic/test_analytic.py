"""The analytic engine on cases whose answer is known independently of the engine."""

import math
from pathlib import Path

import pytest
from simdl.analytic.costs import device_rates, memory_bound_time, row_times

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.collectives import bus_bytes_factor
from simdl.strategies import StrategyConfig, build_plan
from simdl.strategies.fsdp_units import fsdp_units
from simdl.strategies.optimizer_step import PASSES
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def _setup(model="resnet18", gpus=4, cluster="a100-80gb-nvlink", **kw):
    table = load_workload(model, dataset="cifar10")
    wl = Workload(table=table, batch_size=kw.pop("batch_size", 32))
    alloc = allocate(load_cluster(cluster), gpus)
    return table, wl, alloc


def test_single_gpu_ddp_is_forward_plus_backward_plus_optimizer():
    table, wl, alloc = _setup(gpus=1)
    r = simdl.predict(model="resnet18", strategy="ddp", gpus=1)
    rates = device_rates(alloc, "fp32")
    rows = row_times(table, 32, rates)
    n = table.n_rows
    opt_kernels = 3 * math.ceil(len(table.params) / 48)  # momentum: 3 foreach calls
    expected = (
        rows.segment(0, n, "fwd")
        + rows.segment(0, n, "bwd")
        + memory_bound_time(PASSES["momentum"] * table.param_bytes, opt_kernels, rates)
    )
    assert r.iteration_time_s == pytest.approx(expected, rel=1e-12)
    assert r.comm_bytes_per_iteration == 0 and r.exposed_comm_time_s == 0


@pytest.mark.parametrize("gpus", [2, 4])
def test_ddp_sends_two_n_minus_one_over_n_of_the_gradients(gpus):
    table, wl, alloc = _setup(gpus=gpus)
    r = simdl.predict(model="resnet18", strategy="ddp", gpus=gpus)
    grads = table.param_bytes
    buffers = bus_bytes_factor("broadcast", gpus) * table.buffer_bytes
    assert r.comm_bytes_per_iteration == pytest.approx(2 * (gpus - 1) / gpus * grads + buffers)


def test_fsdp_full_moves_one_and_a_half_times_ddp_minus_the_root():
    """ZeRO-3 moves 3x the parameters ((n-1)/n each: all-gather fwd, all-gather bwd,
    reduce-scatter) vs DDP's 2x (Rajbhandari et al., ZeRO, SC'20, section 7.2.2). FSDP
    does not gather the root unit again in backward (it is not resharded)."""
    gpus = 4
    table, wl, alloc = _setup(gpus=gpus)
    units = fsdp_units(table, "block")
    root = units.units[0].numel * 4
    r = simdl.predict(model="resnet18", strategy="fsdp", gpus=gpus, sharding="full")
    f = (gpus - 1) / gpus
    assert r.comm_bytes_per_iteration == pytest.approx(f * (3 * table.param_bytes - root))
    go = simdl.predict(model="resnet18", strategy="fsdp", gpus=gpus, sharding="grad_op")
    assert go.comm_bytes_per_iteration == pytest.approx(f * 2 * table.param_bytes)


# FSDP memory against N and hybrid between full and none: tests/memory/test_timeline.py.


def test_more_bandwidth_never_slows_ddp():
    slow = simdl.predict(model="vgg16", strategy="ddp", gpus=4, cluster="a100-80gb-pcie")
    fast = simdl.predict(model="vgg16", strategy="ddp", gpus=4, cluster="a100-80gb-nvlink")
    assert fast.iteration_time_s <= slow.iteration_time_s
    assert fast.comm_time_s < slow.comm_time_s


def test_ps_sync_has_no_staleness_and_async_at_most_n_minus_one():
    kw = dict(model="resnet50", gpus=4, cluster="a10g-ps", dataset="mnist")
    sync = simdl.predict(strategy="ps-sync", **kw)
    asyn = simdl.predict(strategy="ps-async", **kw)
    assert sync.staleness.mean == 0 and sync.staleness.max == 0
    # Each other worker applies one update per cycle; the ones queued at the server's lock
    # when a pull arrives are in the snapshot it reads, so they do not count.
    assert 0 < asyn.staleness.mean < 3
    # Without a barrier and an incast of all pushes at once, async iterates no slower.
    assert asyn.iteration_time_s <= sync.iteration_time_s


def test_async_staleness_queueing():
    from simdl.costs.ps import async_staleness

    # A server that takes no time, or workers that never meet at it: N - 1.
    assert async_staleness(4, 1.0, 0.0, 0.0) == 3
    assert async_staleness(4, 1e9, 1.0, 0.0) == pytest.approx(3, abs=1e-6)
    # Two workers: the other one is at the server a fraction D / (Z + D) of the time
    # (mean value analysis with one customer), and skipped when it is updating there.
    assert async_staleness(2, 3.0, 1.0, 0.0) == pytest.approx(1 - 1 / 4)
    assert async_staleness(2, 3.0, 0.5, 0.5) == pytest.approx(1 - 0.25 * 0.5)
    # Snapshots hold the lock too but change no version: only updates are skipped.
    assert async_staleness(4, 1.0, 0.0, 0.5) == 3
    # The busier the server, the more updates a pull finds queued.
    s = [async_staleness(4, 1.0, a, 0.1) for a in (0.01, 0.1, 0.5, 2.0)]
    assert all(x > y for x, y in zip(s, s[1:])) and s[-1] > 0


def test_epoch_is_iterations_times_step():
    r = simdl.predict(model="resnet18", strategy="ddp", gpus=4, batch_size=64, epochs=3)
    assert r.iterations_per_epoch == math.ceil(50_000 / (64 * 4))
    assert r.epoch_time_s == pytest.approx(r.iterations_per_epoch * r.iteration_time_s)
    assert r.total_time_s == pytest.approx(3 * r.epoch_time_s)
    assert r.throughput_samples_per_s == pytest.approx(64 * 4 / r.iteration_time_s)


def test_memory_grows_with_batch_and_optimizer_state():
    small = simdl.predict(model="resnet50", strategy="ddp", gpus=2, batch_size=16)
    big = simdl.predict(model="resnet50", strategy="ddp", gpus=2, batch_size=128)
    assert big.memory_breakdown_bytes["activations"] > 4 * small.memory_breakdown_bytes["activations"]
    sgd = simdl.predict(model="resnet50", strategy="ddp", gpus=2, optimizer="sgd")
    adam = simdl.predict(model="resnet50", strategy="ddp", gpus=2, optimizer="adam")
    table = load_workload("resnet50", dataset="cifar10")
    assert sgd.memory_breakdown_bytes["optimizer"] == 0
    # Adam's state is 2 parameter copies; when the peak falls in the step, foreach Adam's
    # sqrt scratch adds a third (simdl.memory.timeline).
    assert 2 * table.param_bytes <= adam.memory_breakdown_bytes["optimizer"] <= 3.01 * table.param_bytes


def test_a_model_too_big_for_a_gpu_does_not_fit():
    r = simdl.predict(
        model="convnext_large",
        strategy="ddp",
        gpus=2,
        cluster="a10g-ps",
        dataset="imagenet",
        batch_size=256,
        optimizer="adam",
    )
    assert not r.fits_in_memory


def test_all_strategies_give_finite_positive_answers():
    cases = [
        ("ddp", {}),
        ("fsdp", {"sharding": "full"}),
        ("fsdp", {"sharding": "grad_op"}),
        ("fsdp", {"sharding": "hybrid"}),
        ("fsdp", {"sharding": "none"}),
    ]
    for model in ("mnist_cnn", "efficientnet_v2_s", "densenet121", "vit_b_32", "mobilenet_v3_large"):
        for strategy, kw in cases:
            r = simdl.predict(model=model, strategy=strategy, gpus=8, cluster="a100-40gb-2node", **kw)
            assert 0 < r.iteration_time_s < math.inf
            assert 0 < r.peak_memory_bytes < math.inf
            assert 0 <= r.gpu_utilization <= 1
    for strategy in ("ps-sync", "ps-async", "ps-ssp"):
        r = simdl.predict(model="densenet121", strategy=strategy, gpus=4, cluster="a10g-ps", dataset="mnist")
        assert 0 < r.iteration_time_s < math.inf


def test_gradient_accumulation_reduces_once_per_step():
    """DDP no_sync / FSDP2 set_requires_gradient_sync(False): reductions only on the last
    micro-step; FSDP still gathers parameters on every micro-step."""
    gpus = 4
    table = load_workload("resnet18", dataset="cifar10")
    root = fsdp_units(table, "block").units[0].numel * 4
    f = (gpus - 1) / gpus
    P = table.param_bytes
    ddp = simdl.predict(model="resnet18", strategy="ddp", gpus=gpus, grad_accumulation=3)
    buffers = 3 * table.buffer_bytes  # DDP still broadcasts buffers every forward
    assert ddp.comm_bytes_per_iteration == pytest.approx(2 * f * P + buffers)
    full = simdl.predict(model="resnet18", strategy="fsdp", gpus=gpus, grad_accumulation=3)
    assert full.comm_bytes_per_iteration == pytest.approx(f * (3 * (2 * P - root) + P))
    one = simdl.predict(model="resnet18", strategy="ddp", gpus=gpus)
    assert ddp.throughput_samples_per_s > one.throughput_samples_per_s  # fewer reductions per sample


def test_gloo_reduce_scatter_sends_an_all_reduce():
    # gloo runs FSDP's reduce-scatter as an all-reduce of the full buffer
    # (simdl.collectives.backends): 2(n-1)/n of it on the wire, NCCL (n-1)/n. FSDP full at
    # 2 ranks: forward and backward all-gathers (1/2 each) plus the reduce-scatter.
    kw = dict(model="resnet18", strategy="fsdp", sharding="full", gpus=2, dataset="cifar10")
    gloo = simdl.predict(cluster="cpu-local", **kw)
    nccl = simdl.predict(cluster="a100-80gb-nvlink", **kw)
    assert gloo.comm_bytes_per_iteration == pytest.approx(nccl.comm_bytes_per_iteration * 4 / 3, rel=1e-3)
    ddp = dict(kw, strategy="ddp")
    ddp.pop("sharding")
    assert simdl.predict(cluster="cpu-local", **ddp).comm_bytes_per_iteration == pytest.approx(
        simdl.predict(cluster="a100-80gb-nvlink", **ddp).comm_bytes_per_iteration
    )


def test_a_calibrated_ps_transport_prices_its_link_faults_and_copy():
    # simdl calibrate's RPC measurements give the worker side of a PS transfer its own
    # bandwidth, the fresh receive buffers' page faults and the server's copy of a pull's
    # answer; the received gradients' faults then leave the server's update time.
    import dataclasses

    from simdl.costs.ps import ps_transfer_times, ps_update_time
    from simdl.provenance import Sourced

    base = load_cluster(lab("cpu-local-x4"))
    link, phi, kappa = (Sourced(v, "calibrated", "test") for v in (1.0e9, 0.2e-9, 0.1e-9))
    plain = dataclasses.replace(
        base, ps_servers=dataclasses.replace(base.ps_servers, worker_link=link, receive_fault=None, response_copy=None)
    )
    full = dataclasses.replace(
        plain, ps_servers=dataclasses.replace(plain.ps_servers, receive_fault=phi, response_copy=kappa)
    )
    wl = Workload(table=load_workload("vgg16", dataset="mnist"), batch_size=32)
    c_plain, c_full = allocate(plain, 4), allocate(full, 4)
    plan = build_plan(wl, c_plain, StrategyConfig(name="ps-sync"))
    lat, server = base.ps_servers.latency.value, base.ps_servers.nic_bandwidth.value
    m = plan.push_bytes
    push1, pull1 = ps_transfer_times(c_plain, plan, 1)
    assert push1 == pull1 == pytest.approx(lat + max(m / link.value, m / server))
    push4, _ = ps_transfer_times(c_plain, plan, 4)
    assert push4 == pytest.approx(lat + max(4 * m / server, m / link.value))
    # VGG16's classifier weights (411 and 67 MB) are above the 32 MiB mmap threshold.
    fresh = sum(b for b in plan.details["param_tensor_bytes"] if b > 32 * 2**20)
    assert fresh > 0.8 * m
    fpush1, fpull1 = ps_transfer_times(c_full, plan, 1)
    assert fpush1 - push1 == pytest.approx(fresh * phi.value)
    assert fpull1 - pull1 == pytest.approx(2 * fresh * phi.value + m * kappa.value)
    assert ps_update_time(c_full, plan, 4) < ps_update_time(c_plain, plan, 4)


def test_ssp_bound_zero_is_a_barrier_per_step():
    """A bound of 0 holds every pull until all workers pushed the step: the pushes of N
    together, the server applies the N gradients one by one, then the N pulls go out together.
    A larger bound runs as async for identical workers."""
    from simdl.costs.ps import ps_transfer_times, ps_update_time

    kw = dict(model="resnet50", gpus=4, cluster="a10g-ps", dataset="mnist", batch_size=32)
    asyn = simdl.predict(strategy="ps-async", **kw)
    s2 = simdl.predict(strategy="ps-ssp", staleness_bound=2, **kw)
    s0 = simdl.predict(strategy="ps-ssp", staleness_bound=0, **kw)
    assert s2.iteration_time_s == asyn.iteration_time_s and s2.staleness.mean == asyn.staleness.mean
    assert s0.staleness.mean == 1.5 and s0.staleness.max == 3.0  # (N - 1) / 2 of N = 4
    cluster = allocate(load_cluster("a10g-ps"), 4)
    plan = build_plan(
        Workload(table=load_workload("resnet50", dataset="mnist"), batch_size=32),
        cluster,
        StrategyConfig(name="ps-ssp", staleness_bound=0),
    )
    push, pull = ps_transfer_times(cluster, plan, 4)
    expected = s0.compute_time_s + push + 4 * ps_update_time(cluster, plan, 1) + pull
    assert s0.iteration_time_s == pytest.approx(expected, rel=1e-9)
    assert s0.iteration_time_s > asyn.iteration_time_s
