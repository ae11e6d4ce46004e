"""Optional calibrated efficiency keys: read in their file unit, written back, bounds enforced."""

import pytest
import yaml

from simdl.cluster import load_cluster
from simdl.cluster.spec import CLUSTER_DIR
from simdl.errors import SimdlError


@pytest.mark.parametrize(
    "key,attr,value,si,bad,message",
    [
        # in-step copy slowdown: a factor, 0.5-50
        (
            "copy_in_step_factor",
            "copy_in_step_factor",
            4.5,
            4.5,
            0.1,
            r"copy_in_step_factor = 0.1; accepted: 0.5 <= value <= 50",
        ),
    ],
)
def test_key_round_trips_and_rejects_out_of_range(tmp_path, key, attr, value, si, bad, message):
    d = yaml.safe_load((CLUSTER_DIR / "cpu-local.yaml").read_text())
    d["compute_profile"]["file"] = str(CLUSTER_DIR / d["compute_profile"]["file"])
    d["efficiency"][key] = {"value": value, "kind": "calibrated", "source": "test"}
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(d))
    spec = load_cluster(str(p))
    assert getattr(spec.efficiency, attr).value == pytest.approx(si)
    assert spec.efficiency.to_dict()[key]["value"] == pytest.approx(value)
    d["efficiency"][key]["value"] = bad
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(SimdlError, match=message):
        load_cluster(str(p))


def _cpu_local(tmp_path, edit):
    d = yaml.safe_load((CLUSTER_DIR / "cpu-local.yaml").read_text())
    d["compute_profile"]["file"] = str(CLUSTER_DIR / d["compute_profile"]["file"])
    d.pop("strategies", None)  # the shipped profile's own value; each test gives its own
    edit(d)
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


U = {"value": 2500.0, "kind": "calibrated", "source": "test"}


def test_fsdp_unit_overhead_is_read_from_the_strategy_section_and_from_the_efficiency_key(tmp_path):
    # FSDP2's host time per unit: microseconds in the file, seconds inside, in strategies.fsdp
    new = load_cluster(str(_cpu_local(tmp_path, lambda d: d.update(strategies={"fsdp": {"unit_overhead_us": U}}))))
    assert new.strategies.fsdp.unit_overhead.value == pytest.approx(2.5e-3)
    assert new.to_dict()["strategies"] == {"fsdp": {"unit_overhead_us": U}}
    assert "fsdp_unit_overhead_us" not in new.efficiency.to_dict()
    # a file that gives it in the efficiency section: the same value, in the same place
    old = load_cluster(str(_cpu_local(tmp_path, lambda d: d["efficiency"].update(fsdp_unit_overhead_us=U))))
    assert old.strategies == new.strategies and old.efficiency == new.efficiency
    # absent: no per-unit cost, and to_dict writes no strategies section
    plain = load_cluster(str(_cpu_local(tmp_path, lambda d: None)))
    assert plain.strategies.fsdp.unit_overhead is None and "strategies" not in plain.to_dict()
    assert load_cluster("cpu-local").strategies.fsdp.unit_overhead.value == pytest.approx(3.11e-3)


def test_fsdp_unit_overhead_given_twice_or_negative_is_one_line_error(tmp_path):
    def both(d):
        d["efficiency"]["fsdp_unit_overhead_us"] = U
        d["strategies"] = {"fsdp": {"unit_overhead_us": U}}

    with pytest.raises(
        SimdlError,
        match=r"efficiency.fsdp_unit_overhead_us and strategies.fsdp.unit_overhead_us "
        r"are one value; accepted: strategies.fsdp.unit_overhead_us alone",
    ):
        load_cluster(str(_cpu_local(tmp_path, both)))
    bad = {**U, "value": -1.0}
    with pytest.raises(SimdlError, match=r"strategies: fsdp: unit_overhead_us = -1.0 must be >= 0"):
        load_cluster(str(_cpu_local(tmp_path, lambda d: d.update(strategies={"fsdp": {"unit_overhead_us": bad}}))))
    with pytest.raises(SimdlError, match=r"unknown key 'unit_overhead_s'"):
        load_cluster(str(_cpu_local(tmp_path, lambda d: d.update(strategies={"fsdp": {"unit_overhead_s": U}}))))


def test_the_lab_profiles_fitted_unit_overhead_reaches_the_fsdp_strategy():
    from pathlib import Path

    lab = Path(__file__).resolve().parents[2] / "lab" / "profiles" / "cpu-epyc-zen4.yaml"
    raw = yaml.safe_load(lab.read_text())
    assert "fsdp_unit_overhead_us" not in raw["efficiency"]  # the file gives it in the strategy's section
    spec = load_cluster(str(lab))
    assert spec.strategies.fsdp.unit_overhead.value == pytest.approx(
        raw["strategies"]["fsdp"]["unit_overhead_us"]["value"] * 1e-6
    )
    assert spec.strategies.fsdp.unit_overhead.kind == "calibrated"
