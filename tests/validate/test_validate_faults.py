"""Minor page faults per step (validate/measure.py StepTimer, validate/run.py merge_ranks)."""

from __future__ import annotations

import json
import mmap

import pytest

from validate import measure
from validate import run as vrun
from validate.experiments import RunSpec


@pytest.mark.skipif(measure.minor_faults() == 0, reason="the platform does not count minor faults")
def test_a_step_that_touches_fresh_memory_counts_its_pages():
    # Fresh pages from an anonymous mapping of our own, not from torch/glibc: after other
    # tests, glibc may serve even a 64 MiB request from heap memory it already faulted in
    # (CI saw 0 bytes), which is the history dependence the timer exists to expose.
    nbytes = 64 * 1024 * 1024
    region = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        # with transparent huge pages one fault maps 2 MiB and ru_minflt counts it once
        region.madvise(mmap.MADV_NOHUGEPAGE)
    timer = measure.StepTimer()
    timer.start()
    for offset in range(0, nbytes, measure.PAGE_BYTES):
        region[offset] = 1
    timer.stop()
    timer.start()
    for offset in range(0, nbytes, measure.PAGE_BYTES):
        region[offset] = 2
    timer.stop()  # the same pages again: nothing new
    region.close()
    assert timer.fault_bytes[0] >= 0.9 * nbytes
    assert timer.fault_bytes[1] < 0.1 * nbytes


def _rank(rank, faults):
    return {
        "rank": rank,
        "steady_step_times_s": [1.0, 1.1, 1.2],
        "epoch_times_s": [4.0],
        "train_time_s": 4.0,
        "steps": 4,
        "peak_allocated_bytes": 1e6,
        "peak_rss_bytes": 2e6,
        "busy_fraction": 0.5,
        "comm_payload_bytes_per_step": 8.0,
        "comm_sent_bytes_per_step": 8.0,
        "collectives_per_step": 1,
        "test_accuracy": 0.1,
        "memory_timeline": [],
        **({"steady_fault_bytes": faults} if faults else {}),
    }


def test_the_run_record_keeps_each_ranks_median_faults(tmp_path):
    run = RunSpec("exp1", "vgg16", "cifar10", "ddp", 2, 8, 1, 64, 16)
    (tmp_path / "rank0.json").write_text(json.dumps(_rank(0, [4096.0, 0.0, 8192.0])))
    (tmp_path / "rank1.json").write_text(json.dumps(_rank(1, [0.0, 0.0, 0.0])))
    assert vrun.merge_ranks(run, tmp_path)["page_fault_bytes_per_step_per_rank"] == [4096.0, 0.0]
    # a run made before faults were recorded has no such figure, rather than a made-up one
    (tmp_path / "rank1.json").write_text(json.dumps(_rank(1, None)))
    assert "page_fault_bytes_per_step_per_rank" not in vrun.merge_ranks(run, tmp_path)
