"""DeepSpeed ZeRO stages (simdl.strategies.zero): DeepSpeed's own memory estimates, the buffers
DeepSpeed allocates, the order of its reductions, and its own ds_config.json files.

The estimate formulas are reproduced from microsoft/DeepSpeed 0.16.5 (Apache-2.0; facts of the
formula, not its code): runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs and
runtime/zero/stage3.py estimate_zero3_model_states_mem_needs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.errors import SimdlError
from simdl.memory.model import memory_options
from simdl.memory.timeline import CATEGORIES
from simdl.strategies import StrategyConfig, build_plan
from simdl.strategies.zero import ZeROOptions
from simdl.strategies.zero_config import DeepSpeedConfigWarning, read_ds_config
from simdl.strategies.zero_memory import model_state_bytes, zero_timeline
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload

DATA = Path(__file__).parent / "data" / "deepspeed"
CLUSTER = "a100-40gb-2node"


def _plan(model="vit_b_16", strategy="zero2", gpus=8, precision="fp16-amp", optimizer="adam", batch=8, **knobs):
    table = load_workload(model, dataset="imagenet")
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, precision=precision)
    alloc = allocate(load_cluster(CLUSTER), gpus, None)
    plan = build_plan(wl, alloc, StrategyConfig(name=strategy, **knobs))
    return wl, alloc, plan


def _buffers(plan) -> dict[str, float]:
    return {b.name: b.bytes for b in plan.facts.buffers if b.life != "host"}


# -- DeepSpeed's estimates (model states only) ------------------------------------------------
def ds_estimate_zero2(total_params, num_gpus_per_node=1, num_nodes=1, cpu_offload=True, additional_buffer_factor=1.5):
    """stage_1_and_2.py: offload -> gpu 2P, cpu P*max(4*gpus, 16)*factor; else gpu 2P + 18P/gpus,
    cpu 4P*gpus_per_node*factor (18 = 2 fp16 grads + 4 fp32 grads + 4 fp32 params + 8 Adam)."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        return int(total_params * max(4 * total_gpus, 16) * additional_buffer_factor), int(2 * total_params)
    return (
        int(total_params * 4 * num_gpus_per_node * additional_buffer_factor),
        int(2 * total_params + int(18 * total_params / total_gpus)),
    )


def ds_estimate_zero3_gpu(total_params, largest_layer_params, total_gpus, cpu_offload, cpu_offload_params):
    """stage3.py: largest_layer_memory = 4 * largest_layer_params (16-bit params and grads of the
    gathered layer); gpu = that (+ 2P/gpus without param offload; + 18P/gpus without any offload)."""
    largest = 4 * largest_layer_params
    if cpu_offload:
        return largest if cpu_offload_params else largest + int(2 * total_params / total_gpus)
    return largest + int(18 * total_params / total_gpus)


@pytest.mark.parametrize("gpus", [4, 8])
def test_zero2_model_states_match_deepspeeds_estimate(gpus):
    wl, _, plan = _plan(gpus=gpus)
    P = sum(p.numel for p in wl.table.params)
    _, gpu = ds_estimate_zero2(P, num_gpus_per_node=min(gpus, 4), num_nodes=max(gpus // 4, 1), cpu_offload=False)
    assert model_state_bytes(plan.facts.buffers) == pytest.approx(gpu, rel=1e-6)


def test_zero2_offload_model_states_match_deepspeeds_estimate():
    wl, _, plan = _plan(gpus=4, offload_optimizer="cpu")
    P = sum(p.numel for p in wl.table.params)
    cpu, gpu = ds_estimate_zero2(P, num_gpus_per_node=4, num_nodes=1, cpu_offload=True)
    b = _buffers(plan)
    # The estimate leaves out temp_grad_buffer_for_gpu_offload (one largest parameter, 16-bit).
    assert model_state_bytes(plan.facts.buffers) - b["offload staging buffer"] == pytest.approx(gpu, rel=1e-9)
    # Host: every rank of the node (4 ranks) keeps master, fp32 gradients and Adam state of its partition.
    assert 4 * plan.facts.host_bytes * 1.5 == pytest.approx(cpu, rel=1e-9)


def _largest_gathered_states(plan, wl, alloc) -> float:
    """Max over backward of gathered parameters plus not-yet-reduced gradients, from the timeline."""
    from simdl.memory.timeline import BWD

    tl = zero_timeline(wl, plan, memory_options(wl, plan, alloc))
    lv = tl.levels()[1:][tl.direction == BWD]
    persistent = sum(b.bytes for b in plan.facts.buffers if b.life == "model" and b.category in ("params", "grads"))
    p, g = CATEGORIES.index("params"), CATEGORIES.index("grads")
    return float((lv[:, p] + lv[:, g]).max() - persistent - wl.table.buffer_bytes)


@pytest.mark.parametrize("offload", ["none", "optimizer", "both"])
def test_zero3_model_states_match_deepspeeds_estimate_where_its_assumptions_hold(offload):
    """The estimate assumes one layer gathered at a time with its gradients (no prefetch, no
    persistent parameters, each gradient reduced at once, no module holding parameters while
    its children run: ResNet-50's parameters are all in leaf modules; ViT's encoder keeps its
    position embedding gathered over all its layers, as DeepSpeed's module hooks do)."""
    knobs = dict(stage3_prefetch_bucket_size=0, stage3_param_persistence_threshold=0, reduce_bucket_size=1)
    if offload != "none":
        knobs["offload_optimizer"] = "cpu"
    if offload == "both":
        knobs["offload_param"] = "cpu"
    wl, alloc, plan = _plan(model="resnet50", strategy="zero3", gpus=8, **knobs)
    P = sum(p.numel for p in wl.table.params)
    own: dict[str, int] = {}  # stage3.py model_to_params: the largest module's own parameters
    for p in wl.table.params:
        own[p.module] = own.get(p.module, 0) + p.numel
    L = max(own.values())
    gathered = _largest_gathered_states(plan, wl, alloc)
    assert gathered == pytest.approx(4 * L, rel=1e-6)
    expected = ds_estimate_zero3_gpu(P, L, 8, offload != "none", offload == "both")
    ours = model_state_bytes(plan.facts.buffers) + gathered
    if offload == "none":
        # 18 per partition element as the zero2 estimate counts them (2 16-bit grads + 4 fp32 grads +
        # 4 fp32 master + 8 Adam); stage3.py also keeps the 16-bit parameter partition (lp_param_buffer),
        # which DeepSpeed's zero3 formula does not add: 2 bytes per partition element more.
        assert ours == pytest.approx(expected + 2 * P / 8, rel=1e-6)
    else:
        assert ours == pytest.approx(expected, rel=1e-6)


# -- buffers DeepSpeed allocates ----------------------------------------------------------------
def test_zero2_contiguous_gradients_allocates_the_reduce_bucket_and_the_peak_holds_it():
    wl, alloc, plan = _plan(strategy="zero2", reduce_bucket_size=int(2e8))
    b = _buffers(plan)
    assert b["ipg bucket 0"] == 2e8 * 2  # reduce_bucket_size elements of fp16
    assert "ipg bucket 1" not in b  # overlap_comm off by default below stage 3
    assert b["flat parameters"] == pytest.approx(2 * sum(p.numel for p in wl.table.params))
    P = sum(p.numel for p in wl.table.params)
    assert b["fp32 master partition"] == pytest.approx(4 * P / 8) and b["gradient partition"] == pytest.approx(
        2 * P / 8
    )
    r = simdl.predict(
        "vit_b_16",
        strategy="zero2",
        gpus=8,
        cluster=CLUSTER,
        dataset="imagenet",
        batch_size=8,
        precision="fp16-amp",
        optimizer="adam",
        reduce_bucket_size=int(2e8),
    )
    assert r.memory_breakdown_bytes["comm_buffers"] >= 2e8 * 2
    assert r.config["buffers_bytes"]["ipg bucket 0"] == 4e8


def test_overlap_comm_doubles_the_bucket_and_no_contiguous_gradients_drops_it():
    _, _, two = _plan(strategy="zero2", overlap_comm=True)
    assert _buffers(two)["ipg bucket 1"] == _buffers(two)["ipg bucket 0"] == 5e8 * 2
    _, _, none = _plan(strategy="zero2", contiguous_gradients=False)
    assert not any(name.startswith("ipg bucket") for name in _buffers(none))
    assert "flattened bucket" in _buffers(none)


def test_stages_1_and_2_flatten_each_bucket_and_keep_averaged_gradients_as_views():
    # allreduce_bucket flattens each bucket whether or not contiguous_gradients moved the
    # gradients into the ipg bucket; the epilogue's averaged_gradients are views of the
    # gradients, flattened only in step() (stage_1_and_2.py get_flat_partition(return_tensor_list=True))
    for stage in ("zero1", "zero2"):
        wl, _, plan = _plan(strategy=stage, precision="fp32", reduce_bucket_size=int(2e7))
        P = sum(p.numel for p in wl.table.params)
        by_name = {b.name: b for b in plan.facts.buffers}
        assert by_name["flattened bucket"].bytes == pytest.approx(4 * min(2e7, P))
        assert by_name["flattened bucket"].life == "reduce_each"
        assert "averaged gradient partition" not in by_name
        assert by_name["flat gradient partition"].life == "step"
        assert by_name["flat gradient partition"].bytes == pytest.approx(4 * P / 8)
    _, _, z3 = _plan(strategy="zero3", precision="fp32")
    assert "flattened bucket" not in {b.name for b in z3.facts.buffers}


def test_fp32_training_still_keeps_an_fp32_master_partition():
    wl, _, plan = _plan(strategy="zero1", precision="fp32")
    P = sum(p.numel for p in wl.table.params)
    b = _buffers(plan)
    assert b["fp32 master partition"] == pytest.approx(4 * P / 8) and b["flat parameters"] == pytest.approx(4 * P)
    assert "fp32 gradient partition" not in b  # the fp32 partition gradient needs no conversion


def test_zero3_keeps_small_parameters_whole_and_its_bucket_from_the_start():
    wl, _, plan = _plan(model="resnet50", strategy="zero3", precision="bf16")
    small = sum(p.numel for p in wl.table.params if p.numel <= 1e5)
    b = _buffers(plan)
    assert plan.facts.persistent_elements == small > 0
    assert b["persistent parameters"] == 2 * small
    life = {x.name: x.life for x in plan.facts.buffers}
    assert life["ipg bucket"] == "model" and life["gradient partition buffer"] == "model"


def test_fp16_stage0_keeps_a_full_fp32_master_and_bf16_stage0_partitions_it():
    wl, _, fp16 = _plan(strategy="zero0")
    P = sum(p.numel for p in wl.table.params)
    assert _buffers(fp16)["fp32 master parameters"] == pytest.approx(4 * P)
    _, _, bf16 = _plan(strategy="zero0", precision="bf16")
    assert _buffers(bf16)["fp32 master partition"] == pytest.approx(4 * P / 8)
    assert _buffers(bf16)["fp32 gradient accumulation buffer"] == pytest.approx(4 * P)


def test_a_small_model_takes_more_memory_under_zero_than_under_ddp_and_less_under_fsdp():
    """DeepSpeed's maintainers: ZeRO is not recommended for small models (its buckets)."""
    kw = dict(gpus=8, cluster=CLUSTER, dataset="imagenet", batch_size=8, precision="fp32", optimizer="adam")
    ddp = simdl.predict("vit_b_16", strategy="ddp", **kw).peak_tensor_bytes
    assert simdl.predict("vit_b_16", strategy="fsdp", sharding="full", **kw).peak_tensor_bytes < ddp
    for stage in ("zero1", "zero2", "zero3"):
        assert simdl.predict("vit_b_16", strategy=stage, **kw).peak_tensor_bytes > ddp, stage


# -- the order of reductions ------------------------------------------------------------------
def _positions(plan, prefix):
    return [i for i, t in enumerate(plan.tasks) if t.name.startswith(prefix)]


def test_stage_order_of_reductions():
    small = dict(reduce_bucket_size=int(5e6))
    _, _, z0 = _plan(strategy="zero0", **small)
    _, _, z1 = _plan(strategy="zero1", **small)
    _, _, z2 = _plan(strategy="zero2", **small)
    _, _, z3 = _plan(strategy="zero3", **small)
    # stage 0: one 5e8-element bucket (MEMORY_OPT_ALLREDUCE_SIZE), whatever reduce_bucket_size says
    assert len(_positions(z0, "all_reduce:bucket")) == 1
    assert min(_positions(z0, "all_reduce:bucket")) > max(_positions(z0, "backward"))
    # stage 1: every bucket after the last backward task
    assert len(_positions(z1, "all_reduce:bucket")) > 3
    assert min(_positions(z1, "all_reduce:bucket")) > max(_positions(z1, "backward"))
    # stage 2: buckets inside backward, on the compute stream's order (overlap_comm off)
    assert min(_positions(z2, "all_reduce:bucket")) < max(_positions(z2, "backward"))
    # stage 3: reduce-scatter per bucket inside backward, all-gathers before forward and backward segments
    rs = _positions(z3, "reduce_scatter:bucket")
    assert rs and min(rs) < max(_positions(z3, "backward")) and not _positions(z3, "all_reduce:bucket")
    assert _positions(z3, "all_gather:fwd") and _positions(z3, "all_gather:bwd")
    assert min(_positions(z3, "all_gather:bwd")) > max(_positions(z3, "forward"))
    # stages 1-2 all-gather the updated parameters after the step; stage 3 does not
    for plan in (z1, z2):
        assert plan.tasks[-1].name == "all_gather:updated parameters"
    assert not _positions(z3, "all_gather:updated")


def test_reducing_inside_backward_on_a_side_stream_hides_communication():
    kw = dict(gpus=8, cluster=CLUSTER, dataset="imagenet", batch_size=16, precision="bf16", reduce_bucket_size=int(5e6))
    z1 = simdl.predict("vit_b_16", strategy="zero1", **kw)
    z2 = simdl.predict("vit_b_16", strategy="zero2", **kw)
    z2o = simdl.predict("vit_b_16", strategy="zero2", overlap_comm=True, **kw)
    assert z1.comm_bytes_per_iteration == pytest.approx(z2.comm_bytes_per_iteration)
    assert z2o.exposed_comm_time_s < z1.exposed_comm_time_s
    assert z2o.iteration_time_s < z1.iteration_time_s


def test_both_engines_run_every_stage():
    for stage in ("zero0", "zero1", "zero2", "zero3"):
        a = simdl.predict("resnet18", strategy=stage, gpus=4, cluster=CLUSTER, engine="analytic")
        s = simdl.predict("resnet18", strategy=stage, gpus=4, cluster=CLUSTER, engine="sim")
        assert s.iteration_time_s == pytest.approx(a.iteration_time_s, rel=0.05), stage
        assert s.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-9)


# -- options and ds_config.json ---------------------------------------------------------------
def test_defaults_are_deepspeeds():
    o = ZeROOptions()
    assert (o.reduce_bucket_size, o.allgather_bucket_size) == (500_000_000, 500_000_000)
    assert o.stage3_prefetch_bucket_size == 50_000_000 and o.stage3_param_persistence_threshold == 100_000
    assert o.stage3_max_live_parameters == 1_000_000_000 and o.contiguous_gradients is True
    assert [o.overlap(s) for s in range(4)] == [False, False, False, True]
    with pytest.raises(SimdlError, match="must be an integer"):
        ZeROOptions(reduce_bucket_size=1.5)
    with pytest.raises(SimdlError, match="applies to zero3"):
        simdl.predict("resnet18", strategy="zero2", stage3_prefetch_bucket_size=10)


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
def test_deepspeeds_own_configs_predict(path, capsys):
    from simdl.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeepSpeedConfigWarning)  # DeepSpeed's configs use DeepSpeed's keys only
        assert (
            main(
                ["predict", "--model", "resnet18", "--gpus", "4", "--cluster", CLUSTER, "--deepspeed-config", str(path)]
            )
            == 0
        )
    out = capsys.readouterr().out
    assert f"zero{read_ds_config(path).strategy[-1]}" in out


def test_a_config_sets_stage_options_batch_and_precision():
    r = simdl.predict(
        "resnet18", gpus=4, cluster=CLUSTER, deepspeed_config=str(DATA / "ds_config_func_bs8_zero2_gas3.json")
    )
    c = r.config
    assert (c["strategy"], c["batch_size"], c["grad_accumulation"], c["precision"]) == ("zero2", 8, 3, "fp16-amp")
    assert c["reduce_bucket_size"] == 7_000_000 and c["gradient_clipping"] == 1.0 and c["loss_scaling"]
    assert "activation_checkpointing" in " ".join(c["deepspeed_config_notes"])
    off = simdl.predict(
        "resnet18", gpus=4, cluster=CLUSTER, deepspeed_config=str(DATA / "ds_config_func_bs4_zero2_offload.json")
    )
    assert off.config["offload_optimizer"] == "cpu" and off.config["host_memory_bytes"] > 0
    assert off.config["pcie_bytes_per_iteration"] > 0


def _write(tmp_path, text):
    p = tmp_path / "ds.json"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"zero_optimization": {"stage": "two"}}', "zero_optimization.stage 'two' must be an integer"),
        ('{"zero_optimization": {"stage": 4}}', "accepted: 0, 1, 2, 3"),
        ('{"zero_optimization": {"stage": 2, "overlap_comm": 1}}', "overlap_comm 1 must be true or false"),
        ('{"zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}', "must be >= 0"),
        ('{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}', "NVMe offload is not modelled"),
        ('{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}', "needs ZeRO stage 3"),
        ('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}', "both enabled"),
        ('{"train_micro_batch_size_per_gpu": 0}', "must be >= 1"),
        ('{"gradient_clipping": "x"}', "gradient_clipping 'x' must be a number"),
        ("[1]", "must be a JSON object"),
        ('{"zero_optimization": {', "not JSON"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(tmp_path, capsys, text, match):
    from simdl.cli import main

    path = _write(tmp_path, text)
    with pytest.raises(SimdlError, match=match):
        read_ds_config(path)
    assert main(["predict", "--model", "resnet18", "--deepspeed-config", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_an_unknown_key_warns_naming_it_and_disagreements_are_refused(tmp_path):
    path = _write(tmp_path, '{"zero_optimization": {"stage": 1, "reduce_bucket_sise": 5}, "foo": 1}')
    with pytest.warns(DeepSpeedConfigWarning, match="zero_optimization.reduce_bucket_sise"):
        r = simdl.predict("resnet18", gpus=2, cluster=CLUSTER, deepspeed_config=path)
    assert "foo" in " ".join(r.config["deepspeed_config_notes"]) and r.config["strategy"] == "zero1"
    with pytest.raises(SimdlError, match="--strategy 'zero2' disagrees"):
        simdl.predict("resnet18", strategy="zero2", deepspeed_config=path)
    b = _write(tmp_path, '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}')
    with pytest.raises(SimdlError, match="--batch-size 8 disagrees"):
        simdl.predict("resnet18", batch_size=8, deepspeed_config=b)
    t = _write(tmp_path, '{"train_batch_size": 10, "zero_optimization": {"stage": 2}}')
    with pytest.raises(SimdlError, match="not a multiple"):
        simdl.predict("resnet18", gpus=4, deepspeed_config=t)


def test_a_key_deepspeed_0_19_8_added_is_known(tmp_path):
    # DeepSpeedZeroConfig 0.19.8 (the version validate/ runs) has fields 0.16.5 lacks
    path = _write(
        tmp_path, '{"zero_optimization": {"stage": 3, "stage3_allgather_sequential": false, "leaf_module": {}}}'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeepSpeedConfigWarning)
        read_ds_config(path)


@pytest.mark.parametrize(
    "key", ["disable_python_gc", "gradient_allreduce_op", "managed_gradient_accumulation", "log_level"]
)
def test_a_top_level_key_deepspeed_0_19_8_reads_is_known(tmp_path, key):
    # runtime/config.py 0.19.8 reads these top-level keys; 0.16.5 does not
    path = _write(tmp_path, '{"zero_optimization": {"stage": 2}, "%s": null}' % key)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeepSpeedConfigWarning)
        read_ds_config(path)


def test_an_unknown_key_is_named_against_both_versions(tmp_path):
    path = _write(tmp_path, '{"zero_optimization": {"stage": 2}, "no_such_key": 1}')
    with pytest.warns(DeepSpeedConfigWarning, match="no_such_key is not a DeepSpeed 0.16.5 or 0.19.8 key"):
        read_ds_config(path)


def test_zero_sweeps_and_is_recommended_when_named():
    rows = simdl.sweep(
        model="resnet18",
        strategy=["zero1", "zero3", "fsdp-full"],
        gpus=[8],
        cluster=CLUSTER,
        executor="serial",
        progress=False,
    )
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    assert sorted(r["label"] for r in rows) == ["fsdp-full", "zero1", "zero3"] and not any(r["error"] for r in rows)
    rec = simdl.recommend(
        "resnet18",
        cluster=CLUSTER,
        gpus=8,
        batch_sizes=[32],
        precisions=["fp32"],
        strategies=["zero2", "zero3"],
        jobs=1,
    )
    assert {r["label"] for r in rec.ranked} == {"zero2", "zero3"}


def test_the_text_output_names_each_buffer_and_the_host_memory(capsys):
    from simdl.cli import main

    assert (
        main(
            [
                "predict",
                "--model",
                "resnet18",
                "--gpus",
                "4",
                "--cluster",
                CLUSTER,
                "--deepspeed-config",
                str(DATA / "ds_config_func_bs4_zero2_offload.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    buffers = next(line for line in out.splitlines() if line.strip().startswith("buffers:"))
    assert "flat parameters" in buffers and "ipg bucket 0" in buffers and "offload staging buffer" in buffers
    assert "host memory" in out and "PCIe" in out and "CPU optimizer step is priced at an assumed" in out


def test_gradient_accumulation_reduces_every_micro_step_from_stage_2_on():
    """engine.py allreduce_gradients: 'ZeRO stage >= 2 communicates during non gradient
    accumulation boundaries as well'; stages 0-1 reduce at the boundary only."""
    table = load_workload("resnet18", dataset="cifar10")
    alloc = allocate(load_cluster(CLUSTER), 4, None)
    counts = {}
    for stage in ("zero1", "zero2", "zero3"):
        for gas in (1, 3):
            wl = Workload(table=table, batch_size=8, grad_accumulation=gas)
            plan = build_plan(wl, alloc, StrategyConfig(name=stage, reduce_bucket_size=int(2e6)))
            counts[stage, gas] = sum(
                t.collective in ("all_reduce", "reduce_scatter") and "bucket" in t.name for t in plan.tasks
            )
    assert counts["zero1", 3] == counts["zero1", 1]
    assert counts["zero2", 3] == 3 * counts["zero2", 1] and counts["zero3", 3] == 3 * counts["zero3", 1]


def test_an_adam_config_steps_with_fused_adam():
    """ds_config_z2.json names Adam: FusedAdam's one pass (7 fp32 passes, no sqrt scratch) instead
    of torch's foreach Adam (20 passes and a partition-sized scratch)."""
    path = str(DATA / "ds_config_z2.json")
    fused = simdl.predict("vit_b_16", gpus=8, cluster=CLUSTER, dataset="imagenet", deepspeed_config=path)
    torch_adam = simdl.predict(
        "vit_b_16",
        strategy="zero2",
        gpus=8,
        cluster=CLUSTER,
        dataset="imagenet",
        batch_size=1,
        precision="bf16",
        optimizer="adam",
        gradient_clipping=1.0,
        overlap_comm=False,
        contiguous_gradients=False,
    )
    assert fused.config["optimizer"] == "adam" and read_ds_config(path).options["fused_adam"]
    assert fused.step_split_s["optimizer"] < 0.5 * torch_adam.step_split_s["optimizer"]


def test_a_config_that_is_not_utf8_is_one_line_and_exit_2(tmp_path, capsys):
    from simdl.cli import main

    path = tmp_path / "ds.json"
    path.write_bytes(b'{"zero_optimization": {"stage": 2}}\xff')
    with pytest.raises(SimdlError, match="not UTF-8"):
        read_ds_config(path)
    assert main(["predict", "--model", "resnet18", "--deepspeed-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
