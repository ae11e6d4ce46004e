"""Size-regime (piecewise alpha-beta) collective costs: hand-checkable numbers, group-size
scaling, the profile schema, and presets without regimes priced exactly as before."""

import math
from pathlib import Path

import pytest
import yaml
from simdl.analytic.costs import CommCosts

from simdl.cluster import allocate, cluster_names, load_cluster
from simdl.collectives import collective_time
from simdl.collectives.regimes import Regime, RegimeCurve, step_bytes
from simdl.errors import SimdlError

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


MB = 1e6
# all_reduce: 100 us/step at 1 GB/s for 1 KB..1 MB steps, then 0 us/step at 0.5 GB/s from 4 MB steps.
CURVE = RegimeCurve("all_reduce", 20e-6, (Regime(1e3, 1e6, 100e-6, 1e9), Regime(4e6, 64e6, 0.0, 0.5e9)))


def test_inside_a_regime_it_is_that_regimes_ring_alpha_beta():
    # 2 ranks, 1 MB buffer: steps of 0.5 MB -> regime 1: 20 us + 2 x 100 us + 1 MB / 1 GB/s = 1.22 ms.
    assert CURVE.time(1 * MB, 2) == pytest.approx(20e-6 + 200e-6 + 1e-3)
    # 2 ranks, 32 MB: steps of 16 MB -> regime 2: 20 us + 32 MB / 0.5 GB/s = 64.02 ms.
    assert CURVE.time(32 * MB, 2) == pytest.approx(20e-6 + 64e-3)


def test_extrapolation_is_latency_bound_below_and_bandwidth_bound_above():
    # Below the first regime: the first line, tending to overhead + 2 alpha.
    assert CURVE.time(8.0, 2) == pytest.approx(20e-6 + 200e-6 + 8 / 1e9)
    # Far above the last regime: the last line, bytes / B_last.
    t = CURVE.time(10e9, 2)
    assert t == pytest.approx(20e-6 + 10e9 / 0.5e9)


def test_between_regimes_the_two_lines_blend_log_linearly():
    lo, hi = CURVE.regimes
    # Step sizes 1 MB .. 4 MB are in neither regime; at the geometric middle (2 MB steps,
    # a 4 MB buffer) the time is the geometric mean of the two lines' times.
    m = 4 * MB
    t1 = 20e-6 + 2 * 100e-6 + m / 1e9  # ring all-reduce at 2 ranks: 2 steps, m bytes per rank
    t2 = 20e-6 + m / 0.5e9
    assert CURVE.time(m, 2) == pytest.approx(math.sqrt(t1 * t2))
    # Continuous at both edges of the gap.
    assert CURVE.time(2 * lo.hi_step_bytes * (1 + 1e-9), 2) == pytest.approx(CURVE.time(2 * lo.hi_step_bytes, 2))
    assert CURVE.time(2 * hi.lo_step_bytes * (1 - 1e-9), 2) == pytest.approx(CURVE.time(2 * hi.lo_step_bytes, 2))
    # And the (overhead, alpha, bandwidth) it reports reproduce the blended time.
    o, alpha, bw = CURVE.parts(m, 2)
    assert o + collective_time("all_reduce", m, 2, bw, alpha, "ring") == pytest.approx(CURVE.time(m, 2))
    assert bw > 0 and alpha >= 0


def test_group_size_scales_as_a_ring():
    # 4 ranks, 4 MB buffer: 6 steps of 1 MB -> regime 1 (steps up to 1 MB):
    # 20 us + 6 x 100 us + 2 x 3/4 x 4 MB / 1 GB/s = 6.62 ms.
    assert step_bytes("all_reduce", 4 * MB, 4) == 1 * MB
    assert CURVE.time(4 * MB, 4) == pytest.approx(20e-6 + 600e-6 + 6e-3)
    # The same 4 MB at 2 ranks is in the gap (2 MB steps), at 8 ranks in regime 1 with 14 steps.
    assert CURVE.time(4 * MB, 8) == pytest.approx(20e-6 + 14 * 100e-6 + 2 * 7 / 8 * 4 * MB / 1e9)
    # Broadcast moves the whole buffer at every hop: its regime does not depend on n.
    bc = RegimeCurve("broadcast", 0.0, (Regime(1e3, 1e6, 10e-6, 2e9), Regime(4e6, 64e6, 0.0, 1e9)))
    assert step_bytes("broadcast", 8 * MB, 4) == 8 * MB
    assert bc.time(8 * MB, 4) == pytest.approx(8 * MB / 1e9)
    assert bc.time(0.5 * MB, 4) == pytest.approx(3 * 10e-6 + 0.5 * MB / 2e9)


def test_a_curve_rejects_overlapping_ranges():
    with pytest.raises(ValueError):
        RegimeCurve("all_reduce", 0.0, (Regime(0, 2e6, 0, 1e9), Regime(1e6, 4e6, 0, 1e9)))


# ---------------------------------------------------------------------------- profiles

REGIMES = {
    "kind": "calibrated",
    "source": "test",
    "link_GB_per_s": 2.0,
    "collectives": {
        "all_reduce": {
            "overhead_us": 20,
            "regimes": [
                {"step_bytes": [1000, 1000000], "alpha_us": 100, "bus_GB_per_s": 1.0},
                {"step_bytes": [4000000, 64000000], "alpha_us": 0, "bus_GB_per_s": 0.5},
            ],
        },
        "all_gather": {
            "overhead_us": 10,
            "regimes": [{"step_bytes": [1000, 64000000], "alpha_us": 50, "bus_GB_per_s": 0.8}],
        },
    },
}


def _profile(tmp_path, regimes=REGIMES, name="r.yaml", **intra):
    # The regimes alone: without the base profile's in-training load terms.
    off = {"kind": "assumed", "source": "test"}
    d = {
        "extends": "cpu-local",
        "name": "r",
        "efficiency": {
            "collective_regimes_intra": regimes,
            "collective_load_factor": dict(off, value=1.0),
            "collective_load_factor_all_reduce": dict(off, value=1.0),
            "collective_load_overhead_us": dict(off, value=0.0),
        },
    }
    if intra:
        d["intra_node"] = {k: {"value": v, "kind": "assumed", "source": "test"} for k, v in intra.items()}
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(p)


def test_profile_round_trip_and_engine_use(tmp_path):
    spec = load_cluster(_profile(tmp_path, bandwidth_GB_per_s=2.0))
    model = spec.efficiency.collective_regimes_intra
    assert model.collectives == ("all_reduce", "all_gather") and model.link_bandwidth == 2e9
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    assert load_cluster(str(again)).efficiency == spec.efficiency
    comm = CommCosts(allocate(spec, 2))
    # Curves price their collectives inside the node ('world' on one node is 'intra') ...
    assert comm.time("all_reduce", 32 * MB, 2, "intra") == pytest.approx(20e-6 + 64e-3)
    assert comm.time("all_reduce", 32 * MB, 2, "world") == pytest.approx(20e-6 + 64e-3)
    assert comm.time("all_gather", 8 * MB, 2, "intra") == pytest.approx(10e-6 + 50e-6 + 0.5 * 8 * MB / 0.8e9)
    # ... the others keep the alpha-beta line of the profile.
    cl = allocate(spec, 2)
    eff = spec.efficiency
    f = eff.collective_bandwidth_factors.get("broadcast")
    bw = cl.group_bus_bandwidth("intra") * (f.value if f else 1.0)
    assert comm.time("broadcast", 8 * MB, 2, "intra") == pytest.approx(
        collective_time("broadcast", 8 * MB, 2, bw, cl.group_latency("intra"), "auto") + cl.collective_overhead
    )


def test_a_what_if_link_rate_scales_every_regime(tmp_path):
    base = CommCosts(allocate(load_cluster(_profile(tmp_path, bandwidth_GB_per_s=2.0)), 2))
    fast = CommCosts(allocate(load_cluster(_profile(tmp_path, bandwidth_GB_per_s=4.0, name="f.yaml")), 2))
    m = 32 * MB
    assert fast.time("all_reduce", m, 2, "intra") - 20e-6 == pytest.approx(
        (base.time("all_reduce", m, 2, "intra") - 20e-6) / 2
    )


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"kind": "guessed"}, "kind"),
        ({"link_GB_per_s": 0}, "link_GB_per_s"),
        ({"collectives": {"all_to_all": {"overhead_us": 0, "regimes": []}}}, "all_to_all"),
        (
            {
                "collectives": {
                    "all_reduce": {
                        "overhead_us": 0,
                        "regimes": [
                            {"step_bytes": [0, 2000], "alpha_us": 1, "bus_GB_per_s": 1},
                            {"step_bytes": [1000, 4000], "alpha_us": 1, "bus_GB_per_s": 1},
                        ],
                    }
                }
            },
            "regimes\\[1\\].step_bytes",
        ),
        (
            {
                "collectives": {
                    "all_reduce": {
                        "overhead_us": 0,
                        "regimes": [{"step_bytes": [0, 2000], "alpha_us": 1, "bus_GB_per_s": -1}],
                    }
                }
            },
            "bus_GB_per_s",
        ),
        (
            {
                "collectives": {
                    "all_reduce": {
                        "overhead_us": 0,
                        "regimes": [{"step_bytes": [5000, 2000], "alpha_us": 1, "bus_GB_per_s": 1}],
                    }
                }
            },
            "step_bytes",
        ),
    ],
)
def test_bad_regimes_are_one_line_errors_naming_the_field(tmp_path, bad, msg):
    with pytest.raises(SimdlError, match=msg) as e:
        load_cluster(_profile(tmp_path, dict(REGIMES, **bad)))
    assert "\n" not in str(e.value) and "collective_regimes_intra" in str(e.value)


def test_null_drops_the_regimes_of_an_extended_preset(tmp_path):
    spec = load_cluster(_profile(tmp_path, None))
    assert spec.efficiency.collective_regimes_intra is None


# The calibrated CPU profiles (cpu-local, cpu-local-x4, cpu-epyc: `simdl calibrate`) carry size regimes.
@pytest.mark.parametrize("name", [n for n in cluster_names() if not n.startswith("cpu-")])
def test_presets_without_regimes_are_priced_exactly_as_before(name):
    """The formula of CommCosts before size regimes: overhead + collective_time(bus x factor,
    group alpha, algorithm), for every collective, scope and algorithm."""
    spec = load_cluster(name)
    assert spec.efficiency.collective_regimes_intra is None  # GPU presets stay alpha-beta
    cl = allocate(spec, spec.gpus_per_node)
    factors = {c: f.value for c, f in spec.efficiency.collective_bandwidth_factors.items()}
    for algorithm in ("auto", "ring", "tree"):
        comm = CommCosts(cl, algorithm)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
            for m in (4e3, 1e6, 256e6):
                bw = cl.group_bus_bandwidth("intra") * factors.get(op, 1.0)
                old = collective_time(op, m, cl.gpus, bw, cl.group_latency("intra"), algorithm) + cl.collective_overhead
                assert comm.time(op, m, cl.gpus, "intra") == pytest.approx(old, rel=1e-12)


# ---------------------------------------------------------------- the allocator's step
MiB = 2**20
THRESHOLD = 32 * MiB  # glibc's largest dynamic mmap threshold (simdl.analytic.costs)
# all_gather: fast regime up to 10 MB steps, slow one from 20 MB steps. At 2 ranks the gap's
# messages run from 20 to 40 MB and hold the 32 MiB threshold; at 4 ranks (40 to 80 MB) not.
AG = RegimeCurve("all_gather", 10e-6, (Regime(1e3, 10e6, 100e-6, 1e9), Regime(20e6, 1e9, 2e-3, 0.4e9)))


def _line(regime, m, n):
    return 10e-6 + collective_time("all_gather", m, n, regime.bandwidth, regime.alpha, "ring")


def test_an_allocator_gap_steps_at_the_threshold_instead_of_blending():
    fast, slow = AG.regimes
    below, above = 30e6, 36e6  # both in the gap at 2 ranks (15 and 18 MB steps)
    assert AG.time(below, 2, temp_threshold=THRESHOLD) == pytest.approx(_line(fast, below, 2))
    assert AG.time(above, 2, temp_threshold=THRESHOLD) == pytest.approx(_line(slow, above, 2))
    # A message of exactly the threshold is mapped (glibc mmaps requests >= the threshold).
    assert AG.time(THRESHOLD, 2, temp_threshold=THRESHOLD) == pytest.approx(_line(slow, THRESHOLD, 2))
    # Without a threshold (GPU memory) the same sizes blend: strictly between the two lines.
    for m in (below, above):
        assert _line(fast, m, 2) < AG.time(m, 2) < _line(slow, m, 2)
    # Inside the regimes nothing changes.
    for m in (1e6, 200e6):
        assert AG.time(m, 2, temp_threshold=THRESHOLD) == pytest.approx(AG.time(m, 2))


def test_the_step_applies_only_where_the_gap_holds_the_threshold_and_gloo_allocates():
    # 4 ranks: the gap's messages are 40-80 MB, all above the threshold: the blend stays.
    m = 60e6
    assert AG.time(m, 4, temp_threshold=THRESHOLD) == pytest.approx(AG.time(m, 4))
    # all_reduce and broadcast work in place (ProcessGroupGloo.cpp): no temporary, no step.
    ar = RegimeCurve("all_reduce", 10e-6, AG.regimes)
    assert ar.time(30e6, 2, temp_threshold=THRESHOLD) == pytest.approx(ar.time(30e6, 2))
    # reduce_scatter clones its input: it steps like all_gather.
    rs = RegimeCurve("reduce_scatter", 10e-6, AG.regimes)
    assert rs.time(30e6, 2, temp_threshold=THRESHOLD) < rs.time(30e6, 2)


def test_the_engines_step_where_the_profile_prices_page_faults():
    # cpu-epyc-milan: all_gather 0.70 GB/s up to 11.3 MiB steps, 0.34 GB/s from 16 MiB; the
    # host prices page faults above 32 MiB. A 28 MB unit (ViT-B/32's blocks) is in the gap.
    cl = allocate(load_cluster(lab("cpu-epyc-milan")), 2)
    comm = CommCosts(cl)
    assert comm._temp_threshold == THRESHOLD
    blend = CommCosts(cl)
    blend._temp_threshold = None
    m = 28.3e6
    assert comm.time("all_gather", m, 2, "world") < 0.8 * blend.time("all_gather", m, 2, "world")
    for big in (64e6, 256e6):  # above the threshold and inside the slow regime: unchanged
        assert comm.time("all_gather", big, 2, "world") == pytest.approx(blend.time("all_gather", big, 2, "world"))
    # GPU presets map nothing fresh.
    assert CommCosts(allocate(load_cluster("a100-80gb-nvlink"), 2))._temp_threshold is None
