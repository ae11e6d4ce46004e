"""Answers that must not be silently wrong: what a prediction does with an input that means
less, or other, than it seems (a global batch larger than the data set, a precision the GPU
has no faster path for, CPU offload, SSP with bound 0, where the parameter servers run)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import simdl
from simdl.cli import main
from simdl.errors import SimdlError


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------ epochs and samples


def test_an_epoch_shorter_than_a_step_counts_the_samples_it_holds():
    """2048 ranks x batch 64 on CIFAR-10's 50,000 samples: DistributedSampler gives each rank
    ceil(50000 / 2048) = 25 samples, so one step of 51,200 samples per epoch, not 131,072."""
    for engine in ("analytic", "sim"):
        r = simdl.predict("vgg16", "ddp", 2048, cluster="dgx-a100", batch_size=64, engine=engine)
        assert r.iterations_per_epoch == 1
        assert r.config["epoch_samples"] == 25 * 2048
        assert r.throughput_samples_per_s == pytest.approx(25 * 2048 / r.iteration_time_s)
        assert any("shorter than one step" in n and "25 samples" in n for n in r.notes)


def test_a_normal_epoch_keeps_the_full_step_throughput_and_the_sampler_count():
    r = simdl.predict("resnet18", "ddp", 4, batch_size=32, train_samples=1001)
    # ceil(1001 / 4) = 251 per rank -> 8 steps of 32 (the last one partial), 1004 samples
    assert r.iterations_per_epoch == 8 and r.config["epoch_samples"] == 1004
    assert r.throughput_samples_per_s == pytest.approx(4 * 32 / r.iteration_time_s)
    assert not any("shorter than one step" in n for n in r.notes)


@pytest.mark.parametrize(
    "n, world, batch, accum", [(50000, 2048, 64, 1), (1001, 4, 32, 1), (997, 3, 7, 5), (10, 16, 2, 2), (12, 3, 4, 1)]
)
def test_steps_per_epoch_are_what_a_sampler_and_loader_yield(n, world, batch, accum):
    from simdl.workload.epoch import epoch_counts

    c = epoch_counts(n, world, batch, accum)
    # Count it the slow way: pad like DistributedSampler, cut like DataLoader(drop_last=False),
    # one optimizer step per `accum` batches and one after the last.
    per_rank = len(range(0, n + (-n) % world, world))
    batches = len(range(0, per_rank, batch))
    assert c.samples_per_rank == per_rank and c.steps == len(range(0, batches, accum))
    assert c.steps == math.ceil(n / (world * batch * accum))  # what both engines count


# ------------------------------------------------------------------ non-finite numbers


def test_json_output_never_holds_nan():
    from simdl.jsonout import dumps

    with pytest.raises(SimdlError, match=r"non-finite number at a\.b\[1\]"):
        dumps({"a": {"b": [1.0, float("nan")]}})
    r = simdl.predict("resnet18", "ddp", 2)
    bad = dataclasses.replace(r, total_time_s=float("inf"))
    with pytest.raises(SimdlError, match="total_time_s"):
        bad.to_json()
    _strict_json(r.to_json())
    with pytest.raises(SimdlError, match="finite"):
        simdl.predict("resnet18", "ddp", 2, epochs=float("nan"))
    with pytest.raises(SimdlError, match="--bucket-cap-mb -25"):
        simdl.predict("resnet18", "ddp", 2, bucket_cap_mb=-25)


# ------------------------------------------------------------------ parameter servers


def test_ps_servers_beyond_the_clusters_nodes_are_refused_by_both_engines_before_they_run():
    for engine in ("analytic", "sim"):
        for n in (2, 10**6):
            with pytest.raises(SimdlError, match=rf"--ps-servers {n}: cluster 'a10g-ps' has 1 parameter-server"):
                simdl.predict("resnet50", "ps-sync", 4, cluster="a10g-ps", ps_servers=n, engine=engine)
    for bad in ("2", 0, 1.5, True):
        with pytest.raises(SimdlError, match="--ps-servers .*accepted: an integer from 1 to 1"):
            simdl.predict("resnet50", "ps-sync", 4, cluster="a10g-ps", ps_servers=bad)


def test_a_prediction_says_where_its_parameter_servers_run():
    r = simdl.predict("resnet50", "ps-sync", 4, cluster="a10g-ps")
    assert r.config["ps_placement"] == "dedicated" and "ps_placement" in r.config["assumed"]
    r = simdl.predict("resnet50", "ps-sync", 4, cluster="a10g-ps", ps_placement="dedicated")
    assert r.config["ps_placement"] == "dedicated" and "ps_placement" not in r.config["assumed"]
    with pytest.raises(SimdlError, match="--ps-placement colocated"):
        simdl.predict("resnet50", "ps-sync", 16, cluster="dgx-a100")
    with pytest.raises(SimdlError, match="strategy 'ddp' does not take it"):
        simdl.predict("resnet50", "ddp", 4, ps_placement="colocated")


def test_colocated_servers_are_priced_on_the_worker_nodes_nic_in_both_engines():
    from simdl.explore import derive_cluster

    kw = dict(model="resnet50", strategy="ps-sync", gpus=16, ps_placement="colocated")
    steps = {}
    for engine in ("analytic", "sim"):
        one = simdl.predict(cluster="dgx-a100", engine=engine, **kw)
        two = simdl.predict(cluster="dgx-a100", engine=engine, ps_servers=2, **kw)
        slow = simdl.predict(cluster=derive_cluster("dgx-a100", nic_Gb_per_s=25), engine=engine, **kw)
        assert one.config["ps_placement"] == "colocated"
        assert any("PS colocated on worker node(s)" in n and "1600 Gb/s" in n for n in one.notes)
        assert two.iteration_time_s < one.iteration_time_s  # two shards, two nodes' NICs
        # 8 x 25 Gb/s instead of 8 x 200: the 16 pushes and 16 pulls through the server's NICs
        # (one worker's push: comm_bytes_per_iteration) take that much longer
        through = 16 * one.comm_bytes_per_iteration
        expected = 2 * through * (1 / (8 * 25e9 / 8) - 1 / (8 * 200e9 / 8))
        assert slow.iteration_time_s - one.iteration_time_s == pytest.approx(expected, rel=0.35)
        steps[engine] = one.iteration_time_s
        with pytest.raises(SimdlError, match="--ps-servers 3: the run has 2 worker node"):
            simdl.predict(cluster="dgx-a100", engine=engine, ps_servers=3, **kw)
    assert steps["sim"] == pytest.approx(steps["analytic"], rel=0.05)


def test_the_analytic_engine_reports_only_the_staleness_it_models(capsys):
    r = simdl.predict("resnet50", "ps-async", 4, cluster="a10g-ps")
    s = r.staleness
    assert s.mean > 0 and s.p50 is None and s.p99 is None and s.max is None
    assert main(["predict", "--model", "resnet50", "--strategy", "ps-async", "--cluster", "a10g-ps"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("staleness"))
    assert "models the mean only" in line and "p99" not in line
    # the barrier of ps-ssp bound 0: the j-th of N updates has missed j - 1: uniform 0..N-1
    b = simdl.predict("resnet50", "ps-ssp", 4, cluster="a10g-ps", staleness_bound=0).staleness
    assert (b.mean, b.p50, b.max) == (1.5, 1.5, 3.0)
    sim = simdl.predict("resnet50", "ps-async", 4, cluster="a10g-ps", engine="sim").staleness
    assert sim.p50 is not None and sim.max >= sim.mean


def test_ssp_bound_zero_says_why_it_differs_from_ps_sync_in_both_engines():
    for engine in ("analytic", "sim"):
        sync = simdl.predict("resnet50", "ps-sync", 4, cluster="a10g-ps", engine=engine)
        ssp0 = simdl.predict("resnet50", "ps-ssp", 4, cluster="a10g-ps", staleness_bound=0, engine=engine)
        assert ssp0.iteration_time_s != pytest.approx(sync.iteration_time_s, rel=0.01)
        note = next(n for n in ssp0.notes if n.startswith("ps-ssp with staleness bound 0"))
        assert "sums the N gradients and applies one update" in note
        assert ("overlap" in note) == (engine == "sim")
        assert not any("staleness bound 0" in n for n in sync.notes)


# ------------------------------------------------------------------ precision and offload


def test_a_precision_without_a_faster_path_says_so():
    r = simdl.predict("resnet50", "ddp", 8, cluster="v100-dgx1", precision="tf32")
    fp32 = simdl.predict("resnet50", "ddp", 8, cluster="v100-dgx1")
    assert any(n.startswith("--precision tf32 on V100-SXM2: no faster tf32 path than fp32") for n in r.notes)
    assert r.compute_time_s == pytest.approx(fp32.compute_time_s)
    assert any(
        "--precision bf16 on V100-SXM2" in n
        for n in simdl.predict("resnet50", "ddp", 8, cluster="v100-dgx1", precision="bf16").notes
    )
    assert not any(
        "no faster" in n for n in simdl.predict("resnet50", "ddp", 8, cluster="dgx-a100", precision="tf32").notes
    )


def test_cpu_offload_reports_host_memory_and_what_the_step_leaves_out():
    from simdl.units import format_bytes

    r = simdl.predict("vgg16", "fsdp", 4, cpu_offload=True, optimizer="adam")
    note = next(n for n in r.notes if n.startswith("CPU offload: host memory"))
    from simdl.workload.library import load_workload

    params = load_workload("vgg16", dataset="cifar10", input_shape=(3, 32, 32), num_classes=10).param_bytes
    per_rank = params / 4 * (2 + 2)  # sharded fp32 params + grads + Adam's two states, 4 shards
    assert format_bytes(per_rank) in note and "does not include the host-device copies" in note
    assert not any("CPU offload" in n for n in simdl.predict("vgg16", "fsdp", 4).notes)


# ------------------------------------------------------------------ band, help, version


def test_a_calibrated_profile_without_a_band_says_why():
    from simdl.cluster import load_cluster

    spec = load_cluster("lab/profiles/cpu-xeon-emr-x4.yaml")
    cal = {k: v for k, v in spec.calibration.items() if k != "strategy_fit"}
    r = simdl.predict("resnet18", "ddp", 2, cluster=dataclasses.replace(spec, calibration=cal))
    assert r.iteration_time_band_s is None
    assert r.config["iteration_time_band"].startswith("none: the profile's calibration has no strategy-step fit")
    one = dict(spec.calibration, strategy_fit={"points": [{"model": "resnet18"}], "held_out": {}})
    r = simdl.predict("resnet18", "ddp", 2, cluster=dataclasses.replace(spec, calibration=one))
    assert "1 model(s): resnet18" in r.config["iteration_time_band"]
    assert (
        simdl.predict("resnet18", "ddp", 2, cluster="lab/profiles/cpu-xeon-emr-x4.yaml").iteration_time_band_s
        is not None
    )


def test_version_and_grouped_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"simdl {simdl.__version__}"
    assert main(["predict", "--help"]) == 0
    out = capsys.readouterr().out
    heads = [h for h in ("workload:", "strategy:", "cluster:", "engine:", "output:") if h in out.splitlines()]
    assert heads == ["workload:", "strategy:", "cluster:", "engine:", "output:"]
    assert out.count("  simdl predict --model") == 2  # two examples
    assert (
        "--strategy {ddp,fsdp,ps-sync,ps-async,ps-ssp,zero0,zero1,zero2,zero3}" in out
        and "--ps-placement {dedicated,colocated}" in out
    )


def test_validate_is_packaged_so_python_m_validate_run_works_anywhere():
    """pyproject's package list holds validate, so an installed simdl has validate.run."""
    from pathlib import Path

    import tomllib
    from setuptools import find_packages

    root = Path(__file__).resolve().parent.parent
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = find_packages(str(root), include=cfg["include"])
    assert "validate" in found and "simdl" in found and not any(p.startswith("tests") for p in found)


@pytest.mark.torch
def test_a_model_file_is_traced_again_when_it_changes(tmp_path, monkeypatch):
    """--model ./net.py:make is cached by the file's content: an edited file, or another
    folder's net.py, is never answered with the table of a different model."""
    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    src = (
        "def make(num_classes=10):\n    from torch import nn\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, {h}), nn.Linear({h}, num_classes))\n"
    )
    (tmp_path / "net.py").write_text(src.format(h=64))
    small = simdl.predict("./net.py:make", "ddp", 2)
    (tmp_path / "net.py").write_text(src.format(h=4096))
    big = simdl.predict("./net.py:make", "ddp", 2)
    assert big.memory_breakdown_bytes["params"] > 20 * small.memory_breakdown_bytes["params"]
    assert len(list((tmp_path / "cache").iterdir())) == 2
