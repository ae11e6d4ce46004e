"""benchmarks/gpu_host_probe.py on the CPU: it writes a line per configuration, resumes, and
its fit recovers known per-op costs from synthetic timings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_host_probe as probe  # noqa: E402


def test_probe_writes_as_it_goes_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "FAMILIES", ("linear",))
    monkeypatch.setattr(probe, "PRECISIONS", ("fp32",))
    monkeypatch.setattr(probe, "DEPTHS", (1,))
    out = tmp_path / "p.jsonl"
    assert probe.run(out, budget_s=0.0, resume=False, force_cpu=True, iters=2, warmup=1) == 0
    assert out.read_text() == ""  # no configuration is started past the budget
    assert probe.run(out, budget_s=60.0, resume=True, force_cpu=True, iters=2, warmup=1) == 0
    first = out.read_text().splitlines()
    assert len(first) == len(probe.configs())
    monkeypatch.setattr(probe, "DEPTHS", (1, 2))  # more configurations: only the new ones are measured
    assert probe.run(out, budget_s=60.0, resume=True, force_cpu=True, iters=2, warmup=1) == 0
    lines = out.read_text().splitlines()
    assert lines[: len(first)] == first
    rows = [json.loads(line) for line in lines]
    assert len(rows) == len(probe.configs()) and len({r["key"] for r in rows}) == len(rows)
    assert all(r["median_s"] > 0 and r["device"] == "cpu" for r in rows)


def test_fit_recovers_the_costs_it_was_given(tmp_path, monkeypatch):
    monkeypatch.setattr(probe, "FAMILIES", ("linear",))
    monkeypatch.setattr(probe, "PRECISIONS", ("fp32",))
    fwd, bwd, sgd, adam, const = 20e-6, 35e-6, 3e-6, 5e-6, 400e-6
    rows = []
    for c in probe.configs():
        params = c["depth"] * (2 if c["bias"] else 1)
        t = const + fwd * c["depth"]
        if c["phase"] != "fwd":
            t += bwd * c["depth"]
        if c["phase"] == "step":
            t += (sgd if c["optimizer"] == "sgd" else adam) * params
        rows.append({**c, "key": probe.key(c), "params": params, "median_s": t})
    path = tmp_path / "synthetic.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    line = probe.fit(path)[1].split()
    assert line[:2] == ["linear", "fp32"]
    assert [round(float(v), 2) for v in line[2:6]] == [20.0, 35.0, 3.0, 5.0]


def test_the_device_session_script_parses_and_names_files_that_exist():
    import re
    import subprocess

    script = ROOT / "validate" / "gpu_session.sh"
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    for path in re.findall(r"benchmarks/\w+\.py", script.read_text()):
        assert (ROOT / path).is_file(), path
    assert "-m validate.gpu_check" in script.read_text()
