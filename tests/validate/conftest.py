"""Synthetic validation results: the shape validate.run writes, with known errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# validate/ is a top-level folder of the repository, not part of the installed package.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from validate.experiments import experiments  # noqa: E402 (importable only after the sys.path line above)


def synthetic_record(run, step_m=1.0, step_p=1.1, mem_m=100e6, mem_p=97e6, status="ok", stale=(1.5, 1.5)):
    rec = {
        "schema": "simdl-validation/1",
        "run_id": run.run_id,
        "profile": "smoke",
        "spec": run.to_dict(),
        "label": run.label,
        "model_name": run.model_name,
        "oversubscribed": run.oversubscribed,
        "processes": run.processes,
        "cores": 2,
        "cluster_profile": "cpu-local.yaml",
        "cluster_profile_sha256": "0" * 16,
        "status": status,
        "wall_s": 12.0,
        "host": {"hostname": "test", "cpu_cores": 2, "torch": "x", "cuda": False, "python": "3"},
        "predicted": {
            "kwargs": {},
            "analytic": {
                "iteration_time_s": step_p,
                "total_time_s": step_p * 10,
                "peak_tensor_bytes": mem_p,
                "gpu_utilization": 0.8,
                "comm_bytes_per_iteration": 2e6,
                "staleness": {"mean": stale[1], "p50": 1, "p99": 2, "max": 3},
            },
            "sim": {"error": "ImportError: none"},
        },
    }
    if status == "ok":
        rec["measured"] = {
            "step_time_s": {"median": step_m, "p10": step_m * 0.9, "p90": step_m * 1.1, "n": 5},
            "total_time_s": step_m * 11,
            "peak_allocated_bytes": mem_m,
            "busy_fraction": 0.7,
            "comm_sent_bytes_per_step": 2.2e6,
            "test_accuracy": 0.5,
            "steps_per_rank": 8,
            "memory_timeline": [[0.0, mem_m * 0.5], [0.5, mem_m], [1.0, mem_m * 0.6]],
            "data": "generated",
            "epoch_times_s": [step_m * 11],
        }
        if run.is_ps:
            rec["measured"]["staleness"] = {
                "n": 4,
                "mean": stale[0],
                "p50": 1,
                "p99": 2,
                "max": 2,
                "histogram": {"0": 1, "1": 1, "2": 2},
            }
    else:
        rec["error"] = "boom"
    return rec


@pytest.fixture
def results_file(tmp_path):
    runs = experiments("smoke")
    lines = []
    for i, run in enumerate(runs):
        # step errors +10%, -5%, ... memory errors -3%
        lines.append(synthetic_record(run, step_m=1.0 + i, step_p=(1.0 + i) * (1.1 if i % 2 else 0.95)))
    lines.append(synthetic_record(runs[0].__class__(**{**runs[0].to_dict(), "tags": ("failed",)}), status="failed"))
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


@pytest.fixture
def make_record():
    """:func:`synthetic_record`, for tests that build their own records."""
    return synthetic_record
