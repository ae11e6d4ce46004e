"""simdl.predict(Job(...)): one object for a job, with predict's keywords as conveniences."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import simdl
from simdl.errors import SimdlError
from simdl.job import Job, engine_option_names
from simdl.strategies import registry


def test_a_job_predicts_what_its_keywords_predict():
    job = Job(model="resnet18", strategy="fsdp", gpus=4, options={"sharding": "grad_op"}, batch_size=16)
    by_job = simdl.predict(job)
    by_kw = simdl.predict(model="resnet18", strategy="fsdp", gpus=4, sharding="grad_op", batch_size=16)
    assert by_job.to_dict() == by_kw.to_dict()


def test_keywords_beside_a_job_replace_its_fields_and_options():
    job = Job(model="resnet18", strategy="ddp", gpus=2, cluster="dgx-a100")
    r = simdl.predict(job, gpus=8, bucket_cap_mb=50)
    assert r.config["gpus"] == 8 and r.config["bucket_cap_bytes"] == 50 * 2**20 and r.config["strategy"] == "ddp"
    sim = simdl.predict(job.replace(engine="sim", iterations=4))
    assert sim.engine == "sim"


def test_a_job_is_checked_like_the_keywords():
    with pytest.raises(SimdlError, match="--sharding 'full' applies to fsdp; strategy 'ddp'"):
        simdl.predict(Job(strategy="ddp", options={"sharding": "full"}))
    with pytest.raises(SimdlError, match="given twice"):
        Job(options={"gpus": 2}).kwargs()


def test_job_fields_and_strategy_keywords_cover_predicts_keywords():
    """Every predict keyword is a Job field, a registered strategy keyword or a simulator option."""
    params = set(inspect.signature(simdl.predict).parameters) - {"model", "engine_options"}
    fields = {f.name for f in dataclasses.fields(Job)} - {"options", "engine_options"}
    assert params <= fields | set(registry.predict_keys()) | engine_option_names()
    assert "iterations" in engine_option_names() and "algorithm" not in engine_option_names()
