"""The quick CUDA calibration of :mod:`validate.gpu_check`: ``simdl calibrate`` on one GPU.

``simdl calibrate --nproc-per-node 1 --quick --stages compute --compute-models SPEC``: the
compute stage of ``calibration/compute.py`` under torchrun (NCCL on a GPU, gloo on a CPU,
chosen by the script at run time), two models' per-row times (the roofline fitted on the
first, the second held out) and the GEMM / convolution / elementwise / streaming
microbenchmarks, then the fit. Its profile is written as ``DIR/calibration-profile.yaml``
and its run directory (rank logs, fit report) as ``DIR/calibration-run.tar.gz``. The
command is killed, with its ranks, when its share of the budget runs out; that is recorded
in ``DIR/run.json`` (``calibration``) with the log's last lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# Of the calibration's share: torchrun's start, imports and the fit; the rest is measuring.
OVERHEAD_S = 25.0
# simdl.calibrate.run.BUDGET_SHARE["compute"]: the compute stage's share of --time-budget.
COMPUTE_SHARE = 0.40


def command(models: str, budget_s: float, run_root: Path, output: Path, gpu_file: str | None) -> list[str]:
    measure_s = max(budget_s - OVERHEAD_S, 5.0)
    cmd = [
        sys.executable,
        "-m",
        "simdl",
        "calibrate",
        "--nproc-per-node",
        "1",
        "--quick",
        "--stages",
        "compute",
        "--compute-models",
        models,
        "--time-budget",
        f"{measure_s / COMPUTE_SHARE:.1f}",
        "--run-root",
        str(run_root),
        "-o",
        str(output),
        "--wait-quiet",
        "-1",
    ]
    return cmd + (["--gpu", gpu_file] if gpu_file else [])


def run(out: Path, work: Path, models: str, budget_s: float, gpu_file: str | None = None) -> dict:
    """Run it within ``budget_s`` seconds; returns (and writes) what happened."""
    from simdl.calibrate.processes import kill_tree

    status: dict = {"models": models, "budget_s": budget_s}
    if budget_s < OVERHEAD_S + 5.0:
        status.update(status="skipped", reason=f"{budget_s:.0f} s left, under the {OVERHEAD_S + 5:.0f} s it needs")
        return _write(out, status)
    root = work / "calibrate"
    root.mkdir(parents=True, exist_ok=True)
    before = set(root.iterdir())
    cmd = command(models, budget_s, root, out / "calibration-profile.yaml", gpu_file)
    status["command"] = " ".join(cmd)
    t0 = time.time()
    log_path = work / "calibrate.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        try:
            code = proc.wait(timeout=budget_s)
            status["status"] = "ok" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            kill_tree(proc, grace_s=3.0)
            status["status"] = f"stopped: killed after its {budget_s:.0f} s"
    status["wall_s"] = round(time.time() - t0, 1)
    status["log_tail"] = log_path.read_text(errors="replace").splitlines()[-15:]
    runs = sorted(set(root.iterdir()) - before)
    if runs:
        with tarfile.open(out / "calibration-run.tar.gz", "w:gz") as tar:
            tar.add(runs[-1], arcname=runs[-1].name)
        status["run_dir"] = runs[-1].name
    return _write(out, status)


def _write(out: Path, status: dict) -> dict:
    from .gpu_worker import update_run_info

    update_run_info(out, calibration=status)
    print(
        f"calibration: {status['status']}" + (f" ({status.get('reason')})" if status.get("reason") else ""), flush=True
    )
    return status
