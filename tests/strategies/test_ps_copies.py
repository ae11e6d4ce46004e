"""The copies a parameter server makes around its pushes and pulls (validate/train.py):
the worker loads the pulled parameters into its model; the server snapshots its shard for
every pull; on host-memory devices, fresh buffers above the mmap threshold fault in."""

from pathlib import Path

import pytest

from simdl.cluster import allocate
from simdl.costs.ps import ps_update_time
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload import workload as wl
from simdl.workload.library import load_workload

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def _plan(model, strategy="ps-sync", cluster="cpu-local", gpus=2):
    t = load_workload(model, "mnist")
    w = wl.Workload(table=t, batch_size=32, train_samples=100, epochs=1, optimizer="momentum", precision="fp32")
    alloc = allocate(cluster, gpus)
    return w, alloc, build_plan(w, alloc, StrategyConfig(name=strategy))


def test_worker_loads_the_pulled_parameters_first():
    w, _, plan = _plan("resnet50")
    load = plan.worker_tasks[0]
    assert load.name == "load_params" and load.bytes == 2 * w.param_bytes
    assert load.kernels == len(w.table.params) and sum(load.allocs) == w.param_bytes
    assert [t.name for t in plan.worker_tasks[1:]] == ["forward", "backward"]


@pytest.mark.parametrize("model,faults", [("resnet50", False), ("vgg16", True)])
def test_server_time_counts_snapshots_and_page_faults_of_large_tensors(model, faults):
    """ResNet-50's largest tensor (9.4 MB) stays under glibc's 32 MiB mmap threshold;
    VGG16's first classifier weight (411 MB) is mapped fresh at every allocation."""
    w, alloc, plan = _plan(model)
    bw = alloc.ps_update_bandwidth()
    # The mean of 2: copy the first (2 sizes), add the second (3), divide (2); 2 snapshots.
    streamed = (plan.update_bytes + 7 * plan.push_bytes + 2 * 2 * plan.pull_bytes) / bw
    t = ps_update_time(alloc, plan, 2)
    assert t == pytest.approx(streamed) if not faults else t > 1.2 * streamed


def test_sync_mean_streams_the_server_codes_passes():
    """validate/train.py's ps-sync server copies the first gradient into its sum, adds the
    other k - 1 and divides: 2 + 3 (k - 1) + 2 gradient sizes through memory, k snapshots
    served; one gradient is applied as it arrived. The sum is kept across rounds, so only
    the received buffers fault (VGG16's, on cpu-local)."""
    from simdl.costs.ps import ps_aggregate_bytes, ps_snapshot_time

    for model in ("resnet50", "vgg16"):
        _, alloc, plan = _plan(model, cluster=lab("cpu-local-x4"), gpus=4)
        assert ps_aggregate_bytes(plan, 1) == 0
        assert ps_aggregate_bytes(plan, 4) == 13 * plan.push_bytes
        bw = alloc.ps_update_bandwidth()
        one = ps_update_time(alloc, plan, 1) - ps_snapshot_time(alloc, plan)
        four = ps_update_time(alloc, plan, 4) - 4 * ps_snapshot_time(alloc, plan)
        # Three more received buffers' faults (if any) and the mean's passes.
        assert four - one == pytest.approx(3 * (one - plan.update_bytes / bw) + 13 * plan.push_bytes / bw)


def test_ps_on_a_shared_host_pays_for_the_server_with_compute():
    """cpu-local: the 4 workers and the server are processes on the same 2 cores, so the
    server's work and the transfers take CPU from the workers' compute."""
    import simdl
    from simdl.analytic import engine

    w, alloc, plan = _plan("vgg16", "ps-async", lab("cpu-local-x4"), 4)
    assert alloc.spec.shared_device and alloc.spec.host.cpu_cores.value == 2
    r = simdl.predict(
        model="vgg16",
        strategy="ps-async",
        gpus=4,
        cluster=lab("cpu-local-x4"),
        dataset="mnist",
        batch_size=32,
        train_samples=100,
        epochs=1,
        optimizer="momentum",
    )
    push1, pull1 = engine.ps_transfer_times(alloc, plan, 1)
    upd = ps_update_time(alloc, plan, 1)
    alone = r.compute_time_s + push1 + pull1 + upd
    # 4 ranks' compute at half a core each, plus each one's push, pull and server work, over 2 cores.
    shared = (4 * (r.compute_time_s / 2 + push1 + pull1) + 4 * upd) / 2
    assert shared > alone
    assert r.iteration_time_s == pytest.approx(shared, rel=1e-9)
    # Workers with devices of their own do not share cores with the server.
    _, gpu, gplan = _plan("vgg16", "ps-async", "a10g-ps", 4)
    assert engine.shared_host_bound(gpu, gplan, 1.0, 1.0, 1.0) == 0
