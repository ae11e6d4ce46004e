"""From raw per-rank records to a loadable profile, without torchrun: synthetic run directories
written in the format of calibration/*.py, generated from known parameters."""

import json

import pytest
import yaml
from simdl.analytic.costs import Rates, row_times

from simdl.calibrate.profile import build_profile, write_profile
from simdl.calibrate.records import load_stage
from simdl.calibrate.run import make_settings
from simdl.cluster import load_cluster
from simdl.cluster.spec import load_gpu
from simdl.collectives.cost import bus_bytes_factor, collective_time
from simdl.predict import predict
from simdl.workload.library import load_workload

HEADER = {
    "type": "header",
    "world": 2,
    "local_world": 2,
    "nodes": 1,
    "host": "testhost",
    "device": "cpu: test",
    "backend": "gloo",
    "threads": 1,
    "cpu_count": 2,
    "threads_note": "torch.set_num_threads(1)",
    "versions": {"torch": "2.x"},
    "loadavg": [0.1, 0.1, 0.1],
    "date": "2026-01-01T00:00:00+00:00",
}
TRUE = {
    "overhead": 30e-6,
    "alpha": 20e-6,
    "bw": 1.0e9,
    "factors": {"all_gather": 0.6, "reduce_scatter": 0.3, "broadcast": 2.0, "send_recv": 1.2},
    "e_m": 0.4,
    "e_b": 0.25,
    "launch": 6e-6,
}


def _write(stage_dir, rank, records, done=True):
    stage_dir.mkdir(parents=True, exist_ok=True)
    with open(stage_dir / f"rank{rank}.jsonl", "w") as f:
        for r in [dict(HEADER, rank=rank), *records]:
            f.write(json.dumps(r) + "\n")
    if done:
        (stage_dir / "DONE").write_text("{}\n")


def make_run_dir(root, with_compute=True):
    run = root / "calibrate-test"
    colls = []
    for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv"):
        for m in [4096 * 4**i for i in range(8)]:
            t = TRUE["overhead"] + collective_time(c, m, 2, TRUE["bw"] * TRUE["factors"].get(c, 1.0), TRUE["alpha"])
            colls.append(
                {
                    "type": "measurement",
                    "key": f"world/{c}/{m}",
                    "kind": "collective",
                    "scope": "world",
                    "collective": c,
                    "bytes": m,
                    "group_size": 2,
                    "time_s": t,
                    "busbw_GB_per_s": m / t * bus_bytes_factor(c, 2) / 1e9,
                }
            )
    for r in (0, 1):
        _write(run / "collectives", r, colls)
    if with_compute:
        cpu = load_gpu("cpu")  # the peaks the fit divides by: per rank, 2 ranks share the device
        rates = Rates(
            flops=cpu.peak("fp32") / 2 * TRUE["e_m"],
            memory_bandwidth=cpu.memory_bandwidth.value / 2 * TRUE["e_b"],
            kernel_overhead=TRUE["launch"],
            activation_factor=1.0,
        )
        recs = []
        for model, ds, batches in (
            ("mnist_cnn", "mnist", (8, 32)),
            ("resnet18", "cifar10", (4, 8)),
            ("densenet121", "cifar10", (2,)),
        ):
            table = load_workload(model, ds)
            for b in batches:
                rt = row_times.__wrapped__(table, b, rates)
                recs.append(
                    {
                        "type": "measurement",
                        "key": f"model/{model}/{ds}/{b}",
                        "kind": "model",
                        "model": model,
                        "dataset": ds,
                        "batch": b,
                        "step_fwd_s": float(rt.fwd.sum()),
                        "step_bwd_s": float(rt.bwd.sum()),
                        "rows": {
                            "name": list(table.names),
                            "type": list(table.types),
                            "fwd_s": rt.fwd.tolist(),
                            "bwd_s": rt.bwd.tolist(),
                        },
                    }
                )
        for r in (0, 1):
            _write(run / "compute", r, recs)
    ps = [
        {
            "type": "measurement",
            "key": f"roundtrip/{m}",
            "kind": "ps_roundtrip",
            "bytes": m,
            "role": "worker",
            "time_s": 2 * (40e-6 + m / 1.5e9),
        }
        for m in [4096 * 4**i for i in range(7)]
    ]
    ps += [
        {
            "type": "measurement",
            "key": f"update/{m}",
            "kind": "ps_update",
            "bytes": m,
            "role": "server",
            "time_s": 8 * m / 12e9,
            "streamed_bytes": 8 * m,
        }
        for m in [2**20 * 4**i for i in range(3)]
    ]
    _write(run / "ps", 0, [dict(p, role="server") if p["kind"] == "ps_roundtrip" else p for p in ps])
    _write(run / "ps", 1, [dict(p, role="worker") if p["kind"] == "ps_update" else p for p in ps])
    return run


def test_profile_from_synthetic_run_recovers_values_and_loads(tmp_path):
    run = make_run_dir(tmp_path)
    settings = make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None)
    profile, report = build_profile(run, settings, name="synthetic")
    eff = profile["efficiency"]
    assert eff["matmul"]["kind"] == "calibrated"
    assert eff["matmul"]["value"] == pytest.approx(TRUE["e_m"], rel=0.02)
    assert eff["memory_bandwidth"]["value"] == pytest.approx(TRUE["e_b"], rel=0.05)
    assert eff["kernel_launch_us"]["value"] == pytest.approx(TRUE["launch"] * 1e6, rel=0.05)
    assert eff["collective_latency_intra_us"]["value"] == pytest.approx(20, rel=0.05)
    # The collectives DDP/FSDP call get size-regime curves (one regime: the synthetic data is
    # one alpha-beta line), which replace the bandwidth factors of the joint line.
    regs = eff["collective_regimes_intra"]
    assert sorted(regs["collectives"]) == ["all_gather", "all_reduce", "broadcast", "reduce_scatter"]
    assert regs["link_GB_per_s"] == eff_link(profile)
    rs = regs["collectives"]["reduce_scatter"]["regimes"]
    assert len(rs) == 1 and rs[0]["bus_GB_per_s"] == pytest.approx(0.3, rel=0.05)
    assert not any(
        k.startswith("collective_bandwidth_factor_") and k != "collective_bandwidth_factor_send_recv" for k in eff
    )
    for c in regs["collectives"]:
        assert report["collectives"]["world"]["per_collective"][c]["regimes"]["held_out"]["max_abs_rel_error"] < 0.01
    # The held-out model (densenet121) is predicted, not fitted, and its error is reported.
    assert report["compute"]["held_out"]["models"] == ["densenet121"]
    assert report["compute"]["held_out"]["steps"]["max_abs_rel_error"] < 0.01
    assert report["collectives"]["world"]["joint"]["held_out"]["max_abs_rel_error"] < 0.01
    assert profile["ps_servers"]["latency_us"]["value"] == pytest.approx(40, rel=0.05)
    assert profile["calibration"]["provenance"]["host"] == ["testhost"]
    path = write_profile(profile, tmp_path / "mine.yaml")
    spec = load_cluster(str(path))
    assert spec.shared_device and spec.gpus_per_node == 2 and spec.calibration["provenance"]["backend"] == "gloo"
    r = predict(model="mnist_cnn", strategy="fsdp", gpus=2, cluster=str(path), dataset="mnist")
    assert r.iteration_time_s > 0
    # Round trip: the spec written back is the same profile.
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    assert load_cluster(str(again)).efficiency == spec.efficiency


def eff_link(profile):
    return profile["intra_node"]["bandwidth_GB_per_s"]["value"]


def test_partial_run_is_readable(tmp_path):
    run = make_run_dir(tmp_path, with_compute=False)
    (run / "compute").mkdir()
    (run / "compute" / "rank1.jsonl").write_text(json.dumps(dict(HEADER, rank=1)) + '\n{"type": "measu')
    st = load_stage(run, "compute")
    assert not st.done and st.ranks == [1] and st.n_measured(1) == 0


def test_interference_and_collective_factors_change_predictions(tmp_path):
    # Without size regimes (null drops the base's), so that the all_gather factor applies.
    base = {"extends": "cpu-local", "name": "x"}
    p1, p0 = tmp_path / "o1.yaml", tmp_path / "o0.yaml"
    for p, o in ((p1, 0.0), (p0, 1.0)):
        d = dict(
            base,
            efficiency={
                "comm_compute_interference": {"value": o, "kind": "assumed", "source": "test"},
                "collective_regimes_intra": None,
                "collective_bandwidth_factor_all_gather": {"value": 0.25, "kind": "assumed", "source": "test"},
            },
        )
        p.write_text(yaml.safe_dump(d))
    kw = dict(model="resnet18", strategy="ddp", gpus=2, dataset="cifar10")
    r1, r0 = predict(cluster=str(p1), **kw), predict(cluster=str(p0), **kw)
    assert r0.iteration_time_s > r1.iteration_time_s
    fast = tmp_path / "fast.yaml"
    fast.write_text(
        yaml.safe_dump(
            dict(
                base,
                efficiency={
                    "collective_regimes_intra": None,
                    "collective_bandwidth_factor_all_gather": {"value": 1.0, "kind": "assumed", "source": "test"},
                },
            )
        )
    )
    f_slow = predict(cluster=str(p1), model="resnet18", strategy="fsdp", gpus=2, dataset="cifar10")
    f_base = predict(cluster=str(fast), model="resnet18", strategy="fsdp", gpus=2, dataset="cifar10")
    assert f_slow.comm_time_s > f_base.comm_time_s
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            dict(base, efficiency={"comm_compute_interference": {"value": -1, "kind": "assumed", "source": "test"}})
        )
    )
    with pytest.raises(Exception, match="comm_compute_interference"):
        load_cluster(str(bad))


def test_a_collectives_only_run_keeps_the_other_stages_of_the_base(tmp_path, monkeypatch):
    """`simdl calibrate --stages collectives`: the collective section is refitted, what the
    other stages measure (and their fit records) stays the base profile's, and says so."""
    from simdl.calibrate import profile as P
    from simdl.cluster.spec import raw_preset

    run = make_run_dir(tmp_path, with_compute=False)
    base = raw_preset("cpu-local")
    base["calibration"] = {
        "provenance": {"date": "2026-01-01", "devices": ["cpu: older"]},
        "compute": {"params": {"matmul": 0.5}},
        "strategy_fit": {"x": 1},
    }
    monkeypatch.setattr(P, "base_preset_for", lambda gpu: base)
    settings = make_settings(nproc_per_node=2, quick=False, time_budget=None, output=None, stages=("collectives",))
    profile, _ = build_profile(run, settings, name="cpu-local")
    eff = profile["efficiency"]
    for key in ("matmul", "memory_bandwidth", "comm_compute_interference", "matmul_call_overhead_us"):
        assert eff[key] == base["efficiency"][key]
    assert profile["intra_node"]["latency_us"] == base["intra_node"]["latency_us"]  # the ps stage measures it
    assert profile["ps_servers"] == base["ps_servers"]
    assert profile["strategies"] == base["strategies"]  # FSDP's unit overhead, a strategies-stage fit
    assert "collective_regimes_intra" in eff and "synthetic" not in eff["collective_regimes_intra"]["source"]
    cal = profile["calibration"]
    assert cal["compute"] == {"params": {"matmul": 0.5}} and cal["strategy_fit"] == {"x": 1}
    assert cal["kept_from_base"]["stages"] == ["compute", "strategies", "ps"]
    assert cal["kept_from_base"]["provenance"]["devices"] == ["cpu: older"]
    assert cal["provenance"]["host"] == ["testhost"]  # the collectives come from this run
    assert "kept from the base profile" in profile["notes"] and "cpu: older" in profile["notes"]
    # Refitting again on top of that profile keeps pointing at the run the values came from.
    monkeypatch.setattr(P, "base_preset_for", lambda gpu: profile)
    again, _ = build_profile(run, settings, name="cpu-local")
    assert again["calibration"]["kept_from_base"]["provenance"]["devices"] == ["cpu: older"]


def test_compute_jitter_is_measured_from_the_local_steps_of_the_strategy_stage(tmp_path):
    import numpy as np

    run = make_run_dir(tmp_path)
    rng = np.random.default_rng(0)
    sigma = 0.08
    for r in (0, 1):
        recs = []
        for model, t in (("resnet18", 0.12 * (1 + 0.05 * r)), ("convnext_tiny", 0.35)):
            steps = (t * rng.lognormal(0.0, sigma, 200)).tolist()
            recs.append(
                {
                    "type": "measurement",
                    "key": f"local/{model}/32",
                    "kind": "strategy",
                    "variant": "local",
                    "model": model,
                    "dataset": "cifar10",
                    "batch": 32,
                    "iters": 200,
                    "warmup": 3,
                    "step_times_s": steps,
                    "step_s": float(np.median(steps)),
                    "peak_bytes": 1,
                }
            )
        _write(run / "strategies", r, recs)
    settings = make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None)
    profile, report = build_profile(run, settings, name="synthetic")
    cj = profile["efficiency"]["compute_jitter"]
    assert cj["kind"] == "calibrated" and "4 rank x model series (800 steps" in cj["source"]
    # Each series about its own mean: the ranks' and models' different speeds are not spread.
    assert cj["value"] == pytest.approx(sigma, rel=0.1)
    spec = load_cluster(str(write_profile(profile, tmp_path / "j.yaml")))
    assert spec.efficiency.compute_jitter.value == cj["value"]


def test_the_launch_microbenchmark_fixes_the_per_kernel_cost_of_the_roofline_fit(tmp_path):
    run = make_run_dir(tmp_path)
    tiny = {
        "type": "measurement",
        "key": "micro/tiny/add16",
        "kind": "micro",
        "op_class": "launch",
        "flops": 0.0,
        "bytes": 0.0,
    }
    for r, t in ((0, 5e-6), (1, 7e-6)):  # median over ranks: 6 us, the synthetic rows' true value
        with open(run / "compute" / f"rank{r}.jsonl", "a") as f:
            f.write(json.dumps(dict(tiny, time_s=t)) + "\n")
    settings = make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None)
    profile, report = build_profile(run, settings, name="synthetic")
    eff = profile["efficiency"]
    assert eff["kernel_launch_us"]["kind"] == "measured"
    assert eff["kernel_launch_us"]["value"] == pytest.approx(6.0)
    assert "tiny-op microbenchmark" in eff["kernel_launch_us"]["source"]
    assert eff["matmul"]["value"] == pytest.approx(TRUE["e_m"], rel=0.02)
    assert report["compute"]["held_out"]["steps"]["max_abs_rel_error"] < 0.01


def test_a_stage_measured_again_later_is_dated_on_its_own_in_the_sources(tmp_path):
    run = make_run_dir(tmp_path)
    for r in (0, 1):  # the collectives stage measured again a day later (simdl calibrate --resume)
        f = run / "collectives" / f"rank{r}.jsonl"
        f.write_text(f.read_text().replace(HEADER["date"], "2026-01-02T09:00:00+00:00", 1))
    settings = make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None)
    profile, _ = build_profile(run, settings, name="synthetic")
    prov = profile["calibration"]["provenance"]
    assert prov["stage_dates"]["collectives"] == "2026-01-02T09:00:00+00:00"
    assert prov["stage_dates"]["compute"] == HEADER["date"] == prov["date"]  # the earliest
    src = profile["efficiency"]["matmul"]["source"]
    assert "collectives 2026-01-02T09:00:00+00:00" in src and f"compute {HEADER['date']}" in src


def test_how_busy_the_machine_was_is_measured_not_read_off_the_load_average(tmp_path):
    """The 1-min load average lags: a quiet machine a minute after a job stopped read 1.43
    (2026-11-29). Where the run measured others' CPU (simdl.calibrate.host_load), that decides;
    each stage's share lands in the provenance and, when busy, in the notes."""
    run = make_run_dir(tmp_path)
    settings = make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None)
    settings["loadavg_before"] = [
        {
            "date": "2026-01-01",
            "loadavg": [1.43, 0.46, 0.17],
            "host_cpu": {"others_cores": 0.03, "busiest": [], "quiet": True},
        }
    ]
    (run / "compute" / "host_cpu.json").write_text(json.dumps([{"others_cores": 0.9}, {"others_cores": 0.01}]))
    (run / "collectives" / "host_cpu.json").write_text(json.dumps([{"others_cores": 0.6}]))
    profile, _ = build_profile(run, settings, name="synthetic")
    prov = profile["calibration"]["provenance"]
    assert prov["machine_busy"] is False  # the load average alone would have said busy
    assert prov["others_cores_by_stage"] == {"collectives": 0.6, "compute": 0.01}  # the last attempt
    notes = profile["notes"]
    assert "otherwise idle when calibration started: other processes used 0.03 cores" in notes
    assert "0.60 cores on average during the collectives stage" in notes and "compute stage" not in notes
    settings["loadavg_before"][0]["host_cpu"]["others_cores"] = 0.97
    profile, _ = build_profile(run, settings, name="synthetic")
    assert profile["calibration"]["provenance"]["machine_busy"] is True
    assert "busy when calibration started: other processes used 0.97 cores" in profile["notes"]
    # runs from before the measurement keep the load-average rule
    del settings["loadavg_before"][0]["host_cpu"]
    settings["loadavg_before"][0]["loadavg"] = [0.2, 0.1, 0.1]
    profile, _ = build_profile(run, settings, name="synthetic")
    assert profile["calibration"]["provenance"]["machine_busy"] is False


def test_a_two_rank_rpc_calibration_records_that_the_server_side_was_not_measured(tmp_path):
    # One server and one worker: the "every worker at once" records are one worker again, so
    # the profile takes the worker's link for the server side and says so, in prose and as data.
    run = make_run_dir(tmp_path)
    lat, bw = 900e-6, 3.0e9
    sizes = [2**20 * 4**i for i in range(5)]
    rpc = [
        {
            "type": "measurement",
            "key": f"rpc_{kind}/{m}",
            "kind": f"ps_rpc_{kind}",
            "bytes": m,
            "push_s": [lat + m / bw] * 3,
            "pull_s": [lat + m / bw] * 3,
        }
        for kind in ("alone", "together")
        for m in sizes
    ]
    stage = load_stage(run, "ps")
    for rank, role in ((0, "server"), (1, "worker")):
        old = list(stage.measurements[rank].values())
        _write(run / "ps", rank, old + [dict(r, role=role) for r in rpc])
    profile, report = build_profile(
        run, make_settings(nproc_per_node=2, quick=True, time_budget=10, output=None), name="synthetic"
    )
    cal = profile["calibration"]["ps"]
    assert cal["transport"] == "rpc" and cal["rpc_workers"] == [1] and cal["server_side_measured"] is False
    link = profile["ps_servers"]
    assert link["nic_Gb_per_s"]["value"] == link["worker_link_Gb_per_s"]["value"]
    assert link["worker_link_Gb_per_s"]["value"] == pytest.approx(bw * 8 / 1e9, rel=0.1)
    assert "not measured" in link["nic_Gb_per_s"]["source"]
