"""simdl.calibrate.subgroups: sub-node group curves carried onto an older profile at its node
speed -- from a synthetic 4-rank collectives stage whose node runs at half the profile's speed."""

from __future__ import annotations

import json

import pytest
import yaml

from simdl.calibrate.subgroups import add_to_profile, main
from simdl.cluster import load_cluster
from simdl.collectives.cost import collective_time
from simdl.errors import SimdlError

HEADER = {
    "type": "header",
    "world": 4,
    "local_world": 4,
    "nodes": 1,
    "host": "testhost",
    "device": "cpu: test",
    "backend": "gloo",
    "date": "2026-01-02T00:00:00+00:00",
}
OVH, A, B = 100e-6, 200e-6, 0.5e9  # the stage's node: overhead, alpha per step, bus bandwidth
SUB_B = 0.2e9  # the stage's pairs: a slower bus than the ring factor alone would give
SIZES = [4096 * 2**i for i in range(0, 17, 2)]  # 4 KiB .. 256 MiB


def _t(c, m, n, bw):
    return OVH + collective_time(c, m, n, bw, A, "ring")


def _stage(tmp_path, world=4):
    recs = []
    for c in ("all_gather", "reduce_scatter", "all_reduce"):
        recs.append(
            {
                "type": "measurement",
                "key": f"self/{c}/4096/p0",
                "kind": "collective",
                "scope": "self",
                "collective": c,
                "bytes": 4096,
                "group_size": 1,
                "time_s": OVH,
            }
        )
        for m in SIZES:
            for scope, n, bw in (("world", world, B), ("sub2", 2, SUB_B)):
                recs.append(
                    {
                        "type": "measurement",
                        "key": f"{scope}/{c}/{m}/p0",
                        "kind": "collective",
                        "scope": scope,
                        "collective": c,
                        "bytes": m,
                        "group_size": n,
                        "time_s": _t(c, m, n, bw),
                    }
                )
    d = tmp_path / "collectives"
    d.mkdir()
    for r in range(world):
        with open(d / f"rank{r}.jsonl", "w") as f:
            for rec in [dict(HEADER, world=world, local_world=world, rank=r), *recs]:
                f.write(json.dumps(rec) + "\n")
    return d


def _profile(tmp_path):
    # The profile's node: twice the stage's speed (half its overhead and alpha, twice its bus).
    regime = {
        "overhead_us": OVH / 2 * 1e6,
        "regimes": [{"step_bytes": [512, 2**28], "alpha_us": A / 2 * 1e6, "bus_GB_per_s": 2 * B / 1e9}],
    }
    d = {
        "extends": "cpu-local",
        "name": "old",
        "gpus_per_node": 4,
        "intra_node": {"bandwidth_GB_per_s": {"value": 1.0, "kind": "assumed", "source": "test"}},
        "efficiency": {
            "collective_regimes_intra": {
                "kind": "calibrated",
                "source": "test",
                "link_GB_per_s": 1.0,
                "collectives": {c: regime for c in ("all_gather", "reduce_scatter", "all_reduce")},
            }
        },
    }
    p = tmp_path / "old.yaml"
    p.write_text("# an old profile\n# second line\n" + yaml.safe_dump(d, sort_keys=False))
    return p


def test_pairs_are_carried_over_at_the_profiles_node_speed(tmp_path):
    out, ratios = add_to_profile(_stage(tmp_path), _profile(tmp_path), tmp_path / "new.yaml")
    assert all(r == pytest.approx(0.5, rel=0.05) for r in ratios.values())
    text = out.read_text()
    assert text.startswith("# an old profile\n# second line\n# efficiency.collective_regimes_subgroups added")
    model = load_cluster(str(out)).efficiency.collective_regimes_subgroups[2]
    assert "transferred onto this profile's node curves" in model.source
    for c in ("all_gather", "reduce_scatter", "all_reduce"):
        for m in (65536, 8 * 2**20, 128 * 2**20):
            # half the stage's pair time: the profile's node is twice as fast as the stage's
            want = 0.5 * _t(c, m, 2, SUB_B)
            assert model.curve(c).time(m, 2, 1.0, 32 * 2**20) == pytest.approx(want, rel=0.08), (c, m)


def test_a_stage_of_another_node_size_is_refused(tmp_path):
    with pytest.raises(SimdlError, match="ran 8 ranks; the profile's node has 4") as e:
        add_to_profile(_stage(tmp_path, world=8), _profile(tmp_path))
    assert "\n" not in str(e.value)


def test_the_cli_writes_in_place_and_bad_input_is_one_line_exit_2(tmp_path, capsys):
    prof = _profile(tmp_path)
    stage = _stage(tmp_path)
    assert main([str(stage), "--profile", str(prof)]) == 0
    assert load_cluster(str(prof)).efficiency.collective_regimes_subgroups
    assert main([str(stage), "--profile", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "missing.yaml" in err
    assert main([str(tmp_path / "nostage"), "--profile", str(prof)]) == 2
    assert "no collective measurements" in capsys.readouterr().err


@pytest.mark.torch
def test_the_stage_measures_every_proper_divisor_of_the_node():
    import importlib.util
    from pathlib import Path

    pytest.importorskip("torch")
    path = Path(__file__).resolve().parents[2] / "calibration" / "collectives.py"
    spec = importlib.util.spec_from_file_location("calibration_collectives", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert [mod.subgroup_sizes(n) for n in (1, 2, 3, 4, 6, 8)] == [[], [], [], [2], [2, 3], [2, 4]]
