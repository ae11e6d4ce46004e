"""The DeepSpeed CPU worker trains one ZeRO stage for real (skipped where deepspeed is absent)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.torchrun, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_zero1_trains_on_two_cpu_ranks_and_reports_its_peak(tmp_path):
    spec = {
        "model": "resnet18",
        "dataset": "cifar10",
        "steps": 6,
        "warmup_steps": 1,
        "ds_config": {
            "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 1,
            "steps_per_print": 10**6,
            "zero_optimization": {"stage": 1, "reduce_bucket_size": 10**7},
        },
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(
        os.environ,
        DS_ACCELERATOR="cpu",
        LOCAL_SIZE="2",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "validate.deepspeed_worker",
        "--spec",
        str(tmp_path / "spec.json"),
        "--out",
        str(tmp_path),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    recs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in recs:
        assert r["optimizer_class"] == "DeepSpeedZeroOptimizer" and r["backend"] == "gloo"
        assert len(r["steady_step_times_s"]) == 6 - 1 - 3
        # the 1e7-element fp32 ipg bucket (40 MB) is live at the peak, beside ResNet-18's 45 MB
        assert r["peak_allocated_bytes"] > 4e7 + 4.4e7
