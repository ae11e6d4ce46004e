"""The shipped cpu-local profile carries its measured collective points; refitting them gives
back the regimes and the held-out figures the profile records (the record is reproducible)."""

import pytest

from simdl.calibrate.check import check, main
from simdl.cluster import load_cluster


def test_shipped_regimes_and_held_out_figures_are_reproduced_from_the_profiles_points():
    spec = load_cluster("cpu-local")
    rec = spec.calibration["collectives"]["world"]
    out = check("cpu-local")
    model = spec.efficiency.collective_regimes_intra
    for c in model.collectives:
        r = rec["regimes"][c]
        ho = r["held_out"]
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(c + " "))
        assert f"{ho['within_10pct']}/{ho['n']}" in line and f"{ho['max_abs_rel_error']:.1%}" in line
        # The curve the engines use is the one the record describes.
        curve = model.curve(c)
        assert len(curve.regimes) == r["n_regimes"]
        for reg, p in zip(curve.regimes, r["params"]["regimes"]):
            assert reg.bandwidth / 1e9 == pytest.approx(p["bus_GB_per_s"], rel=1e-4)
            assert [reg.lo_step_bytes, reg.hi_step_bytes] == p["step_bytes"]


def test_a_profile_without_points_is_a_one_line_error(capsys):
    assert main(["dgx-a100"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("simdl: error: dgx-a100") and "\n" not in err
