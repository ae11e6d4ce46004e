"""validate.run refuses to predict with a CPU profile calibrated on another processor."""

from __future__ import annotations

import json

from validate import repredict as vre
from validate import run as vrun
from validate.run import LAB_PROFILES


def _fake_sweep(monkeypatch, device, caches=None):
    """This host is ``device`` with ``caches`` (none known: the processor is told by name)."""
    calls = []

    def fake_run_one(run, *a, host_mismatch="", **k):
        calls.append(host_mismatch)
        return {
            "run_id": run.run_id,
            "status": "ok",
            "host_mismatch": host_mismatch,
            "measured": {"step_time_s": {"median": 1.0}},
            "predicted": {"analytic": {"iteration_time_s": 1.0}},
        }

    monkeypatch.setattr(vrun, "run_one", fake_run_one)
    monkeypatch.setattr("simdl.cluster.host.cpu_device_name", lambda *a: device)
    monkeypatch.setattr("simdl.cluster.host.cache_sizes", lambda *a: dict(caches or {}))
    return calls


def test_local_sweep_on_another_processor_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    calls = _fake_sweep(monkeypatch, "cpu: Some Other CPU")
    out = tmp_path / "r.jsonl"
    assert vrun.main(["--profile", "local", "-o", str(out), "--only", "vit_b_32-fsdp-full-r2-b16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Some Other CPU" in err and "--allow-other-host" in err
    assert not calls and not out.exists()
    # allowed on request: the runs carry the reason
    assert (
        vrun.main(["--profile", "local", "-o", str(out), "--only", "vit_b_32-fsdp-full-r2-b16", "--allow-other-host"])
        == 0
    )
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


def test_a_sibling_profile_of_another_processor_of_the_same_name_is_refused(tmp_path, monkeypatch, capsys):
    """cpu-epyc and cpu-epyc-x4 were calibrated on two processors that both call themselves
    "AMD EPYC" (caches L2 1024K and 512K): on the first, a 4-rank run is refused the second's
    profile, naming the caches; on the second, both rank counts take cpu-epyc-x4."""
    from simdl.cluster import load_cluster
    from simdl.cluster.host import profile_caches

    l2_1m = profile_caches(load_cluster(str(LAB_PROFILES / "cpu-epyc.yaml")))
    l2_512k = profile_caches(load_cluster(str(LAB_PROFILES / "cpu-epyc-x4.yaml")))
    calls = _fake_sweep(monkeypatch, "cpu: AMD EPYC", l2_1m)
    # --cluster cpu-epyc: the default on this processor is now the newer cpu-epyc-zen4, which has
    # no 4-rank sibling of its name (validate.run derives a 4-slot copy of it instead).
    assert (
        vrun.main(
            [
                "--profile",
                "local",
                "-o",
                str(tmp_path / "a.jsonl"),
                "--only",
                "exp2-resnet50-ps-sync",
                "--cluster",
                "cpu-epyc",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "cpu-epyc-x4" in err and "L2 512K" in err and "L2 1024K" in err and not calls
    calls = _fake_sweep(monkeypatch, "cpu: AMD EPYC", l2_512k)
    assert vrun.main(["--profile", "local", "-o", str(tmp_path / "b.jsonl"), "--only", "exp2-resnet50-ps-sync"]) == 0
    assert (
        vrun.main(["--profile", "local", "-o", str(tmp_path / "c.jsonl"), "--only", "vit_b_32-fsdp-full-r2-b16"]) == 0
    )
    assert calls == ["", ""]


def test_repredict_labels_runs_of_another_processor(tmp_path, monkeypatch):
    from validate.experiments import experiments

    monkeypatch.setattr(vre, "predict_run", lambda run, path, engines: {"analytic": {}})
    run = next(r for r in experiments("smoke") if r.ranks == 2)
    base = {"run_id": run.run_id, "spec": run.to_dict(), "status": "ok"}
    recs = [
        dict(base, host={"cpu_model": "AMD EPYC"}),
        dict(base, host={"hostname": "vm"}),
        dict(base, host={"cpu_model": "Intel(R) Xeon(R) Processor"}, host_mismatch="stale"),
    ]
    out = vre.repredict(json.loads(json.dumps(recs)), "cpu-local", tmp_path, ("analytic",))
    assert "AMD EPYC" in out[0]["host_mismatch"]
    assert "host_mismatch" not in out[1]  # the processor was not recorded: nothing to compare
    assert "host_mismatch" not in out[2]  # same processor: an old label is dropped
    # Same name, other caches: another processor (cpu-epyc-x4's caches against cpu-epyc's).
    from simdl.cluster import load_cluster
    from simdl.cluster.host import profile_caches

    other = dict(
        base,
        host={
            "cpu_model": "AMD EPYC",
            "cpu_caches": profile_caches(load_cluster(str(LAB_PROFILES / "cpu-epyc-x4.yaml"))),
        },
    )
    same = dict(
        base,
        host={"cpu_model": "AMD EPYC", "cpu_caches": profile_caches(load_cluster(str(LAB_PROFILES / "cpu-epyc.yaml")))},
    )
    out = vre.repredict(json.loads(json.dumps([other, same])), "cpu-epyc", tmp_path, ("analytic",))
    assert "L2 512K" in out[0]["host_mismatch"] and "host_mismatch" not in out[1]


def test_a_sweep_under_other_malloc_settings_than_its_profile_is_labelled(tmp_path, monkeypatch, capsys):
    """The ranks inherit this process's malloc settings; a profile timed under others is
    named in a warning and in every run's record (not refused: the heap-kept study did it)."""
    from simdl.cluster import load_cluster
    from simdl.cluster.host import profile_caches, profile_devices

    spec = load_cluster(str(LAB_PROFILES / "cpu-epyc-zen4.yaml"))
    seen = []
    _fake_sweep(monkeypatch, profile_devices(spec)[0], profile_caches(spec))
    fake = vrun.run_one

    def recording(run, *a, allocator_mismatch="", **k):
        seen.append(allocator_mismatch)
        return fake(run, *a, **k)

    monkeypatch.setattr(vrun, "run_one", recording)
    import os

    from simdl.cluster.host import ALLOCATOR_ENV_PREFIXES

    for var in [v for v in os.environ if v.startswith(ALLOCATOR_ENV_PREFIXES)]:
        monkeypatch.delenv(var)
    args = ["--profile", "local", "--only", "vit_b_32-fsdp-full-r2-b16", "--cluster", "cpu-epyc-zen4"]
    assert vrun.main(args + ["-o", str(tmp_path / "a.jsonl")]) == 0
    assert seen == [""] and "malloc" not in capsys.readouterr().err
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "68719476736")
    assert vrun.main(args + ["-o", str(tmp_path / "b.jsonl")]) == 0
    assert "MALLOC_TRIM_THRESHOLD_=68719476736" in seen[1] and "glibc's default malloc settings" in seen[1]
    assert "allocator_mismatch" in capsys.readouterr().err


def test_repredict_labels_runs_made_under_other_malloc_settings(tmp_path, monkeypatch):
    from validate.experiments import experiments

    monkeypatch.setattr(vre, "predict_run", lambda run, path, engines: {"analytic": {}})
    run = next(r for r in experiments("smoke") if r.ranks == 2)
    base = {"run_id": run.run_id, "spec": run.to_dict(), "status": "ok"}
    recs = [
        dict(base, host={"allocator_env": {"MALLOC_TRIM_THRESHOLD_": "68719476736"}}),
        dict(base, host={"allocator_env": {}}, allocator_mismatch="stale"),
        dict(base, host={}),
    ]  # before 2026-12-02: not recorded, nothing to compare
    out = vre.repredict(json.loads(json.dumps(recs)), "cpu-epyc-zen4", tmp_path, ("analytic",))
    assert "MALLOC_TRIM_THRESHOLD_=68719476736" in out[0]["allocator_mismatch"]
    assert "allocator_mismatch" not in out[1] and "allocator_mismatch" not in out[2]
