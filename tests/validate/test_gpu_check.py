"""validate.gpu_check: its CPU form end to end, its time budget, and the report's GPU section."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simdl.calibrate.records import read_jsonl
from simdl.report.gpu import gpu_section, read_kernels
from simdl.report.kernel_classes import kernel_class, kernel_groups, row_groups

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _run(out: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))
    t0 = time.time()
    p = subprocess.run(
        [sys.executable, "-m", "validate.gpu_check", "-o", str(out), "--cpu", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p, time.time() - t0


def _predictions_before_measurements(out: Path) -> None:
    preds = read_jsonl(out / "predictions.jsonl")
    results = read_jsonl(out / "results.jsonl")
    assert {p["run_id"] for p in preds} == {r["run_id"] for r in results}
    last_prediction = max(p["t"] for p in preds)
    firsts = [r["measured"]["first_step_at"] for r in results if r["status"] == "ok"]
    assert firsts and last_prediction < min(firsts)
    for r in results:  # each record carries its own prediction and when it was made
        assert r["predicted_at"] is not None and r["predicted"]["analytic"]["iteration_time_s"] > 0


@pytest.mark.torch
@pytest.mark.torchrun
@pytest.mark.slow
def test_cpu_form_end_to_end(tmp_path):
    """CI's form: the default CPU settings, calibration included, then ``simdl report``."""
    pytest.importorskip("torch")
    out = tmp_path / "gpu"
    p, wall = _run(out)
    assert p.returncode == 0, p.stderr[-3000:]
    files = sorted(x.name for x in out.iterdir())
    assert all((out / f).is_file() for f in files) and len(files) <= 8, files  # what $OUT brings back
    _predictions_before_measurements(out)
    results = read_jsonl(out / "results.jsonl")
    assert len(results) == 8
    ok = [r for r in results if r["status"] == "ok"]
    assert len(ok) >= 6, [(r["run_id"], r.get("error")) for r in results]  # a shared host may stop one or two
    kernels = read_kernels(out / "kernels.jsonl.gz")
    for r in ok:
        m = r["measured"]
        assert m["step_time_s"]["median"] > 0 and len(m["steady_step_times_s"]) == 2
        assert kernels[r["run_id"]]["kernels"] and r["predicted"]["analytic"]["by_op_class_s"]
    info = json.loads((out / "run.json").read_text())
    assert info["env"]["device"] == "cpu" and info["calibration"]["status"] == "ok"
    assert (out / "calibration-profile.yaml").is_file() and (out / "calibration-run.tar.gz").is_file()
    assert "Step time: MAPE" in p.stdout
    md = subprocess.run(
        [sys.executable, "-m", "simdl", "report", str(out / "results.jsonl"), "-o", str(tmp_path / "report")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert md.returncode == 0, md.stderr[-2000:]
    text = (tmp_path / "report" / "README.md").read_text()
    assert "## GPU check" in text and "Time per op class" in text and "| conv |" in text
    print(f"CPU form: {wall:.1f} s wall (host shared)")


@pytest.mark.torch
@pytest.mark.slow
def test_budget_stops_what_cannot_finish(tmp_path):
    """A configuration past its cap stops between steps; one whose step never returns is killed
    with its worker, and a new worker measures the rest; the whole run keeps to its budget."""
    pytest.importorskip("torch")
    out = tmp_path / "gpu"
    budget = 90.0
    p, wall = _run(
        out,
        "--models",
        "gpu_check_models:slow,gpu_check_models:hung,mnist_cnn",
        "--batches",
        "2",
        "--precisions",
        "fp32",
        "--config-cap-s",
        "5",
        "--kill-grace-s",
        "5",
        "--calibrate-s",
        "0",
        "--budget-s",
        str(budget),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert wall < budget + 10
    by_model = {r["model_name"]: r for r in read_jsonl(out / "results.jsonl")}
    slow, hung, ok = by_model["gpu_check_models:slow"], by_model["gpu_check_models:hung"], by_model["mnist_cnn"]
    assert slow["status"] == "stopped" and "ran out after" in slow["error"]
    assert hung["status"] == "stopped" and "did not return" in hung["error"]
    assert ok["status"] == "ok" and ok["measured"]["step_time_s"]["median"] > 0
    _predictions_before_measurements(out)


def test_budget_spent_before_measuring_records_every_configuration(tmp_path):
    """No time left after the predictions: nothing is started, and every configuration says so."""
    out = tmp_path / "gpu"
    p, wall = _run(
        out,
        "--models",
        "mnist_cnn,resnet18",
        "--batches",
        "2,4",
        "--precisions",
        "fp32",
        "--calibrate-s",
        "0",
        "--budget-s",
        "0.5",
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    results = read_jsonl(out / "results.jsonl")
    assert len(results) == 4 and all(r["status"] == "stopped" and "not started" in r["error"] for r in results)
    assert len(read_jsonl(out / "predictions.jsonl")) == 4
    again, _ = _run(out, "--models", "mnist_cnn", "--calibrate-s", "0", timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr


@pytest.mark.parametrize(
    "args, says",
    [
        (("--sizes", "64"), "sizes 224 or 32"),
        (("--steps", "0"), "steps >= 1"),
        (("--engines", "fast"), "--engines 'fast'"),
        (("--cluster", "no-such-preset"), "no-such-preset"),
    ],
)
def test_bad_setting_is_one_line(tmp_path, args, says):
    p, _ = _run(tmp_path / "gpu", *args, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error:") and says in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "gpu").exists()  # nothing written for a run that does not start


def test_presets_from_device_names():
    from validate.gpu_predict import preset_for_device

    assert preset_for_device("NVIDIA H200") == "h200"
    assert preset_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert preset_for_device("NVIDIA H100 80GB HBM3") == "h100-hgx"
    from simdl.errors import SimdlError

    with pytest.raises(SimdlError, match="no cluster preset"):
        preset_for_device("Radeon 7900")


def test_h200_and_h100_pcie_presets():
    from simdl.cluster import load_cluster

    h200, pcie = load_cluster("h200"), load_cluster("h100-pcie")
    assert h200.gpu.name == "H200" and h200.gpu.memory_bandwidth.value == pytest.approx(4.8e12)
    assert h200.gpu.peak("bf16") == pytest.approx(989.4e12) and h200.gpu.peak("fp32") == pytest.approx(67e12)
    assert pcie.gpu.name == "H100-PCIe" and pcie.gpu.memory_bandwidth.value == pytest.approx(2.0e12)
    assert pcie.intra_node.bandwidth.value == pytest.approx(64e9) and pcie.gpu.peak("fp32") == pytest.approx(51e12)


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nchw", "conv"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", "norm"),
        ("void at::native::batch_norm_collect_statistics_kernel<float, float, float, 512>", "norm"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN", "gemm"),
        ("ampere_sgemm_128x64_tn", "gemm"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar",
            "elementwise",
        ),
        ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>", "pool"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>", "softmax"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "reduction"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::TensorListMetadata<3>>",
            "optimizer",
        ),
        ("Memcpy HtoD (Pageable -> Device)", "copy"),
        ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>", "gemm"),
        ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>", "norm"),
        ("void at::native::im2col_kernel<float>", "conv"),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "gemm"),
        ("void cunn_ClassNLLCriterion_updateOutput_kernel<float>", "reduction"),
        ("aten::mkldnn_convolution", "conv"),
        ("aten::addmm", "gemm"),
        ("aten::native_batch_norm", "norm"),
        ("aten::relu_", "elementwise"),
        ("some_unknown_kernel", "other"),
    ],
)
def test_kernel_classes(name, cls):
    assert kernel_class(name) == cls


@pytest.mark.parametrize(
    "name, op, cls",
    [
        ("ampere_sgemm_128x128_nn", "aten::cudnn_convolution", "conv"),  # cuDNN's GEMM-based convolution
        ("ampere_sgemm_128x128_nn", "aten::addmm", "gemm"),
        ("ampere_sgemm_128x128_nn", "", "gemm"),  # no launching op recorded: by the name
        ("cudnn_infer_volta_scudnn_128x64_relu_small_nn_v1", "", "conv"),
        ("void fft2d_r2c_16x16<float>(float2*, float const*, int, int)", "", "conv"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
            "aten::_foreach_add_",
            "optimizer",
        ),
        ("void at::native::reduce_kernel<512, 1>", "aten::native_batch_norm_backward", "norm"),
    ],
)
def test_kernel_classes_by_launching_op(name, op, cls):
    assert kernel_class(name, op) == cls


def test_groups_add_up():
    kernels = [
        ["sm90_xmma_fprop_implicit_gemm", 3, 0.002],
        ["cunn_SoftMaxForward", 1, 0.001],
        ["multi_tensor_apply_kernel", 2, 0.0005],
    ]
    assert kernel_groups(kernels) == pytest.approx({"conv": 0.002, "elementwise": 0.001, "optimizer": 0.0005})
    rows = row_groups({"conv": 1.0, "linear": 0.5, "attention": 0.25, "activation": 0.1, "other": 0.1}, 0.2)
    assert rows == pytest.approx({"conv": 1.0, "gemm": 0.75, "elementwise": 0.2, "optimizer": 0.2})


def test_report_gpu_section_from_synthetic_files(tmp_path):
    """Predicted per-group time against the profiled kernels; a torn last gzip member is dropped."""
    rec = {
        "kind": "gpu_check",
        "run_id": "gpu/resnet18/224px/b32/bf16",
        "status": "ok",
        "_source_file": str(tmp_path / "results.jsonl"),
        "predicted": {
            "analytic": {
                "iteration_time_s": 0.012,
                "peak_tensor_bytes": 2 * 2**30,
                "max_memory_allocated_bytes": None,
                "max_memory_reserved_bytes": None,
                "device_total_bytes": 3 * 2**30,
                "step_split_s": {"optimizer": 0.001},
                "by_op_class_s": {"conv": 0.008, "norm": 0.002, "activation": 0.001},
            }
        },
        "measured": {
            "step_time_s": {"median": 0.010},
            "peak_allocated_bytes": 2.5 * 2**30,
            "max_memory_reserved_bytes": 2.75 * 2**30,
            "device_state": {"used_bytes": 3.5 * 2**30},
        },
    }
    member = (
        json.dumps(
            {
                "run_id": rec["run_id"],
                "source": "CUDA kernels",
                "profiled_step_s": 0.011,
                "kernels": [
                    ["sm90_xmma_fprop_implicit_gemm", 40, 0.006],
                    ["cudnn::bn_fw_tr_1C11_kernel_NCHW", 20, 0.001],
                ],
            }
        )
        + "\n"
    )
    with open(tmp_path / "kernels.jsonl.gz", "wb") as f:
        f.write(gzip.compress(member.encode()))
        f.write(gzip.compress(b'{"run_id": "torn"}\n')[:15])
    assert list(read_kernels(tmp_path / "kernels.jsonl.gz")) == [rec["run_id"]]
    text = "\n".join(gpu_section([rec]))
    assert "+20.0%" in text  # step 12 ms predicted against 10 ms
    assert "| conv | 1 | 0.008 | 0.006 | +33.3% |" in text
    assert "8.00 / 6.00" in text and "-20.0%" in text  # allocated 2 GiB against 2.5
    assert "| resnet18 | +20.0% |" in "\n".join(
        gpu_section(
            [{**rec, "model_name": "resnet18", "spec": {"image_size": 224, "batch_size": 32, "precision": "bf16"}}]
        )
    )


@pytest.mark.torch
@pytest.mark.slow
def test_resume_measures_what_was_stopped(tmp_path):
    """--resume keeps the predictions made before anything ran and measures the stopped ones."""
    pytest.importorskip("torch")
    out = tmp_path / "gpu"
    args = ("--models", "mnist_cnn", "--batches", "2", "--precisions", "fp32", "--calibrate-s", "0")
    first, _ = _run(out, *args, "--budget-s", "0.5", timeout=120)
    assert first.returncode == 0 and read_jsonl(out / "results.jsonl")[0]["status"] == "stopped"
    predicted_at = read_jsonl(out / "predictions.jsonl")[0]["t"]
    again, _ = _run(out, *args, "--resume", "--budget-s", "120")
    assert again.returncode == 0, again.stderr[-3000:]
    from simdl.report.metrics import read_results

    (rec,) = read_results(out / "results.jsonl")
    assert rec["status"] == "ok" and rec["predicted_at"] == predicted_at < rec["measured"]["first_step_at"]
    assert len(read_jsonl(out / "predictions.jsonl")) == 1


def test_driver_queries_through_nvidia_smi(tmp_path, monkeypatch):
    """The parent names the GPU without a CUDA context of its own, and the device's memory and
    clocks are read from nvidia-smi where pynvml is missing (a fake nvidia-smi on PATH here)."""
    from validate.gpu_check import gpu_name_from_driver
    from validate.gpu_device import _smi

    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\ncase \"$*\" in *query-gpu=name*) echo 'NVIDIA H200';;\n"
        "*) echo '1024, 143771, 1980, 3201, 1980, 3201, 120.50, 35, 580.159.03';; esac\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu_name_from_driver() == "NVIDIA H200"
    got = _smi(0)
    assert got["source"] == "nvidia-smi" and got["used_bytes"] == 1024 * 2**20
    assert got["total_bytes"] == 143771 * 2**20 and got["sm_clock_MHz"] == 1980 and got["driver"] == "580.159.03"
    smi.write_text("#!/bin/sh\necho 'garbage'\n")
    assert "unexpected output" in _smi(0)["error"]


def test_launching_op_is_the_one_with_most_of_a_kernels_time():
    from collections import namedtuple

    from validate.gpu_measure import _launching_ops

    K = namedtuple("Kernel", ["name", "device", "duration"])
    E = namedtuple("Event", ["name", "kernels"])
    events = [
        E("aten::cudnn_convolution", [K("sgemm_128", 0, 30.0), K("sgemm_128", 0, 30.0)]),
        E("aten::addmm", [K("sgemm_128", 0, 50.0)]),
        E("aten::relu", [K("relu_k", 0, 2.0)]),
        E("aten::empty", []),
    ]
    assert _launching_ops(events) == {"sgemm_128": "aten::cudnn_convolution", "relu_k": "aten::relu"}


def test_every_default_gpu_configuration_is_predicted_on_the_h200_preset():
    """The GPU plan's 64 configurations all have a prediction (the shipped tables, no torch),
    with the per-class times that the kernel comparison needs."""
    from validate.gpu_check import GPU, plan_configs
    from validate.gpu_predict import cluster_without_loader, predict_config

    configs = plan_configs(GPU)
    assert len(configs) == 8 * 2 * 2 * 2 and len({c["run_id"] for c in configs}) == 64
    cluster = cluster_without_loader("h200")
    for cfg in configs:
        a = predict_config(cfg, cluster)["analytic"]
        assert "error" not in a, (cfg["run_id"], a)
        assert a["iteration_time_s"] > 0 and a["peak_tensor_bytes"] > 0 and a["by_op_class_s"]
        assert a["step_split_s"]["input_stall"] == 0.0  # no DataLoader in the check


def test_a_worker_that_cannot_start_fails_every_configuration(tmp_path):
    """The parent saw a GPU (a fake nvidia-smi) but torch has no CUDA: the worker exits at once,
    and every configuration is recorded failed with the worker's reason, not left out."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200'\n")
    smi.chmod(0o755)
    out = tmp_path / "gpu"
    env = dict(
        os.environ,
        PATH=f"{smi.parent}{os.pathsep}{os.environ['PATH']}",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate.gpu_check",
            "-o",
            str(out),
            "--models",
            "mnist_cnn",
            "--batches",
            "2",
            "--precisions",
            "fp32",
            "--sizes",
            "32",
            "--calibrate-s",
            "0",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (rec,) = read_jsonl(out / "results.jsonl")
    assert rec["status"] == "failed" and "exited with code 3" in rec["error"]
    assert rec["cluster"].startswith("h200")  # predicted for the GPU the driver named
