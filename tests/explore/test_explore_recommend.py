"""simdl.recommend on cases with a known answer, its knobs, and the CLI."""

from __future__ import annotations

import json

import pytest

import simdl
from simdl.cli import main
from simdl.errors import SimdlError
from simdl.explore.recommend import CHECKPOINT_KEY, checkpointing_available, knobs, parse_memory
from simdl.units import GB, GiB


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_small_model_on_a_slow_network_ddp_wins():
    # MobileNetV3 (5.5 M params) on 4 nodes x 4 A10G with one 40 Gb/s NIC per node: memory is
    # no constraint and the inter-node all-reduce is the step's largest cost. Full sharding
    # only adds collectives, so it loses to DDP; hybrid sharding (intra-node reduce-scatter /
    # all-gather hidden behind the GPU's compute, an inter-node all-reduce of a quarter of the
    # gradients) may beat DDP once the kernel model gives the step compute to hide it behind.
    rec = simdl.recommend("mobilenet_v3_large", cluster="a10g-ps", gpus=16)
    assert rec.winner["label"] in ("ddp", "fsdp-hybrid")
    assert not rec.rejected
    assert "exposed communication" in rec.explanation and f"Recommended: {rec.winner['label']}" in rec.explanation
    best = {}
    for r in rec.ranked:
        best.setdefault(r["label"], r["total_time_s"])
    assert best["fsdp-full"] > best["ddp"]


def test_model_that_only_fits_with_full_sharding():
    # ConvNeXt-Large (198 M params) with Adam on 4 GPUs: per GPU, DDP keeps 16 bytes/param of
    # state, SHARD_GRAD_OP 4 + 12/4 = 7, FULL_SHARD 16/4 = 4. A budget between the smallest
    # FULL_SHARD and the smallest GRAD_OP configuration leaves full sharding as the only answer.
    grid = dict(model="convnext_large", gpus=4, cluster="a10g-ps", optimizer="adam", batch_size=[16, 32, 64, 128])
    df = simdl.sweep(
        strategy=["ddp", "fsdp-none", "fsdp-grad_op", "fsdp-full"],
        as_frame=False,
        **grid,
        precision=["fp32", "tf32", "bf16"],
    )
    least = {}
    for r in df:
        least[r["label"]] = min(least.get(r["label"], float("inf")), r["peak_memory_bytes"])
    assert least["fsdp-full"] < least["fsdp-grad_op"] < least["ddp"]  # the physics the test relies on
    budget = (least["fsdp-full"] + least["fsdp-grad_op"]) / 2
    rec = simdl.recommend(
        "convnext_large", cluster="a10g-ps", gpus=4, optimizer="adam", memory_budget=f"{budget / GiB:.4f}GiB"
    )
    assert rec.ranked and {r["label"] for r in rec.ranked} == {"fsdp-full"}
    assert rec.winner["peak_memory_bytes"] <= budget
    assert "ddp does not fit" in rec.explanation and "fsdp-grad_op does not fit" in rec.explanation
    assert {r["label"] for r in rec.rejected} >= {"ddp", "fsdp-none", "fsdp-grad_op"}


def test_nothing_fits_is_explained():
    rec = simdl.recommend("convnext_large", cluster="a10g-ps", gpus=4, memory_budget="100MiB")
    assert rec.winner is None and rec.result is None
    assert "No configuration fits" in rec.explanation and "fsdp-full" in rec.explanation


def test_objectives_rank_differently():
    time_ = simdl.recommend("resnet50", cluster="dgx-a100", objective="time", batch_size=32, precisions=["bf16"])
    cost = simdl.recommend(
        "resnet50", cluster="dgx-a100", objective="cost", batch_size=32, precisions=["bf16"], price_per_gpu_hour=2.5
    )
    mem = simdl.recommend("resnet50", cluster="dgx-a100", objective="memory", gpus=8, batch_size=32)
    assert time_.winner["gpus"] == 8  # GPUs not given: 1..8 tried, more GPUs finish sooner
    assert cost.winner["gpu_hours"] == min(r["gpu_hours"] for r in cost.ranked)
    hours = [r["gpu_hours"] for r in cost.ranked]
    assert hours[1:] == sorted(hours[1:]) and hours[0] <= hours[1] * 1.01  # (a tie may put the simpler first)
    assert "2.5 per GPU-hour" in cost.explanation
    assert mem.winner["peak_memory_bytes"] == min(r["peak_memory_bytes"] for r in mem.ranked)
    assert mem.winner["label"] in ("fsdp-full", "fsdp-grad_op")


def test_ties_go_to_the_simplest_configuration():
    # One GPU: no communication, so DDP and every FSDP sharding predict (nearly) the same time.
    rec = simdl.recommend("resnet18", cluster="a100-80gb-nvlink", gpus=1, batch_size=32, precisions=["fp32"])
    assert rec.winner["label"] == "ddp"
    assert not rec.winner.get(CHECKPOINT_KEY)


def test_knobs_follow_the_cluster_and_gpu():
    k = knobs("a10g-ps", gpus=16)
    assert "fsdp-hybrid" in k["strategy"] and "ps-sync" in k["strategy"] and "ps-async" not in k["strategy"]
    assert "ps-async" in knobs("a10g-ps", gpus=4, allow_stale=True)["strategy"]
    assert "fsdp-hybrid" not in knobs("a100-80gb-nvlink")["strategy"]
    assert knobs("a100-80gb-nvlink")["gpus"] == [1, 2, 4]
    assert knobs("v100-dgx1")["precision"] == ["fp32", "fp16-amp"]  # Volta: no faster bf16 or tf32
    assert knobs("dgx-a100")["precision"] == ["fp32", "tf32", "bf16"]
    assert (CHECKPOINT_KEY in k) == checkpointing_available()


def test_parse_memory():
    assert parse_memory(40) == 40 * GiB
    assert parse_memory("42GB") == 42 * GB
    assert parse_memory("1.5 GiB") == 1.5 * GiB
    for bad in ("lots", "-1", 0, True):
        with pytest.raises(SimdlError):
            parse_memory(bad)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"objective": "speed"}, "unknown objective"),
        ({"strategies": ["zero9"]}, "unknown strategy"),
        ({"strategy": "ddp"}, "knob"),
        ({"price_per_gpu_hour": -1}, "price"),
    ],
)
def test_bad_recommend_input(kwargs, needle):
    with pytest.raises(SimdlError, match=needle):
        simdl.recommend("resnet18", **kwargs)


def test_cli_recommend_text_and_json(capsys):
    code, out, err = run(
        ["recommend", "--model", "mobilenet_v3_large", "--cluster", "a10g-ps", "--gpus", "16", "--top", "3"], capsys
    )
    assert code == 0, err
    assert "Recommended: " in out and "step:" in out and "memory:" in out
    code, out, _ = run(
        [
            "recommend",
            "--model",
            "resnet18",
            "--gpus",
            "2",
            "--batch-size",
            "32",
            "--precision",
            "fp32,bf16",
            "--objective",
            "cost",
            "--json",
        ],
        capsys,
    )
    d = json.loads(out)
    assert d["objective"] == "cost" and d["winner"]["batch_size"] == 32 and d["winner_result"]["iteration_time_s"] > 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "resnet18", "--objective", "fast"], "unknown objective"),
        (["--model", "resnet18", "--memory-budget", "big"], "--memory-budget"),
        (["--model", "resnet18", "--strategy", "zero9"], "unknown strategy"),
        (["--model", "resnet18", "--cluster", "dgx-a1000"], "dgx-a100"),
    ],
)
def test_cli_recommend_errors(args, needle, capsys):
    code, _, err = run(["recommend", *args], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_cli_recommend_nothing_fits_exits_1(capsys):
    code, out, _ = run(["recommend", "--model", "convnext_large", "--gpus", "4", "--memory-budget", "100MiB"], capsys)
    assert code == 1 and "No configuration fits" in out
