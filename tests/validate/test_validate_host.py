"""validate.run refuses to predict with a CPU profile calibrated on another processor."""

from __future__ import annotations

import json

from validate import run as vrun
from validate import repredict as vre


def _fake_sweep(monkeypatch, device):
    calls = []

    def fake_run_one(run, *a, host_mismatch="", **k):
        calls.append(host_mismatch)
        return {"run_id": run.run_id, "status": "ok", "host_mismatch": host_mismatch,
                "measured": {"step_time_s": {"median": 1.0}}, "predicted": {"analytic": {"iteration_time_s": 1.0}}}

    monkeypatch.setattr(vrun, "run_one", fake_run_one)
    monkeypatch.setattr("simdl.cluster.host.cpu_device_name", lambda *a: device)
    return calls


def test_local_sweep_on_another_processor_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    calls = _fake_sweep(monkeypatch, "cpu: Some Other CPU")
    out = tmp_path / "r.jsonl"
    assert vrun.main(["--profile", "local", "-o", str(out), "--only", "vit_b_32-fsdp-full-r2-b16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Some Other CPU" in err and "--allow-other-host" in err
    assert not calls and not out.exists()
    # allowed on request: the runs carry the reason
    assert vrun.main(["--profile", "local", "-o", str(out), "--only", "vit_b_32-fsdp-full-r2-b16",
                      "--allow-other-host"]) == 0
    assert calls and all("Some Other CPU" in c for c in calls)


def test_same_processor_and_smoke_are_not_refused(tmp_path, monkeypatch):
    from simdl.cluster import load_cluster
    from simdl.cluster.host import profile_devices

    here = profile_devices(load_cluster("cpu-local"))[0]
    calls = _fake_sweep(monkeypatch, here)
    assert vrun.main(["--profile", "local", "-o", str(tmp_path / "a.jsonl"), "--limit", "1"]) == 0
    assert calls == [""]
    calls = _fake_sweep(monkeypatch, "cpu: Some Other CPU")
    assert vrun.main(["--profile", "smoke", "-o", str(tmp_path / "b.jsonl"), "--limit", "1"]) == 0  # plumbing only
    assert calls and "Some Other CPU" in calls[0]


def test_repredict_labels_runs_of_another_processor(tmp_path, monkeypatch):
    from validate.experiments import experiments

    monkeypatch.setattr(vre, "predict_run", lambda run, path, engines: {"analytic": {}})
    run = next(r for r in experiments("smoke") if r.ranks == 2)
    base = {"run_id": run.run_id, "spec": run.to_dict(), "status": "ok"}
    recs = [dict(base, host={"cpu_model": "AMD EPYC"}), dict(base, host={"hostname": "vm"}),
            dict(base, host={"cpu_model": "Intel(R) Xeon(R) Processor"}, host_mismatch="stale")]
    out = vre.repredict(json.loads(json.dumps(recs)), "cpu-local", tmp_path, ("analytic",))
    assert "AMD EPYC" in out[0]["host_mismatch"]
    assert "host_mismatch" not in out[1]  # the processor was not recorded: nothing to compare
    assert "host_mismatch" not in out[2]  # same processor: an old label is dropped
