"""End to end: ``python -m validate.run --profile smoke`` with real torchrun runs, then the report.

Bounded for CI: 7 short runs on 2 cores, about 2 minutes (limit 10).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simdl.report.metrics import read_results, summary

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.torch
@pytest.mark.torchrun
@pytest.mark.slow
def test_smoke_profile_end_to_end(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "validate.run",
            "--profile",
            "smoke",
            "-o",
            str(out),
            "--timeout",
            "300",
            "--wait-quiet",
            "0",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=600,
    )
    recs = read_results(out)
    assert len(recs) == 7
    failed = [(r["run_id"], r.get("error")) for r in recs if r["status"] != "ok"]
    assert not failed, failed
    for r in recs:
        m = r["measured"]
        assert m["step_time_s"]["median"] > 0 and m["peak_allocated_bytes"] > 0
        assert 0 < m["busy_fraction"] <= 1.0
        if r["spec"]["strategy"] in ("ddp", "fsdp"):
            # where the profiled step's busy time went: seconds, not nanoseconds (the profiled
            # step runs under the profiler, slower than a steady one, but not 3x)
            g = m["busy_by_group_s"]
            assert g["compute"] > 0 and 0 < sum(g.values()) <= m["steady_step_times_s"][0] * 3
        a = r["predicted"]["analytic"]
        assert a["iteration_time_s"] > 0
        # the prediction's split of its step is recorded and adds up to the step
        assert math.isclose(sum(a["step_split_s"].values()), a["iteration_time_s"], rel_tol=1e-9)
        if r["spec"]["strategy"] in ("ddp", "fsdp"):
            assert 0 < m["profiled_step_s"] <= m["steady_step_times_s"][0] * 3
            # every step, warm-up included, in the training time with the profiler's stop
            assert len(m["all_step_times_s"]) == m["steps_per_rank"]
            # (the slowest rank per step: a little above any one rank's own sum, never twice it)
            assert sum(m["all_step_times_s"]) <= m["total_time_s"] * 1.1
            assert len(m["profiler_stop_s"]) == r["spec"]["ranks"] and min(m["profiler_stop_s"]) >= 0
        else:
            assert [len(w) for w in m["all_step_times_s"]] == [m["steps_per_rank"]] * r["spec"]["ranks"]
        assert r["cluster_profile"] and m["data"]
        # what others took of the CPU (simdl.calibrate.host_load): the ranks, reaped by
        # torchrun and torchrun by the runner, count as the run's own, at least half a core
        cpu = r["host_cpu"]
        assert cpu["own_cpu_s"] > 0.5 * cpu["wall_s"] > 0 and cpu["others_cores"] >= 0, cpu
        assert r["host_cpu_before"]["others_cores"] is not None
    ps = [r for r in recs if r["spec"]["strategy"] == "ps-async"]
    assert ps and ps[0]["measured"]["staleness"]["n"] > 0
    assert ps[0]["measured"]["test_accuracy"] is not None
    s = summary(recs)
    for key in ("step_time", "peak_memory", "total_time", "busy"):
        assert s[key]["n"] > 0 and math.isfinite(s[key]["mape"]) and math.isfinite(s[key]["max"]), key
    report = tmp_path / "report"
    subprocess.run(
        [sys.executable, "-m", "simdl", "report", str(out), "-o", str(report)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
    )
    assert (report / "README.md").exists() and (report / "parity_analytic.png").exists()
    assert "## Where the step goes" in (report / "README.md").read_text()
