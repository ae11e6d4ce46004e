"""The experiment matrix of each profile (validate/experiments.py)."""

from __future__ import annotations

import pytest

from validate.experiments import PROFILES, RunSpec, experiments
from validate.models import base_model, registered_wrap_types, spec_for, wrap_types_of


def test_profiles_exist_and_ids_are_unique():
    for p in PROFILES:
        runs = experiments(p)
        assert runs, p
        ids = [r.run_id for r in runs]
        assert len(ids) == len(set(ids)), p


def test_unknown_profile():
    with pytest.raises(ValueError, match="smoke"):
        experiments("huge")


def test_smoke_is_small_and_two_ranks():
    runs = experiments("smoke")
    assert len(runs) <= 8
    assert all(r.ranks == 2 for r in runs)
    assert {r.strategy for r in runs} >= {"ddp", "fsdp", "ps-sync", "ps-async"}
    assert all(r.train_images <= 1024 and r.epochs == 1 for r in runs)
    # the big models only at reduced width
    assert all(r.width > 1 for r in runs if r.model in ("vgg16", "vit_b_32"))


def test_local_covers_every_experiment_model_and_strategy():
    runs = experiments("local")
    exp1 = [r for r in runs if r.experiment == "exp1"]
    assert {r.model for r in exp1} == {"vgg16", "efficientnet_v2_l", "convnext_large"}
    assert {r.label for r in exp1} == {"ddp", "fsdp-full", "fsdp-grad_op", "fsdp-none", "fsdp-hybrid"}
    assert {r.ranks for r in exp1} == {2, 4}
    exp2 = [r for r in runs if r.experiment == "exp2"]
    assert {r.model for r in exp2} == {"resnet50", "densenet121", "vgg16"}
    assert {r.strategy for r in exp2} == {"ps-sync", "ps-async", "ps-ssp"}
    assert all(r.ranks == 4 and r.data == "accuracy" and r.dataset == "mnist" for r in exp2)
    vit = [r for r in runs if r.experiment == "vit"]
    assert {r.model for r in vit} == {"vit_b_32", "vit_b_16"} and len({r.batch_size for r in vit}) >= 3
    # one node here: hybrid sharding as FSDP2's 2 x 2 mesh on it, at 4 ranks beside the other
    # strategies, for the models whose 4 ranks fit in memory
    hybrid = [r for r in runs if r.sharding == "hybrid"]
    assert hybrid and all(r.nodes == 1 and r.ranks == 4 and r.shard_group == 2 for r in hybrid)
    assert {r.model for r in hybrid} == {"vgg16", "efficientnet_v2_l"}
    assert all(r.shard_group == 0 for r in runs if r.sharding != "hybrid")
    # every run has enough steps for warm-up + a profiled step + timed steps
    for r in runs:
        steps = -(-r.train_images // (r.batch_size * r.ranks)) * r.epochs
        assert steps >= r.warmup_steps + 6, r.run_id


def test_paper_profile_is_the_studies_sizes():
    runs = experiments("paper")
    exp1 = [r for r in runs if r.experiment == "exp1"]
    assert all(r.train_images == 50_000 and r.epochs == 10 for r in exp1)
    assert all(r.train_images == 60_000 and r.epochs == 100 for r in runs if r.experiment == "exp2")
    vit = [r for r in runs if r.experiment == "vit"]
    assert {r.sharding for r in vit} == {"full", "hybrid", "none"} and all(r.nodes == 2 and r.ranks == 8 for r in vit)


def test_oversubscription_flag():
    r = RunSpec("exp2", "mnist_cnn", "mnist", "ps-async", 4, 32, 1, 512, 128)
    assert r.processes == 5
    assert r.oversubscribed == (5 > __import__("os").cpu_count())


def test_roundtrip_and_stable_id():
    r = experiments("smoke")[0]
    again = RunSpec.from_dict(r.to_dict())
    assert again == r and again.run_id == r.run_id


def test_reduced_model_specs():
    assert spec_for("vgg16", 1) == "vgg16"
    s = spec_for("vgg16", 16)
    assert s == "validate.models:vgg16_w16" and base_model(s) == "vgg16"
    from simdl.workload.zoo import DEFAULT_WRAP_TYPES

    assert wrap_types_of(s) == DEFAULT_WRAP_TYPES["vgg16"] == wrap_types_of("vgg16")
    with registered_wrap_types(s):
        assert DEFAULT_WRAP_TYPES[s] == DEFAULT_WRAP_TYPES["vgg16"]
    assert s not in DEFAULT_WRAP_TYPES  # simdl's table is left as it was
    with pytest.raises(ValueError):
        spec_for("resnet50", 4)


def test_shard_group_keeps_the_run_ids_of_runs_without_it():
    """Resume keys on run_id: configurations from before the field keep their ids."""
    r = RunSpec("exp1", "vgg16", "cifar10", "ddp", 4, 32, 1, 1536, 256)
    assert "shard_group" not in r.to_dict()
    assert r.run_id == "exp1-vgg16-ddp-r4-b32-f62ddaa9"  # as filed in lab/records/epyc-x4-2.jsonl.xz
    h = RunSpec("exp1", "vgg16", "cifar10", "fsdp", 4, 32, 1, 1536, 256, sharding="hybrid", shard_group=2)
    assert h.to_dict()["shard_group"] == 2 and RunSpec.from_dict(h.to_dict()) == h


def test_a_one_host_hybrid_run_is_predicted_with_its_mesh():
    from validate.run import prediction_kwargs

    h = RunSpec("exp1", "vgg16", "cifar10", "fsdp", 4, 32, 1, 1536, 256, sharding="hybrid", shard_group=2)
    kw = prediction_kwargs(h, "cpu-epyc-x4")
    assert kw["shard_group"] == 2 and kw["sharding"] == "hybrid" and kw["nodes"] == 1
    assert "shard_group" not in prediction_kwargs(
        RunSpec("exp1", "vgg16", "cifar10", "ddp", 4, 32, 1, 1536, 256), "cpu-epyc-x4"
    )


def test_unprofiled_models_are_none_the_quick_calibration_measures():
    from simdl.calibrate.run_settings import COMPUTE_MODELS, STRATEGY_MODELS
    from simdl.workload.zoo import DEFAULT_WRAP_TYPES

    quick = {
        part.split(":")[0] for spec in (COMPUTE_MODELS[True][0], STRATEGY_MODELS[True]) for part in spec.split(";")
    }
    runs = experiments("unprofiled")
    models = {r.model for r in runs}
    assert len(models) >= 8 and not models & quick
    assert {(r.strategy, r.sharding) for r in runs} == {("ddp", ""), ("fsdp", "full")}
    assert all(r.ranks == 2 and r.dataset == "cifar10" for r in runs)
    # FSDP2 shards each model's repeated block, as simdl's unit plan assumes: never the root alone.
    assert all(DEFAULT_WRAP_TYPES.get(m) for m in models)
