"""The validation report from a small synthetic results file (simdl/report/validation.py)."""

from __future__ import annotations

import math

from simdl.cli import main
from simdl.report.metrics import METRIC_BY_KEY, pairs, read_results, rel_error, summary
from simdl.report.validation import build_report, ordering


def test_rel_error():
    assert rel_error(1.1, 1.0) == 0.10000000000000009
    assert rel_error(None, 1.0) is None and rel_error(1.0, float("nan")) is None
    assert rel_error(0.0, 0.0) == 0.0 and rel_error(1.0, 0.0) is None


def test_summary_is_finite_and_right(results_file):
    recs = read_results(results_file)
    s = summary(recs)
    st = s["step_time"]
    assert st["n"] == 7  # the failed run is left out
    assert math.isclose(st["max"], 0.10, rel_tol=1e-6)
    assert all(math.isfinite(v[k]) for v in s.values() if v["n"] for k in ("mape", "max", "bias"))
    assert math.isclose(s["peak_memory"]["mape"], 0.03, rel_tol=1e-6)
    # staleness is compared for asynchronous PS runs only
    assert [r["label"] for r, *_ in pairs(recs, METRIC_BY_KEY["staleness"])] == ["ps-async"]


def test_ordering_ties_are_not_judged(results_file):
    recs = read_results(results_file)
    for o in ordering(recs, "peak_memory"):
        assert o["pairs_judged"] == 0 and o["match"]  # equal memories: all ties
    o = ordering(recs, "step_time")
    assert o and all(isinstance(x["match"], bool) for x in o)


def test_report_files(results_file, tmp_path):
    out = tmp_path / "report"
    md = build_report(results_file, out, paper=False)
    text = md.read_text()
    for section in (
        "Accuracy per metric",
        "Goals",
        "experiment 1",
        "experiment 2",
        "Ordering",
        "Runs",
        "Oversubscribed",
        "uncalibrated",
    ):
        assert section in text, section
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert {
        "parity_analytic.png",
        "error_by_strategy_analytic.png",
        "memory_over_time.png",
        "staleness.png",
        "exp1_step_time.png",
    } <= set(pngs)
    assert "nan" not in text.lower().replace("nan)", "")  # no NaN in the tables


def test_cli_report_and_paper(results_file, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", str(results_file), "-o", str(out), "--paper"]) == 0
    text = (out / "README.md").read_text()
    assert "source studies' own scale" in text and "a100-80gb-pcie" in text
    assert main(["report", "--paper"]) == 0
    printed = capsys.readouterr().out
    assert "experiment 2" in printed and "vit_b_32" in printed
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2


def test_calibration_configs_and_overlap(results_file, tmp_path):
    import json

    from simdl.report.validation import calibration_configs

    calib = {
        "provenance": {"ranks": 2, "settings": {"compute_models": "mnist_cnn:mnist:8,48;resnet18:cifar10:4,8"}},
        "compute": {"batches": {"mnist_cnn": [8, 48], "resnet18": [4, 8]}},
        "strategy_steps_measured": {
            "ddp": {"model": "mnist_cnn", "dataset": "mnist", "batch": 16},
            "fsdp1": {"skipped": True},
        },
    }
    configs = calibration_configs(calib)
    assert {(c["stage"], c["model"], c["batch"]) for c in configs} == {
        ("compute", "mnist_cnn", 8),
        ("compute", "mnist_cnn", 48),
        ("compute", "resnet18", 4),
        ("compute", "resnet18", 8),
        ("strategies", "mnist_cnn", 16),
    }
    profile = tmp_path / "fitted.yaml"
    profile.write_text(
        "name: fitted\nx:\n  kind: calibrated\ncalibration:\n"
        + "\n".join("  " + line for line in json.dumps(calib, indent=1).splitlines())
        + "\n"
    )
    recs = [json.loads(line) for line in results_file.read_text().splitlines()]
    for r in recs:
        r["cluster_profile"] = str(profile)
    path = tmp_path / "fitted.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = build_report(path, tmp_path / "rep").read_text()
    assert "uncalibrated" not in text and "| strategies | mnist_cnn | mnist | 16 | 2 | ddp |" in text
    assert "steps wander" not in text  # the profile records no jitter
    # the smoke profile's PS runs use mnist_cnn at batch 48: flagged as overlapping
    assert "also measured: `exp2-mnist_cnn-ps-async" in text
    # Runs predicted with two profiles (2 and 4 ranks): both calibrations are listed and checked.
    calib4 = {"provenance": {"ranks": 4, "settings": {"compute_models": "vgg16:cifar10:24"}}}
    profile4 = tmp_path / "fitted4.yaml"
    profile4.write_text(
        "name: fitted4\nx:\n  kind: calibrated\ncalibration:\n"
        + "\n".join("  " + line for line in json.dumps(calib4, indent=1).splitlines())
        + "\n"
    )
    recs[0]["cluster_profile"] = str(profile4)
    recs[0]["spec"] = dict(recs[0]["spec"], model="vgg16", dataset="cifar10", batch_size=24)
    recs[0]["model_name"] = "vgg16"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = build_report(path, tmp_path / "rep2").read_text()
    assert (
        "| strategies | mnist_cnn | mnist | 16 | 2 | ddp |" in text
        and "| compute | vgg16 | cifar10 | 24 | 4 | - |" in text
    )
    assert f"`{recs[0]['run_id']}`" in text.split("also measured: ")[1].split("\n")[0]
    # A profile of a machine whose steps wander more than the goal is named with that warning.
    profile4.write_text(
        profile4.read_text() + "efficiency:\n  compute_jitter:\n    value: 0.1298\n    kind: calibrated\n"
    )
    text = build_report(path, tmp_path / "rep3").read_text()
    assert "fitted4.yaml`**: this machine's steps wander: compute jitter 0.130" in text


def test_calibration_configs_keep_each_dataset():
    """A model measured on two datasets lists each dataset with its own batches, and the rows
    that also form the compute profile say so."""
    from simdl.report.validation import calibration_configs

    calib = {
        "provenance": {
            "ranks": 2,
            "settings": {"compute_models": "vgg16:cifar10:2,8;vgg16:mnist:24,48;validate.models:vgg16_w8:cifar10:16"},
        },
        "compute": {"batches": {"vgg16": [2, 8, 24, 48]}},
        "compute_profiles": [{"model": "vgg16", "dataset": "mnist", "batches": [24, 48]}],
    }
    got = {(c["stage"], c["model"], c["dataset"], c["batch"]) for c in calibration_configs(calib)}
    assert got == {
        ("compute", "vgg16", "cifar10", 2),
        ("compute", "vgg16", "cifar10", 8),
        ("compute profile", "vgg16", "mnist", 24),
        ("compute profile", "vgg16", "mnist", 48),
        ("compute", "validate.models:vgg16_w8", "cifar10", 16),
    }


def test_retried_run_counts_once_as_its_latest_attempt(tmp_path):
    import json

    from simdl.report.metrics import read_results

    p = tmp_path / "r.jsonl"
    p.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {"run_id": "a", "status": "failed", "error": "oom"},
                {"run_id": "b", "status": "ok"},
                {"run_id": "a", "status": "ok"},
            )
        )
    )
    recs = read_results(p)
    assert [(r["run_id"], r["status"]) for r in recs] == [("a", "ok"), ("b", "ok")]
    assert recs[0]["attempts"] == 2 and "attempts" not in recs[1]


def test_staleness_compares_the_steady_state_when_the_run_logged_it():
    from simdl.report.metrics import METRIC_BY_KEY

    m = METRIC_BY_KEY["staleness"]
    every = {"mean": 2.5, "n": 32}
    old = {"measured": {"staleness": every}}
    new = {"measured": {"staleness": every, "staleness_steady": {"mean": 2.7, "n": 21}}}
    assert m.measured(old) == 2.5 and m.measured(new) == 2.7


def test_repeated_runs_pool_their_steps_and_other_transports_do_not(tmp_path):
    import json

    from simdl.report.metrics import read_results

    host = {"hostname": "vm", "cpu_cores": 2}

    def rec(steps, total, transport="uv", hist=None):
        m = {
            "steady_step_times_s": steps,
            "step_time_s": {"median": sorted(steps)[len(steps) // 2]},
            "total_time_s": total,
            "transport": transport,
            "peak_allocated_bytes": 7,
        }
        if hist:
            m["staleness_steady"] = {"mean": 0.0, "histogram": hist}
        return {"run_id": "a", "status": "ok", "host": host, "measured": m}

    p = tmp_path / "r.jsonl"
    rows = (
        rec([9.0, 9.0, 9.0], 90.0, transport="default"),  # another transport: not a repeat
        rec([1.0, 2.0, 3.0], 10.0, hist={"2": 1, "3": 1}),
        {"run_id": "a", "status": "failed", "error": "killed"},
        rec([4.0, 5.0, 6.0], 20.0, hist={"3": 2}),
    )
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (r,) = read_results(p)
    m = r["measured"]
    assert r["attempts"] == 4
    assert m["step_time_s"]["median"] == 3.5 and m["step_time_s"]["n"] == 6
    assert m["total_time_s"] == 15.0
    assert m["staleness_steady"]["histogram"] == {"2": 1, "3": 3} and m["staleness_steady"]["mean"] == 2.75
    assert m["staleness_steady"]["max"] == 3 and m["staleness_steady"]["n"] == 4
    assert [x["step_median_s"] for x in m["repeats"]] == [2.0, 5.0]
    assert m["peak_allocated_bytes"] == 7
    # One finished attempt: the record is left as it was measured.
    p.write_text(json.dumps(rec([1.0, 2.0, 3.0], 10.0)) + "\n")
    (r,) = read_results(p)
    assert "repeats" not in r["measured"] and r["measured"]["step_time_s"] == {"median": 2.0}


def test_a_repeat_measured_on_a_busy_host_is_left_out_beside_quiet_ones(tmp_path):
    import json

    from simdl.report.metrics import read_results
    from simdl.report.validation import repeats_table

    host = {"hostname": "vm", "cpu_cores": 2}

    def rec(steps, started, others=0.0):
        return {
            "run_id": "a",
            "status": "ok",
            "host": host,
            "started": started,
            "host_cpu": {"others_cores": others},
            "predicted": {"analytic": {"iteration_time_s": 2.0}},
            "measured": {
                "steady_step_times_s": steps,
                "step_time_s": {"median": sorted(steps)[len(steps) // 2]},
                "total_time_s": 10.0,
                "transport": None,
                "busy_fraction": 0.5 if others else 0.9,
            },
        }

    p = tmp_path / "r.jsonl"
    # busy first, then two quiet repeats: pooled over the quiet two
    rows = (
        rec([9.0] * 3, "2026-11-29T10:00:00", 0.9),
        rec([1.0] * 3, "2026-11-29T11:00:00"),
        rec([3.0] * 3, "2026-11-29T12:00:00"),
    )
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (r,) = read_results(p)
    m = r["measured"]
    assert m["step_time_s"]["n"] == 6 and m["step_time_s"]["median"] == 2.0
    assert [x["step_median_s"] for x in m["repeats"]] == [1.0, 3.0]
    assert len(m["repeats_excluded"]) == 1 and "0.90 cores" in m["repeats_excluded"][0]["why"]
    text = "\n".join(repeats_table([r]))
    assert "left out 10:00: 9 s" in text and "median 200.0%, max 200.0%" in text
    assert "repeat 1 alone 100.0%" in text and "repeat 2 alone 33.3%" in text and "pooled 0.0%" in text
    assert "every repeat 66.7%, max 100.0% (2 medians)" in text
    # each repeat as the other's prediction: |1/3 - 1| and |3/1 - 1|
    assert "(2 ordered pairs over 1 runs): MAPE 133.3%, max 200.0%" in text
    # the latest busy, one quiet repeat before it: the quiet one's measurement stands for the run
    rows = (rec([1.0] * 3, "2026-11-29T11:00:00"), rec([9.0] * 3, "2026-11-29T12:00:00", 0.9))
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (r,) = read_results(p)
    assert r["measured"]["step_time_s"]["median"] == 1.0 and r["measured"]["busy_fraction"] == 0.9
    assert r["host_cpu"]["others_cores"] == 0.0 and r["started"] == "2026-11-29T11:00:00"
    assert len(r["measured"]["repeats_excluded"]) == 1 and "repeats" not in r["measured"]
    # every repeat busy: nothing to prefer, all pooled as before
    p.write_text("".join(json.dumps(r) + "\n" for r in (rec([1.0] * 3, "t2", 0.9), rec([3.0] * 3, "t3", 0.9))))
    (r,) = read_results(p)
    assert r["measured"]["step_time_s"]["n"] == 6 and "repeats_excluded" not in r["measured"]


def test_setup_names_each_runs_processor_and_flags_another_hosts_profile(results_file, tmp_path):
    import json

    recs = [json.loads(line) for line in results_file.read_text().splitlines()][:2]
    recs[0]["host"]["cpu_model"] = "AMD EPYC"
    recs[1]["host_mismatch"] = "profile cpu-local was calibrated on 'cpu: Intel'; this host is 'cpu: AMD EPYC'"
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = build_report(path, tmp_path / "rep").read_text()
    setup = text.split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert "AMD EPYC" in setup and "not recorded" in setup  # the second run did not record its processor
    assert "another processor** (1 of 2 runs)" in setup and "cpu: Intel" in setup


def test_setup_counts_runs_kept_after_a_teardown_failure(results_file, tmp_path):
    import json

    recs = [json.loads(line) for line in results_file.read_text().splitlines()][:2]
    recs[1]["teardown_error"] = "torchrun exited with 1 after every rank wrote its results (rank 1 exit -6 SIGABRT)"
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    setup = build_report(path, tmp_path / "rep").read_text().split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert f"tearing down** (1 of 2 runs: `{recs[1]['run_id']}`)" in setup
    path.write_text("".join(json.dumps(r) + "\n" for r in recs[:1]))
    assert "tearing down" not in build_report(path, tmp_path / "rep2").read_text()


def test_setup_names_the_allocator_settings_runs_were_measured_with(results_file, tmp_path):
    import json

    recs = [json.loads(line) for line in results_file.read_text().splitlines()][:2]
    recs[0]["host"]["allocator_env"] = {"MALLOC_TRIM_THRESHOLD_": "68719476736"}
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    setup = build_report(path, tmp_path / "rep").read_text().split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert "`MALLOC_TRIM_THRESHOLD_=68719476736` (1 runs)" in setup and "glibc's defaults (1 runs)" in setup
    path.write_text("".join(json.dumps(r) + "\n" for r in recs[1:]))
    assert "allocator settings" not in build_report(path, tmp_path / "rep2").read_text()
    recs[0]["allocator_mismatch"] = "profile p was timed with glibc's default malloc settings; these ranks with X=1"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    setup = build_report(path, tmp_path / "rep3").read_text().split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert (
        "**Predicted with a profile timed under other malloc settings** (1 of 2 runs): profile p was timed "
        "with glibc's default malloc settings; these ranks with X=1."
    ) in setup


def test_setup_lists_runs_measured_while_other_processes_were_busy(results_file, tmp_path):
    import json

    recs = [json.loads(line) for line in results_file.read_text().splitlines()][:3]
    for r in recs:
        r["host_cpu"], r["host_cpu_before"] = {"others_cores": 0.04}, {"others_cores": 0.01}
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    setup = build_report(path, tmp_path / "rep").read_text().split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert "measured during 3 of 3 runs: at most 0.04 cores" in setup and "were busy" not in setup
    recs[2]["host_cpu"]["others_cores"] = 0.97
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    setup = build_report(path, tmp_path / "rep2").read_text().split("## Setup", 1)[1].split("\n## ", 1)[0]
    assert (
        f"**Other processes were busy** (1 of 3 runs, more than 0.25 of a core on average): "
        f"`{recs[2]['run_id']}`: other processes used 0.97 cores during the run."
    ) in setup


def test_split_table_compares_shares_of_the_step_and_skips_runs_without_groups(results_file):
    from simdl.report.validation import split_table

    rec = next(r for r in read_results(results_file) if r["status"] == "ok" and "ps" not in r["label"])
    rec["predicted"]["analytic"]["iteration_time_s"] = 2.0
    assert split_table([rec]) == []  # a run made before the groups were measured
    # profiled step 1.25 s (the profiler's slowdown): shares 40 / 20 / 8 / 32 %
    rec["measured"].update(
        busy_by_group_s={"compute": 0.5, "copies": 0.25, "optimizer": 0.1, "collective_calls": 0.2},
        profiled_step_s=1.25,
    )
    rec["predicted"]["analytic"]["step_split_s"] = {
        "compute": 1.0,
        "copies": 0.1,
        "optimizer": 0.1,
        "host": 0.2,
        "interference": 0.2,
        "blocking_wait": 0.0,
        "exposed_comm": 0.4,
        "input_stall": 0.0,
    }
    lines = split_table([rec])
    row = lines[-2]
    assert "40.0% / 50.0%" in row and "20.0% / 5.0%" in row and "8.0% / 5.0%" in row and "32.0% / 40.0%" in row
    assert "faults" not in lines[-4]  # no column for runs made before faults were recorded
    rec["measured"]["page_fault_bytes_per_step_per_rank"] = [2**20, 3 * 2**20]
    lines = split_table([rec])
    assert lines[-4].endswith("| rest | faults |") and lines[-2].endswith("| 3.0 MiB |")  # the largest rank


def test_several_results_files_read_as_one_sweep(results_file, tmp_path):
    """Two sweeps (one file per day): a run in both is counted once, from the later file, not
    pooled with the earlier attempt; the report names both files and the replaced run."""
    import json

    from simdl.report.metrics import read_result_files

    recs = [json.loads(line) for line in results_file.read_text().splitlines()]
    first, second = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in recs[:3]))
    again = dict(recs[2], measured=dict(recs[2]["measured"], step_time_s={"median": 9.0, "n": 5}))
    second.write_text("".join(json.dumps(r) + "\n" for r in [again] + recs[3:]))
    merged, replaced = read_result_files([first, second])
    assert [r["run_id"] for r in merged] == [r["run_id"] for r in recs]
    assert merged[2]["measured"]["step_time_s"]["median"] == 9.0 and "attempts" not in merged[2]
    assert replaced == {recs[2]["run_id"]: str(first)}
    out = tmp_path / "rep"
    assert main(["report", str(first), str(second), "-o", str(out)]) == 0
    text = (out / "README.md").read_text()
    assert (
        f"`{first}`, `{second}`" in text
        and f"later file (its own measurement, prediction and profile): `{recs[2]['run_id']}`" in text
    )
    assert "| file | started |" in text
    assert main(["report", str(first), str(tmp_path / "missing.jsonl")]) == 2


def test_repeated_sweeps_in_several_files_are_pooled(results_file, tmp_path):
    """--repeats: a run in two files is one measurement repeated, its steady steps pooled."""
    import json

    from simdl.report.metrics import read_result_files

    recs = [json.loads(line) for line in results_file.read_text().splitlines()]
    rec = next(r for r in recs if r["status"] == "ok")
    steps = [1.0, 1.1, 1.2]
    rec["measured"].update(steady_step_times_s=steps, step_time_s={"median": 1.1, "n": 3})
    first, second = tmp_path / "sweep1.jsonl", tmp_path / "sweep2.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in recs))
    again = dict(
        rec,
        measured=dict(
            rec["measured"],
            steady_step_times_s=[100.0] * (len(steps) + 1),
            step_time_s={"median": 100.0, "n": len(steps) + 1},
        ),
    )
    second.write_text(json.dumps(again) + "\n")
    merged, replaced = read_result_files([first, second], repeats=True)
    assert replaced == {} and [r["run_id"] for r in merged] == [r["run_id"] for r in recs]
    pooled = next(r for r in merged if r["run_id"] == rec["run_id"])["measured"]
    assert len(pooled["repeats"]) == 2 and pooled["step_time_s"]["n"] == 2 * len(steps) + 1
    assert pooled["step_time_s"]["median"] == 100.0  # more than half of the pooled steps
    # The second sweep predicted again (validate.repredict: same measurement, same start) and
    # read beside it is still one repeat: the pool is the same, the new prediction is used.
    rec["started"] = "2026-11-27T10:00:00+00:00"
    again["started"] = "2026-11-27T12:00:00+00:00"
    first.write_text("".join(json.dumps(r) + "\n" for r in recs))
    second.write_text(json.dumps(again) + "\n")
    third = tmp_path / "sweep2-repredicted.jsonl"
    third.write_text(json.dumps(dict(again, predicted={**again["predicted"], "marker": 1})) + "\n")
    merged, _ = read_result_files([first, second, third], repeats=True)
    r = next(r for r in merged if r["run_id"] == rec["run_id"])
    assert len(r["measured"]["repeats"]) == 2 and r["measured"]["step_time_s"]["n"] == 2 * len(steps) + 1
    assert r["predicted"].get("marker") == 1
    out = tmp_path / "rep"
    assert main(["report", str(first), str(second), "-o", str(out), "--repeats"]) == 0
    text = (out / "README.md").read_text()
    assert "is a repeat" in text and "--repeats`" in text


def test_calibration_section_names_every_version_of_a_profile(results_file, tmp_path):
    """A sweep resumed after its profile was refitted in place: both digests, with their runs."""
    import json

    recs = [json.loads(line) for line in results_file.read_text().splitlines()][:3]
    recs[2]["cluster_profile_sha256"] = "1" * 16
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = build_report(path, tmp_path / "rep").read_text()
    section = text.split("## Cluster profile and calibration", 1)[1].split("\n## ", 1)[0]
    assert f"sha256 {'0' * 16}: 2 runs, {'1' * 16}: 1 run" in section


def _ps_pair(synthetic_record, async_step, ssp_step, p_async, p_ssp, held=(0, 96), pred_held=0.03):
    from validate.experiments import RunSpec

    out = []
    for mode, m, p in (("ps-async", async_step, p_async), ("ps-ssp", ssp_step, p_ssp)):
        run = RunSpec(
            "exp2", "resnet50", "mnist", mode, 4, 32, 1, 1024, 256, staleness_bound=2 if mode == "ps-ssp" else 0
        )
        r = synthetic_record(run, step_m=m, step_p=p)
        r["predicted"]["sim"] = {
            "iteration_time_s": p,
            "staleness": {"mean": 3.0, "held_pulls": pred_held, "held_wait_s": 0.007},
        }
        if mode == "ps-ssp":
            r["measured"]["ssp_held_pulls"] = {
                "held": held[0],
                "pulls": held[1],
                "fraction": held[0] / held[1],
                "mean_wait_s": 0.0,
            }
        out.append(r)
    return out


def test_ordering_says_when_the_prediction_called_a_pair_equal(make_record):
    # SSP measured 8 % slower than async; the prediction puts them 0.5 % apart: a discordant
    # pair still, labelled as a predicted tie with both gaps.
    o = ordering(_ps_pair(make_record, 1.00, 1.08, 1.300, 1.2935), "step_time")
    assert not o[0]["match"]
    assert o[0]["discordant"] == ["ps-async/ps-ssp(s=2) (predicted within 0.5%, measured 8.0% apart)"]
    # A prediction 10 % apart the wrong way is a plain discordant pair.
    o = ordering(_ps_pair(make_record, 1.00, 1.08, 1.30, 1.17), "step_time")
    assert o[0]["discordant"] == ["ps-async/ps-ssp(s=2)"]


def test_ssp_bound_table_compares_held_pulls(make_record):
    from simdl.report.validation import ssp_bound_table

    lines = ssp_bound_table(_ps_pair(make_record, 1.00, 1.08, 1.300, 1.3078, held=(3, 96), pred_held=0.025))
    row = [ln for ln in lines if ln.startswith("| resnet50")]
    assert row == ["| resnet50 | ps-ssp(s=2) | 3/96 (3%) | 2% | 0 ms / 7 ms | 1.080 / 1.006 |"]
    assert ssp_bound_table(_ps_pair(make_record, 1.0, 1.0, 1.0, 1.0)[:1]) == []  # no SSP run: no section


def test_a_one_host_hybrid_run_is_named_with_its_mesh(make_record):
    from simdl.report.validation import exp1_table, vit_table
    from validate.experiments import RunSpec

    h = RunSpec("exp1", "vgg16", "cifar10", "fsdp", 4, 32, 1, 1536, 256, sharding="hybrid", shard_group=2)
    f = RunSpec("exp1", "vgg16", "cifar10", "fsdp", 4, 32, 1, 1536, 256, sharding="full")
    rows = "\n".join(exp1_table([make_record(h), make_record(f)], "analytic"))
    assert "| fsdp-hybrid (2 x 2 mesh, one host) |" in rows and "| fsdp-full |" in rows
    v = RunSpec("vit", "vit_b_32", "cifar10", "fsdp", 4, 32, 1, 1536, 256, sharding="hybrid", shard_group=2)
    assert "| hybrid (2 x 2 mesh, one host) | 4" in "\n".join(vit_table([make_record(v)], "analytic"))


def _exp1_group(
    make_record, steps, started=("2026-11-29T15:00:00+00:00", "2026-11-29T15:06:00+00:00", "2026-11-29T15:09:00+00:00")
):
    """VGG16 at 2 ranks under ddp, fsdp full and fsdp none: (measured, predicted) step per strategy."""
    from validate.experiments import RunSpec

    out = []
    for (strategy, sharding), (m, p), t in zip((("ddp", "full"), ("fsdp", "full"), ("fsdp", "none")), steps, started):
        r = make_record(
            RunSpec("exp1", "vgg16", "cifar10", strategy, 2, 32, 1, 1536, 256, sharding=sharding), step_m=m, step_p=p
        )
        r["started"] = t
        out.append(r)
    return out


def test_relative_steps_set_each_strategy_against_ddp(make_record):
    from simdl.report.validation import relative_steps, relative_table

    # Measured full = 2.5 x ddp, none = 1.5 x; predicted 2.75 x and 1.2 x: ratio errors +10 % and -20 %,
    # whatever the absolute errors (ddp itself predicted 20 % high).
    recs = _exp1_group(make_record, ((2.0, 2.4), (5.0, 6.6), (3.0, 2.88)))
    rows = {x["label"]: x for x in relative_steps(recs)}
    assert set(rows) == {"fsdp-full", "fsdp-none"} and all(x["reference"] == "ddp" for x in rows.values())
    assert math.isclose(rows["fsdp-full"]["measured"], 2.5) and math.isclose(rows["fsdp-full"]["predicted"], 2.75)
    assert math.isclose(rows["fsdp-full"]["error"], 0.10) and math.isclose(rows["fsdp-none"]["error"], -0.20)
    assert rows["fsdp-full"]["apart_s"] == 360.0 and rows["fsdp-none"]["apart_s"] == 540.0
    text = "\n".join(relative_table(recs))
    assert "Ratio error over 2 pairs: MAPE 15.0%, max 20.0%." in text
    assert "| exp1, vgg16, 2, 32 | fsdp-full / ddp | 2.500 | 2.750 | +10.0% | 6 min |" in text
    # Without the reference run there is nothing to set the others against: no section.
    assert relative_steps(recs[1:2]) == [] and relative_table(recs[1:2]) == []
    # Without ddp, fsdp-none is the reference.
    assert [(x["label"], x["reference"]) for x in relative_steps(recs[1:])] == [("fsdp-full", "fsdp-none")]


def test_relative_steps_of_pooled_repeats_say_no_time_apart(make_record):
    from simdl.report.validation import relative_steps

    recs = _exp1_group(make_record, ((2.0, 2.4), (5.0, 6.6), (3.0, 2.88)))
    recs[0]["measured"]["repeats"] = [{"started": "2026-11-29T13:00:00+00:00", "step_median_s": 2.1}]
    # Both pairs are set against the pooled ddp run: neither has a time apart.
    rows = relative_steps(recs)
    assert len(rows) == 2 and all(x["apart_s"] is None for x in rows)


def test_validate_relative_pools_sweeps_and_rejects_a_missing_file(make_record, tmp_path, capsys):
    import json

    from validate.relative import main

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path, steps in ((a, ((2.0, 2.4), (5.0, 6.6), (3.0, 2.88))), (b, ((2.0, 2.0), (5.0, 5.25), (3.0, 3.21)))):
        path.write_text("".join(json.dumps(r) + "\n" for r in _exp1_group(make_record, steps)))
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    # full / ddp: +10 % in a, +5 % in b (median +7.5 %, both upwards); none / ddp: -20 %, +7 %.
    assert "| exp1, vgg16, 2, 32 | fsdp-full / ddp | 2 | +7.5% | 2/2 | +10 +5 |" in out
    assert "| exp1, vgg16, 2, 32 | fsdp-none / ddp | 2 | -6.5% | 1/2 | -20 +7 |" in out
    assert "All 4 pairs: ratio MAPE 10.5%, max 20.0%." in out
    assert main([str(a), str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "nope.jsonl" in err and "not found" in err and "Traceback" not in err


def test_band_coverage_counts_runs_inside_their_band_and_those_without_one(make_record):
    from simdl.report.validation import band_coverage, band_line

    recs = _exp1_group(make_record, ((2.0, 2.4), (5.0, 6.6), (3.0, 2.88)))
    recs[0]["predicted"]["analytic"]["iteration_time_band_s"] = [1.9, 2.9]  # holds 2.0
    recs[1]["predicted"]["analytic"]["iteration_time_band_s"] = [5.5, 7.9]  # misses 5.0
    assert band_coverage(recs) == {"inside": 1, "runs": 2, "without": 1}
    text = "\n".join(band_line(recs, "analytic"))
    assert "inside the predicted 90 % band: 1 of 2 runs (50 %)" in text and "1 runs have no band" in text
    assert band_line(recs[2:], "analytic") == []


def test_repeat_floor_scores_each_repeat_as_the_prediction_of_the_others():
    from simdl.report.metrics import repeat_floor

    def rec(*meds):
        return {"measured": {"repeats": [{"step_median_s": m} for m in meds]}}

    assert repeat_floor([rec(2.0)]) is None and repeat_floor([]) is None
    f = repeat_floor([rec(1.0, 1.1), rec(2.0, 2.0, 2.0), rec(5.0)])
    # run 1: |1.1/1 - 1| = 0.1 and |1/1.1 - 1| = 0.0909; run 2: six pairs of 0; run 3 alone
    assert f["runs"] == 2 and f["pairs"] == 8
    assert abs(f["mape"] - (0.1 + 1 / 11) / 8) < 1e-12 and abs(f["max"] - 0.1) < 1e-12
