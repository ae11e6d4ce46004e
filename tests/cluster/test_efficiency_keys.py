"""Optional calibrated efficiency keys: read in their file unit, written back, bounds enforced."""

import pytest
import yaml

from simdl.cluster import load_cluster
from simdl.cluster.spec import CLUSTER_DIR
from simdl.errors import SimdlError


@pytest.mark.parametrize("key,attr,value,si,bad,message", [
    # FSDP2's host time per unit: microseconds in the file, seconds inside
    ("fsdp_unit_overhead_us", "fsdp_unit_overhead", 2500.0, 2.5e-3, -1.0, "fsdp_unit_overhead_us"),
    # in-step copy slowdown: a factor, 0.5-50
    ("copy_in_step_factor", "copy_in_step_factor", 4.5, 4.5, 0.1,
     r"copy_in_step_factor = 0.1; accepted: 0.5 <= value <= 50"),
])
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
