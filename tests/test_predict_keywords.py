"""predict's keywords: none is silently ignored."""

import pytest

import simdl
from simdl.errors import SimdlError


def test_unknown_keyword_is_refused_naming_the_accepted():
    with pytest.raises(SimdlError, match=r"unknown predict keyword 'foo_bar'.*accepted: .*bucket_cap_mb"):
        simdl.predict(model="resnet50", foo_bar=1)


def test_simulator_option_with_the_analytic_engine_is_refused():
    with pytest.raises(SimdlError, match="seed is a simulator option: it needs engine='sim'"):
        simdl.predict(model="resnet50", seed=3)


def test_strategy_keyword_passes():
    r = simdl.predict(model="resnet50", strategy="zero2", reduce_bucket_size=10_000_000)
    assert r.config["reduce_bucket_size"] == 10_000_000
