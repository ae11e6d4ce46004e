"""DeepSpeed ZeRO's host time per parameter and per module call (strategies.zero): priced in
the plan as host time, visible in the step split, zero where the section is absent."""

import dataclasses

import pytest

from simdl.cluster import load_cluster
from simdl.predict import predict
from simdl.provenance import Sourced

P_S, M_S, L_S = 5e-4, 3e-3, 2e-4


def _spec(param_s=None, module_s=None, loop_s=None):
    spec = load_cluster("cpu-local")

    def src(v):
        return Sourced(v, "assumed", "test") if v is not None else None

    return dataclasses.replace(
        spec,
        strategies=spec.strategies.with_zero(
            param_overhead=src(param_s), module_overhead=src(module_s), loop_overhead=src(loop_s)
        ),
    )


def _predict(spec, strategy, **kw):
    return predict(
        model="resnet18",
        strategy=strategy,
        gpus=2,
        cluster=spec,
        dataset="cifar10",
        batch_size=16,
        optimizer="adam",
        loader_workers=0,
        reduce_bucket_size=50_000_000,
        **kw,
    )


@pytest.mark.parametrize("strategy", ["zero0", "zero1", "zero2", "zero3"])
def test_host_time_is_per_parameter_in_stages_1_to_3_and_per_module_call_in_stage_3(strategy):
    from simdl.workload.library import load_workload

    table = load_workload("resnet18", "cifar10")
    none = _predict(_spec(), strategy)
    priced = _predict(_spec(P_S, M_S, L_S), strategy)
    stage = int(strategy[-1])
    expected = (len(table.params) * P_S if stage >= 1 else 0.0) + (table.n_rows * M_S if stage == 3 else 0.0)
    expected += len(table.params) * L_S if stage == 1 else 0.0  # stage 1's extra pass
    assert none.step_split_s["host"] == 0.0
    assert priced.step_split_s["host"] == pytest.approx(expected, rel=1e-9)
    assert priced.iteration_time_s >= none.iteration_time_s + expected * 0.99
    assert priced.peak_tensor_bytes == none.peak_tensor_bytes  # host time allocates nothing


def test_hooks_run_every_micro_step_and_stage_1_loops_once_per_optimizer_step():
    from simdl.workload.library import load_workload

    table = load_workload("resnet18", "cifar10")
    spec = _spec(P_S, M_S, L_S)
    z3 = _predict(spec, "zero3", grad_accumulation=2)
    assert z3.step_split_s["host"] == pytest.approx(2 * (len(table.params) * P_S + table.n_rows * M_S))
    z1 = _predict(spec, "zero1", grad_accumulation=2)
    assert z1.step_split_s["host"] == pytest.approx(len(table.params) * (P_S + L_S))  # reduce_gradients at the boundary


def test_stage_1s_extra_pass_is_priced_only_where_its_hooks_do_not_reduce():
    from simdl.workload.library import load_workload

    n = len(load_workload("resnet18", "cifar10").params)
    spec = _spec(P_S, None, L_S)
    assert _predict(spec, "zero1").step_split_s["host"] == pytest.approx(n * (P_S + L_S))
    # overlap_comm: stage 1's hooks reduce (process_gradients), as stage 2's do, and no loop follows
    assert _predict(spec, "zero1", overlap_comm=True).step_split_s["host"] == pytest.approx(n * P_S)
    assert _predict(spec, "zero2").step_split_s["host"] == pytest.approx(n * P_S)


def test_shipped_cpu_profile_prices_zero_and_gpu_presets_do_not():
    cpu = load_cluster("cpu-local").strategies.zero
    assert cpu.param_overhead is not None and cpu.module_overhead is not None
    assert cpu.param_overhead.kind == "calibrated" and "deepspeed-cpu-zero" in cpu.param_overhead.source
    gpu = load_cluster("a100-80gb-pcie").strategies.zero
    assert gpu.param_overhead is None and gpu.module_overhead is None


def test_zero_section_round_trips_and_rejects_negative_values(tmp_path):
    import yaml

    from simdl.cluster.spec import CLUSTER_DIR, raw_preset
    from simdl.errors import SimdlError

    raw = raw_preset(CLUSTER_DIR / "cpu-local.yaml")
    raw.pop("compute_profile", None)
    raw.setdefault("strategies", {})["zero"] = {
        "param_overhead_us": {"value": 250, "kind": "assumed", "source": "test"},
        "module_overhead_us": {"value": 1500, "kind": "assumed", "source": "test"},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = load_cluster(str(path))
    assert spec.strategies.zero.param_overhead.value == pytest.approx(2.5e-4)
    assert spec.strategies.zero.module_overhead.value == pytest.approx(1.5e-3)
    assert spec.strategies.to_dict()["zero"] == raw["strategies"]["zero"]
    raw["strategies"]["zero"]["param_overhead_us"]["value"] = -1
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="param_overhead_us"):
        load_cluster(str(path))
