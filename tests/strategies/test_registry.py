"""The strategy registry: names, labels, options and the refusal of options a strategy does not take."""

from __future__ import annotations

import dataclasses

import pytest

import simdl
from simdl.cli import main
from simdl.errors import SimdlError
from simdl.strategies import StrategyConfig, registry


def test_names_labels_and_order_come_from_the_registered_families():
    assert registry.names()[:5] == ("ddp", "fsdp", "ps-sync", "ps-async", "ps-ssp")
    assert set(registry.names()) == {"ddp", "fsdp", "ps-sync", "ps-async", "ps-ssp", "zero0", "zero1", "zero2", "zero3"}
    assert registry.labels()[:5] == ("ddp", "fsdp-none", "fsdp-grad_op", "fsdp-full", "fsdp-hybrid")
    assert registry.split_label("fsdp-grad_op") == ("fsdp", {"sharding": "grad_op"})
    assert registry.order("ddp") < registry.order("fsdp-full") < registry.order("ps-sync") < registry.order("x")
    assert registry.is_stale("ps-async") and registry.is_stale("ps-ssp") and not registry.is_stale("ps-sync")
    assert not registry.is_stale("ddp") and not registry.is_stale("no-such-strategy")


def test_an_unknown_name_raises_with_the_accepted_list():
    with pytest.raises(SimdlError, match=r"unknown strategy 'fdsp' \(did you mean 'fsdp'\?\); accepted: ddp, fsdp"):
        registry.get("fdsp")
    with pytest.raises(SimdlError, match="accepted: .*fsdp-grad_op"):
        registry.split_label("fsdp-zero3")


def test_a_family_or_name_cannot_be_registered_twice():
    spec = registry.get("ddp")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(spec)
    with pytest.raises(ValueError, match="'ddp' is already registered"):
        registry.register(dataclasses.replace(spec, family="other"))


def test_options_are_typed_and_validated_in_one_line():
    with pytest.raises(SimdlError, match="unknown sharding 'zero3'.*accepted: full, grad_op, hybrid, none"):
        StrategyConfig("fsdp", sharding="zero3")
    with pytest.raises(SimdlError, match="--ps-servers 1.5 must be an integer"):
        StrategyConfig("ps-sync", ps_servers=1.5)
    with pytest.raises(SimdlError, match="must be true or false"):
        StrategyConfig("fsdp", cpu_offload="yes")
    c = StrategyConfig("fsdp", sharding="grad_op")
    assert c.sharding == "grad_op" and c.label == "fsdp-grad_op" and StrategyConfig("ps-ssp").label == "ps-ssp(s=3)"


# (option, value, strategy, the strategies named as taking it)
REFUSED = [
    ("sharding", "full", "ddp", "fsdp"),
    ("wrap", "none", "ddp", "fsdp"),
    ("reshard_root", True, "ddp", "fsdp"),
    ("shard_group", 2, "ddp", "fsdp"),
    ("cpu_offload", True, "ddp", "fsdp"),
    ("staleness_bound", 2, "ddp", "ps-ssp"),
    ("staleness_bound", 2, "fsdp", "ps-ssp"),
    ("staleness_bound", 2, "ps-async", "ps-ssp"),
    ("ps_servers", 2, "ddp", "ps-sync, ps-async, ps-ssp"),
    ("ps_servers", 2, "fsdp", "ps-sync, ps-async, ps-ssp"),
    ("bucket_cap_mb", 10, "fsdp", "ddp"),
    ("bucket_cap_mb", 10, "ps-sync", "ddp"),
    ("ps_placement", "colocated", "ddp", "ps-sync, ps-async, ps-ssp"),
    ("ps_placement", "dedicated", "fsdp", "ps-sync, ps-async, ps-ssp"),
]


@pytest.mark.parametrize("key, value, strategy, takers", REFUSED)
def test_an_option_the_strategy_does_not_take_is_refused_from_python_and_the_cli(key, value, strategy, takers, capsys):
    flag = "--" + key.replace("_", "-")
    with pytest.raises(SimdlError) as e:
        simdl.predict(strategy=strategy, cluster="a10g-ps", **{key: value})
    assert str(e.value).startswith(f"{flag} ") and f"applies to {takers}; strategy {strategy!r}" in str(e.value)
    argv = ["predict", "--strategy", strategy, "--cluster", "a10g-ps", flag] + ([] if value is True else [str(value)])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"applies to {takers}" in err and "Traceback" not in err


def test_options_that_apply_are_taken():
    assert simdl.predict(strategy="ps-ssp", cluster="a10g-ps", staleness_bound=1).config["staleness_bound"] == 1
    # two shards need two server nodes: colocated on a 2-node run
    r = simdl.predict(strategy="ps-ssp", cluster="dgx-a100", gpus=16, ps_servers=2, ps_placement="colocated")
    assert (r.config["ps_servers"], r.config["ps_placement"]) == (2, "colocated")
    assert simdl.predict(strategy="ddp", bucket_cap_mb=10).config["bucket_cap_bytes"] == 10 * 2**20


def test_calibration_step_keywords_come_from_the_strategy():
    """calibration/strategies.py wraps every block and sets the root's reshard_after_forward;
    the FSDP entry says so, a strategy without such a rule adds nothing."""
    fsdp = registry.get("fsdp")
    assert fsdp.calibration_step({"sharding": "full"}) == {"wrap": "block", "reshard_root": True}
    assert fsdp.calibration_step({"sharding": "grad_op"}) == {"wrap": "block", "reshard_root": False}
    assert registry.get("ddp").calibration_step({}) == {}
