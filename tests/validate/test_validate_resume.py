"""Results JSONL: append, torn lines, resume without redoing finished runs (validate/run.py)."""

from __future__ import annotations

import json
from pathlib import Path

from validate import run as vrun
from validate.experiments import experiments


def test_append_and_read_skip_torn_line(tmp_path):
    p = tmp_path / "r.jsonl"
    vrun.append_result(p, {"run_id": "a", "status": "ok"})
    with open(p, "a") as f:
        f.write('{"run_id": "b", "sta')  # killed mid-write
    vrun.append_result(p, {"run_id": "c", "status": "failed"})
    recs = vrun.read_results(p)
    assert [r["run_id"] for r in recs] == ["a", "c"]
    assert vrun.finished_ids(recs) == {"a", "c"}
    assert vrun.finished_ids(recs, retry_failed=True) == {"a"}


class Interrupted(Exception):
    """Stands for a kill of the sweep (an exception a sweep does not catch)."""


def test_resume_skips_finished_runs(tmp_path, monkeypatch):
    calls = []
    interrupt = [True]
    ids = [r.run_id for r in experiments("smoke")]

    def fake_run_one(run, profile, cluster, root, timeout, data_dir, engines=(), sweep="", profiles=None, **kw):
        calls.append(run.run_id)
        if len(calls) == 3 and interrupt[0]:
            interrupt[0] = False
            raise Interrupted  # the sweep is interrupted during the third run
        return {
            "run_id": run.run_id,
            "status": "failed" if run.run_id == ids[1] else "ok",
            "error": "x",
            "measured": {"step_time_s": {"median": 1.0}},
            "predicted": {"analytic": {"iteration_time_s": 1.0}},
        }

    monkeypatch.setattr(vrun, "run_one", fake_run_one)
    out = tmp_path / "results.jsonl"
    try:
        vrun.main(["--profile", "smoke", "-o", str(out)])
    except Interrupted:
        pass
    assert [r["run_id"] for r in vrun.read_results(out)] == ids[:2]
    # without --resume an existing file is refused
    assert vrun.main(["--profile", "smoke", "-o", str(out)]) == 2
    calls.clear()
    assert vrun.main(["--profile", "smoke", "-o", str(out), "--resume"]) == 0
    assert calls == ids[2:]  # neither the finished nor the failed run is redone
    calls.clear()
    vrun.main(["--profile", "smoke", "-o", str(out), "--resume", "--retry-failed"])
    assert calls == [ids[1]]  # only the failed one
    assert len(vrun.read_results(out)) == len(ids) + 1


def test_prediction_is_made_from_the_config_only(tmp_path):
    smoke = experiments("smoke")
    reduced = next(r for r in smoke if r.width > 1 and r.strategy == "ddp")
    path, note = vrun.profile_for_ranks("cpu-local", reduced.ranks, tmp_path)
    kw = vrun.prediction_kwargs(reduced, path)
    assert kw["model"] == "validate.models:vgg16_w16"  # the reduced model's own table
    assert kw["input_shape"] == "3x32x32" and kw["loader_workers"] == 0
    pred = vrun.predict_run(reduced, path, engines=("analytic",))
    full = vrun.predict_run(
        reduced.__class__(**{**reduced.to_dict(), "width": 1, "tags": ()}), path, engines=("analytic",)
    )
    assert 0 < pred["analytic"]["peak_tensor_bytes"] < full["analytic"]["peak_tensor_bytes"] / 20
    json.dumps(pred)  # JSON-ready


def test_oversubscribed_profile_is_derived(tmp_path):
    from simdl.cluster import load_cluster

    path, note = vrun.profile_for_ranks("cpu-local", 3, tmp_path)  # no profile calibrated at 3 ranks
    spec = load_cluster(path)
    assert spec.gpus_per_node == 3 and spec.shared_device and "oversubscribed" in spec.description
    assert "derived" in note
    same, note2 = vrun.profile_for_ranks("cpu-local", 2, tmp_path)
    assert same.endswith("cpu-local.yaml") and note2 == ""


def test_profile_calibrated_at_the_rank_count_is_preferred(tmp_path):
    import shutil

    import yaml

    from simdl.cluster.spec import CLUSTER_DIR

    src = Path(CLUSTER_DIR)
    for f in ("cpu-local.yaml", "cpu-local.compute.json"):
        shutil.copy(src / f, tmp_path / f)
    d = yaml.safe_load((tmp_path / "cpu-local.yaml").read_text())
    d.update(name="cpu-local-x4", gpus_per_node=4)
    (tmp_path / "cpu-local-x4.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    path, note = vrun.profile_for_ranks(str(tmp_path / "cpu-local.yaml"), 4, tmp_path / "work")
    assert path == str(tmp_path / "cpu-local-x4.yaml") and "calibrated" in note
    derived, note3 = vrun.profile_for_ranks(str(tmp_path / "cpu-local.yaml"), 3, tmp_path / "work")
    assert "derived" in note3


def test_a_profile_of_the_same_processor_with_that_many_ranks_is_found_by_provenance(tmp_path):
    """A 2-rank profile whose 4-rank sibling has another name (cpu-epyc-milan and cpu-epyc-x4
    on the Zen 3) predicts 4-rank runs with that sibling; one of another processor does not."""
    import shutil

    import yaml

    from simdl.cluster.spec import CLUSTER_DIR

    src = Path(CLUSTER_DIR)
    for f in ("cpu-local.yaml", "cpu-local.compute.json"):
        shutil.copy(src / f, tmp_path / f)
    d = yaml.safe_load((tmp_path / "cpu-local.yaml").read_text())
    other = dict(d, name="zz-other-x4", gpus_per_node=4)
    other["calibration"] = {
        **d["calibration"],
        "provenance": {**d["calibration"]["provenance"], "devices": ["cpu: Another CPU"]},
    }
    (tmp_path / "zz-other-x4.yaml").write_text(yaml.safe_dump(other, sort_keys=False))
    path, note = vrun.profile_for_ranks(str(tmp_path / "cpu-local.yaml"), 4, tmp_path / "work")
    assert "derived" in note  # another processor's 4-rank profile is not this host's
    (tmp_path / "four-ranks.yaml").write_text(
        yaml.safe_dump(dict(d, name="four-ranks", gpus_per_node=4), sort_keys=False)
    )
    path, note = vrun.profile_for_ranks(str(tmp_path / "cpu-local.yaml"), 4, tmp_path / "work")
    assert path == str(tmp_path / "four-ranks.yaml") and "calibrated on the same host" in note


def test_reduced_fsdp_prediction_uses_the_block_units(tmp_path):
    from simdl.workload.zoo import DEFAULT_WRAP_TYPES

    run = next(r for r in experiments("smoke") if r.strategy == "fsdp" and r.model == "vgg16")
    pred = vrun.predict_run(run, "cpu-local", engines=("analytic",))
    # 13 convs + 3 fc layers as units, plus the root: the units validate.train shards
    assert pred["analytic"]["fsdp_units"] == 17
    assert run.model_name not in DEFAULT_WRAP_TYPES


# The tail of a real torchrun 2.14 log: rank 1 raised, rank 0 then lost its peer.
_FAILED_LOG = """\
[rank1]:     raise RuntimeError("boom on rank one")
[rank1]: RuntimeError: boom on rank one
[rank0]: RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:19341.
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_16:55:09
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 2759)
  error_file: <N/A>
"""


def test_a_failed_rank_is_named(tmp_path):
    """The failure record says which rank failed and why, not only the log."""
    log = tmp_path / "log.txt"
    log.write_text(_FAILED_LOG)
    assert vrun._rank_failure(log) == " (rank 1 exit 1; RuntimeError: boom on rank one)"
    log.write_text(
        _FAILED_LOG.replace("exitcode  : 1 (pid: 2759)", "exitcode  : -6 (pid: 2759)  (SIGABRT)").replace(
            "[rank1]: RuntimeError: boom on rank one\n", ""
        )
    )
    assert vrun._rank_failure(log).startswith(" (rank 1 exit -6 SIGABRT; RuntimeError: [pair.cc:561]")
    log.write_text("E1123 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 24562) of binary: python\n")
    assert "out-of-memory" in vrun._rank_failure(log)
    log.write_text("E1123 api.py:1002] failed (exitcode: 1) local_rank: 0\n")
    assert vrun._rank_failure(log) == ""
    assert vrun._rank_failure(tmp_path / "missing.txt") == ""


def test_a_profile_edited_during_a_sweep_fails_the_runs_after_it_not_the_sweep(tmp_path, monkeypatch):
    import shutil

    from simdl.cluster.spec import CLUSTER_DIR

    for f in ("cpu-local.yaml", "cpu-local.compute.json"):
        shutil.copy(CLUSTER_DIR / f, tmp_path / f)
    prof = tmp_path / "cpu-local.yaml"
    run = next(r for r in experiments("smoke") if r.ranks == 2)
    profiles = vrun.sweep_profiles(str(prof), [run.ranks], tmp_path)
    launched = []
    monkeypatch.setattr(vrun, "launch", lambda *a, **k: launched.append(a) or vrun.Launched(1, "cmd", 0.0))
    prof.write_text(prof.read_text() + "\n# recalibrated\n")  # the file changes mid-sweep
    rec = vrun.run_one(run, "smoke", str(prof), tmp_path, 10.0, None, ("analytic",), "sweep", profiles)
    assert rec["status"] == "failed" and "changed during the sweep" in rec["error"] and "--retry-failed" in rec["error"]
    assert not launched  # nothing was run with a profile other than the sweep's
    # So does its compute profile (the measured rows the YAML names), which the YAML's bytes
    # do not show.
    prof.write_text(prof.read_text().replace("\n# recalibrated\n", ""))
    profiles = vrun.sweep_profiles(str(prof), [run.ranks], tmp_path)
    comp = tmp_path / "cpu-local.compute.json"
    comp.write_text(comp.read_text().replace('"source":"', '"source":"remeasured; ', 1))
    assert "remeasured" in comp.read_text()
    rec = vrun.run_one(run, "smoke", str(prof), tmp_path, 10.0, None, ("analytic",), "sweep", profiles)
    assert rec["status"] == "failed" and "changed during the sweep" in rec["error"]
    assert not launched
    # A profile that does not load stops the sweep before any run, with a one-line error.
    prof.write_text("efficiency: {matmul: oops}\n")
    out = tmp_path / "r.jsonl"
    assert vrun.main(["--profile", "smoke", "-o", str(out), "--cluster", str(prof)]) == 2
    assert not out.exists() or not vrun.read_results(out)


def test_a_rank_that_fails_after_every_rank_wrote_its_results_keeps_the_run(tmp_path, monkeypatch):
    """torchrun's exit code alone does not discard a whole measurement: a rank that fails while
    tearing down (gloo's destroy_process_group, interpreter exit) leaves every rank's complete
    record, and the run is kept with the failure named; a rank that failed before writing
    fails the run, with its reason."""
    run = next(r for r in experiments("smoke") if r.ranks == 2)

    def fake_launch(run, workdir, timeout_s, data_dir, min_available=0):
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "log.txt").write_text(_FAILED_LOG.replace("boom on rank one", "teardown"))
        return vrun.Launched(1, "cmd", 1.0)

    monkeypatch.setattr(vrun, "launch", fake_launch)
    monkeypatch.setattr(vrun, "merge_ranks", lambda run, workdir: {"step_time_s": {"median": 1.0}})
    rec = vrun.run_one(run, "smoke", "cpu-local", tmp_path, 10.0, None, ("analytic",), "sweep")
    assert rec["status"] == "ok" and rec["returncode"] == 1
    assert rec["teardown_error"].startswith(
        "torchrun exited with 1 after every rank wrote its results (rank 1 exit 1; RuntimeError: teardown)"
    )

    def no_results(run, workdir):
        raise RuntimeError("1 of 2 ranks wrote results")

    monkeypatch.setattr(vrun, "merge_ranks", no_results)
    rec = vrun.run_one(run, "smoke", "cpu-local", tmp_path, 10.0, None, ("analytic",), "sweep")
    assert rec["status"] == "failed" and "teardown_error" not in rec
    assert rec["error"].startswith("1 of 2 ranks wrote results (rank 1 exit 1; RuntimeError: teardown)")
