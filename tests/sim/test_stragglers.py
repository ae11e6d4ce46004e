"""Straggler / jitter syntax and the rank classes it implies."""

import numpy as np
import pytest

from simdl.errors import SimdlError
from simdl.sim.stragglers import build, parse_jitter, parse_straggler


def test_parse_straggler():
    assert parse_straggler("rank=0,factor=1.5") == [(0, 1.5)]
    assert parse_straggler("rank=2-4,factor=2") == [(2, 2.0), (3, 2.0), (4, 2.0)]


@pytest.mark.parametrize(
    "bad",
    [
        "rank=0",
        "factor=2",
        "rank=a,factor=2",
        "rank=0,factor=-1",
        "rank=3-1,factor=2",
        "rank=0,speed=2",
        "rank=0,factor=x",
    ],
)
def test_bad_straggler_is_one_line_error(bad):
    with pytest.raises(SimdlError) as e:
        parse_straggler(bad)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad", ["gauss:0.1", "lognormal", "lognormal:x", "uniform:1.5", "normal:-1"])
def test_bad_jitter_is_one_line_error(bad):
    with pytest.raises(SimdlError):
        build(jitter=bad)


def test_classes():
    assert build().classes(4) == [(0, 1, 2, 3)]
    assert build("rank=2,factor=2").classes(4) == [(0, 1, 3), (2,)]
    assert build(jitter="lognormal:0.1").classes(3) == [(0,), (1,), (2,)]
    with pytest.raises(SimdlError, match="twice"):
        build(["rank=1,factor=2", "rank=0-1,factor=3"])


def test_jitter_draws_are_seeded_and_mean_one():
    h = build(jitter="lognormal:0.1", seed=3)
    a, b = h.draws(1, 0, 20000), h.draws(1, 0, 20000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, h.draws(2, 0, 20000))
    assert a.mean() == pytest.approx(1.0, abs=0.005)
    assert parse_jitter("none") == ("none", 0.0)


def test_per_step_jitter_draws_one_factor_per_rank_and_step():
    from simdl.sim.stragglers import build

    h = build(None, None, seed=3, default=(0.2, "test"))
    assert h.jittered and h.per_step and h.jitter == "lognormal"
    d = h.draws(1, 5, 7)
    assert len(set(d.tolist())) == 1 and d[0] != 1.0
    assert h.draws(1, 5, 7).tolist() == d.tolist()  # seeded by (seed, rank, step)
    assert h.draws(2, 5, 7)[0] != d[0]
    # A jitter given explicitly replaces the default.
    assert not build(None, "none", default=(0.2, "test")).jittered
    assert not build(None, "lognormal:0.1", default=(0.2, "test")).per_step
