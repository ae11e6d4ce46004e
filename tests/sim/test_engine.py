"""The simulator against the analytic engine and hand-checkable limits."""

import json

import pytest
from simdl.analytic.costs import CommCosts, device_rates, row_times
from simdl.analytic.schedule import task_durations

from simdl.predict import predict
from simdl.strategies.plan import COMPUTE
from simdl.workload.zoo import MODELS

# Where nothing contends the two engines must agree. The analytic model assumes
# no link is shared between collectives, so SPMD plans are compared with contention=False
# (flows of one collective still share among themselves); its PS closed form includes the
# N-worker incast, so ps-sync is compared with contention on.
TOLERANCE = 0.02
GRID = [
    ("ddp", {}, False),
    ("fsdp", {"sharding": "full"}, False),
    ("fsdp", {"sharding": "grad_op"}, False),
    ("fsdp", {"sharding": "none"}, False),
    ("ps-sync", {"cluster": "a10g-ps"}, True),
]


@pytest.mark.parametrize("model", list(MODELS))
def test_sim_agrees_with_analytic_without_contention(model):
    for strategy, kw, contention in GRID:
        a = predict(model, strategy, 4, **kw)
        s = predict(model, strategy, 4, engine="sim", contention=contention, **kw)
        err = s.iteration_time_s / a.iteration_time_s - 1
        assert abs(err) < TOLERANCE, (
            f"{model} {strategy} {kw}: sim {s.iteration_time_s} analytic {a.iteration_time_s} ({err:+.2%})"
        )
        assert s.engine == "sim"
        assert s.iterations_per_epoch == a.iterations_per_epoch
        assert s.compute_time_s == pytest.approx(a.compute_time_s, rel=TOLERANCE)


@pytest.mark.parametrize("model", ["resnet50", "vgg16", "vit_b_16"])
def test_ddp_memory_peak_matches_the_memory_model(model):
    a = predict(model, "ddp", 4)
    s = predict(model, "ddp", 4, engine="sim")
    assert s.peak_tensor_bytes == pytest.approx(a.peak_tensor_bytes, rel=1e-6)
    assert s.memory_breakdown_bytes == pytest.approx(a.memory_breakdown_bytes, rel=1e-6)


def test_ddp_with_free_communication_equals_pure_compute():
    from simdl.cluster import allocate
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    s = predict("resnet50", "ddp", 4, engine="sim", free_comm=True, loader_workers=64)
    wl = Workload(load_workload("resnet50", dataset="cifar10"))
    cluster = allocate("a100-80gb-nvlink", 4)
    plan = build_plan(wl, cluster, StrategyConfig("ddp"))
    from simdl.analytic.costs import spmd_or_ps_rates

    rates = spmd_or_ps_rates(device_rates(cluster, wl.precision), plan, wl.table)
    d = task_durations(plan, row_times(wl.table, wl.batch_size, rates), rates, CommCosts(cluster))
    compute = sum(x for x, t in zip(d, plan.tasks) if t.stream == COMPUTE)
    assert s.iteration_time_s == pytest.approx(compute, rel=1e-9)
    assert s.gpu_utilization == pytest.approx(1.0)
    assert s.exposed_comm_time_s == pytest.approx(0.0, abs=1e-12)


def test_fsdp_contention_only_slows_down():
    a = predict("vit_b_32", "fsdp", 4)
    s = predict("vit_b_32", "fsdp", 4, engine="sim")
    # The backward all-gathers overlap the reduce-scatters on the same NVLink links.
    assert s.iteration_time_s > a.iteration_time_s


def test_same_seed_same_result_bit_for_bit():
    kw = dict(engine="sim", jitter="lognormal:0.2", straggler="rank=1,factor=1.3", seed=7)
    r1 = predict("resnet18", "ddp", 4, **kw).to_json()
    r2 = predict("resnet18", "ddp", 4, **kw).to_json()
    r3 = predict("resnet18", "ddp", 4, **{**kw, "seed": 8}).to_json()
    assert r1 == r2
    assert r1 != r3


def test_straggler_slows_a_synchronous_step():
    base = predict("resnet50", "ddp", 4, engine="sim")
    slow = predict("resnet50", "ddp", 4, engine="sim", straggler="rank=2,factor=1.5")
    # The all-reduces wait for rank 2: the step grows by about half the compute time.
    assert slow.iteration_time_s > base.iteration_time_s + 0.4 * base.compute_time_s
    assert any("straggler" in n for n in slow.notes)


def test_input_pipeline_bound_matches_analytic():
    kw = dict(loader_workers=1, batch_size=256)
    a = predict("mnist_cnn", "ddp", 4, **kw)
    s = predict("mnist_cnn", "ddp", 4, engine="sim", **kw)
    assert any("input pipeline" in n for n in a.notes)
    assert s.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-6)
    assert any("input pipeline" in n for n in s.notes)


def test_result_json_and_run_extras():
    run = predict("resnet18", "fsdp", 4, engine="sim", return_run=True)
    d = json.loads(run.result.to_json())
    assert d["engine"] == "sim"
    assert run.busiest_links(3) and all(0 < u <= 1.0 for _, u, _ in run.busiest_links(3))
    assert set(run.peak_memory_by_rank) == {0, 1, 2, 3}
    assert run.result.comm_bytes_per_iteration > 0


def test_multi_node_hybrid_close_to_analytic():
    # With contention on, the 'inter' groups share the node NIC as the analytic formula says;
    # what remains is all-gather / reduce-scatter overlap (a few percent).
    a = predict("resnet50", "fsdp", 16, cluster="dgx-a100", sharding="hybrid")
    s = predict("resnet50", "fsdp", 16, cluster="dgx-a100", sharding="hybrid", engine="sim")
    assert abs(s.iteration_time_s / a.iteration_time_s - 1) < 0.05


def test_bad_options_are_one_line_errors():
    from simdl.errors import SimdlError

    with pytest.raises(SimdlError, match="unknown simulator option"):
        predict("resnet18", "ddp", 2, engine="sim", bogus=1)
    with pytest.raises(SimdlError, match="--warmup"):
        predict("resnet18", "ddp", 2, engine="sim", iterations=2, warmup=2)


@pytest.mark.parametrize("strategy,cluster", [("ddp", "cpu-local"), ("fsdp", "cpu-local"), ("ps-async", "a10g-ps")])
def test_both_engines_report_the_bytes_a_gpu_sends(strategy, cluster):
    """Payload x bus factor (PS: the pushed gradients), whatever the links carried: the
    simulator scales a call's bytes to keep its calibrated time (simdl.sim.collectives)."""
    a = predict("resnet18", strategy, 2, cluster=cluster)
    s = predict("resnet18", strategy, 2, cluster=cluster, engine="sim")
    assert s.comm_bytes_per_iteration == pytest.approx(a.comm_bytes_per_iteration) and a.comm_bytes_per_iteration > 0


def test_the_simulator_does_not_import_the_analytic_engine():
    """Both engines share simdl.costs; the simulator reaches no closed form through the analytic engine."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # this checkout's simdl, not an installed one
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = (
        "import sys, simdl; simdl.predict('resnet18', 'ps-async', 4, cluster='a10g-ps', engine='sim'); "
        "simdl.predict('resnet18', 'fsdp', 2, engine='sim'); "
        "print('simdl.analytic.engine' in sys.modules, 'simdl.costs.ps' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["False", "True"]
