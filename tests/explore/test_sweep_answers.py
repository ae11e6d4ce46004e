"""A sweep answers what one-by-one ``simdl.predict`` answers, and runs on a local Dask cluster."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import simdl
from simdl.explore.grid import Grid

ROOT = Path(__file__).resolve().parents[2]
AXES = dict(
    model=["resnet50", "vgg16", "vit_b_16"],
    strategy=["ddp", "fsdp-full", "fsdp-grad_op", "fsdp-hybrid"],
    gpus=[1, 4, 8, 16, 64, 256],
    batch_size=[16, 64],
    nic_Gb_per_s=[25, 200, 800],
    precision=["fp32", "bf16"],
    cluster="dgx-a100",
)
FIELDS = (
    "iteration_time_s",
    "total_time_s",
    "throughput_samples_per_s",
    "peak_memory_bytes",
    "gpu_utilization",
    "compute_time_s",
    "comm_time_s",
    "exposed_comm_time_s",
    "comm_bytes_per_iteration",
    "fits_in_memory",
)
# Run in a fresh process: predictions there share no cache with the sweep's.
ONE_BY_ONE = """
import json, sys
import simdl
from simdl.explore import derive_cluster
from simdl.explore.grid import to_call
out = []
for p in json.load(sys.stdin):
    kwargs, over = to_call(p)
    kwargs["cluster"] = derive_cluster(kwargs["cluster"], **over)
    r = simdl.predict(**kwargs)
    out.append({f: getattr(r, f) for f in %r})
print(json.dumps(out))
""" % (FIELDS,)


def test_sampled_sweep_rows_equal_one_by_one_predictions():
    points = list(Grid(AXES))
    rows = simdl.sweep(list(points), executor="serial", progress=False, as_frame=False)
    assert len(rows) == len(points) == 864 and not any(r["error"] for r in rows)
    sample = random.Random(50).sample(range(len(points)), 60)
    r = subprocess.run(
        [sys.executable, "-c", ONE_BY_ONE],
        input=json.dumps([points[i] for i in sample]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for i, want in zip(sample, json.loads(r.stdout)):
        got = {f: rows[i][f] for f in FIELDS}
        assert got == want, points[i]  # identical, not approximately equal


def test_sweep_on_a_local_dask_cluster_gives_the_serial_rows():
    distributed = pytest.importorskip("distributed")
    axes = dict(
        model=["resnet18"],
        strategy=["ddp", "fsdp-full"],
        gpus=[1, 8, 16],
        batch_size=[32, 64],
        cluster="dgx-a100",
        nic_Gb_per_s=[100, 400],
    )
    serial = simdl.sweep(executor="serial", progress=False, as_frame=False, **axes)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as lc,
        distributed.Client(lc),
    ):
        rows = simdl.sweep(executor="dask", progress=False, as_frame=False, chunk_size=4, **axes)
    assert rows == serial and len(rows) == 24
