"""The command line: output shape, JSON keys, and one-line errors with exit status 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simdl.cli import main

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[1] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


REQUIRED_JSON = {
    "iteration_time_s",
    "epoch_time_s",
    "total_time_s",
    "throughput_samples_per_s",
    "peak_memory_bytes",
    "memory_breakdown_bytes",
    "fits_in_memory",
    "gpu_utilization",
    "comm_bytes_per_iteration",
    "staleness",
    "config",
}


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_predict_json_has_every_documented_key(capsys):
    code, out, err = run(["predict", "--model", "vgg16", "--strategy", "fsdp", "--gpus", "4", "--json"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert REQUIRED_JSON <= set(d)
    assert set(d["memory_breakdown_bytes"]) == {"params", "grads", "optimizer", "activations", "comm_buffers", "other"}
    # held_pulls / held_wait_s: ps-ssp in the sim engine only (None otherwise; simdl.result.Staleness)
    assert set(d["staleness"]) == {"mean", "p50", "p99", "max", "held_pulls", "held_wait_s"}
    assert d["staleness"]["held_pulls"] is None
    assert 0 <= d["gpu_utilization"] <= 1
    cfg = d["config"]
    for key in (
        "model",
        "strategy",
        "gpus",
        "nodes",
        "cluster",
        "dataset",
        "batch_size",
        "epochs",
        "optimizer",
        "precision",
        "sharding",
        "wrap",
    ):
        assert key in cfg
    assert "batch_size" in cfg["assumed"] and "cluster" in cfg["assumed"]


def test_a_noisy_machines_profile_says_so_in_the_prediction(capsys):
    """cpu-xeon-emr-b's VM measured compute jitter 0.130 (above simdl.calibrate.jitter.NOISY_SIGMA);
    cpu-xeon-emr's 0.013: only the first prediction carries the note, with either engine."""
    for engine in ("analytic", "sim"):
        code, out, err = run(
            [
                "predict",
                "--model",
                "vgg16",
                "--strategy",
                "ddp",
                "--gpus",
                "2",
                "--cluster",
                lab("cpu-xeon-emr-b"),
                "--engine",
                engine,
                "--json",
            ],
            capsys,
        )
        assert code == 0, err
        assert any(
            n.startswith("cluster cpu-xeon-emr-b: this machine's steps wander: compute jitter 0.130")
            for n in json.loads(out)["notes"]
        )
    code, out, err = run(
        ["predict", "--model", "vgg16", "--strategy", "ddp", "--gpus", "2", "--cluster", lab("cpu-xeon-emr"), "--json"],
        capsys,
    )
    assert code == 0, err
    assert not any("wander" in n for n in json.loads(out)["notes"])


def test_predict_human_output_has_units(capsys):
    code, out, _ = run(["predict", "--model", "resnet50", "--strategy", "ddp", "--gpus", "2"], capsys)
    assert code == 0
    assert "iteration" in out and "ms" in out and "GiB" in out and "samples/s" in out


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "vgg61"], "'vgg16'"),
        (["--strategy", "fdsp"], "'fsdp'"),
        (["--gpus", "0"], "--gpus 0"),
        (["--gpus", "-3"], "-3"),
        (["--gpus", "many"], "'many'"),
        (["--gpus", "5", "--nodes", "2"], "5"),
        (["--gpus", "8"], "a100-80gb-nvlink"),  # a one-node preset with 4 GPUs
        (["--dataset", "cifar100"], "cifar10"),
        (["--optimizer", "adagrad"], "adamw"),
        (["--precision", "fp8"], "fp32"),
        (["--sharding", "zero3"], "full"),
        (["--cluster", "dgx-a1000"], "dgx-a100"),
        (["--batch-size", "0"], "batch size 0"),
        (["--input", "3x32"], "3x32"),
        (["--engine", "magic"], "analytic"),
        (["--strategy", "ps-sync"], "parameter-server"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle, capsys):
    code, out, err = run(["predict", *args], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("simdl: error:", "simdl predict: error:"))
    assert needle in lines[0]
    assert "Traceback" not in err


def test_malformed_cluster_files_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngpu: [unclosed\n")
    code, _, err = run(["predict", "--cluster", str(bad)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    import yaml

    from simdl.cluster.spec import load_cluster

    good = yaml.safe_load(open(load_cluster("dgx-a100").source_path))
    good["intra_node"]["bandwidth_GB_per_s"]["value"] = -5
    neg = tmp_path / "neg.yaml"
    neg.write_text(yaml.safe_dump(good))
    code, _, err = run(["predict", "--cluster", str(neg)], capsys)
    assert code == 2 and "bandwidth" in err and "-5" in err and len(err.strip().splitlines()) == 1


def test_models_and_clusters_listings(capsys):
    code, out, _ = run(["models"], capsys)
    assert code == 0 and "convnext_large" in out and "cifar10" in out
    code, out, _ = run(["clusters"], capsys)
    assert code == 0 and "dgx-a100" in out and "a10g-ps" in out
    code, out, _ = run(["clusters", "show", "a10g-ps"], capsys)
    assert code == 0 and "A10G" in out
    code, _, err = run(["clusters", "show", "nope"], capsys)
    assert code == 2


def test_console_script_runs_without_torch():
    """`simdl predict` on a built-in model must not import torch (nor networkx/matplotlib)."""
    code = (
        "import sys; from simdl.cli import main; rc = main(['predict', '--json']);"
        "bad = [m for m in ('torch', 'networkx', 'matplotlib') if m in sys.modules];"
        "assert rc == 0 and not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)


@pytest.mark.parametrize("bad", ["-0.5", "nan", "inf", "soon"])
def test_calibrate_bad_wait_quiet_is_one_line_exit_2(bad, capsys):
    code, out, err = run(["calibrate", "--nproc-per-node", "2", "--wait-quiet", bad], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and repr(bad) in lines[0] and "-1 (do not measure)" in lines[0], err
