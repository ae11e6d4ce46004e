"""How fast is a sweep? Prints figures; asserts nothing (targets live here, not in tests).

A 10,000-configuration analytic grid -- 10 models x 5 strategies x 10 GPU counts (1-1024) x
4 batch sizes x 5 network rates (what-if clusters) on dgx-a100 -- through ``simdl.sweep``
with the default process executor (goal: under 30 s on this 2-core machine), then the same
grid on one worker for comparison.

Run: ``python benchmarks/bench_sweep.py [--jobs N] [--serial]``.
"""

from __future__ import annotations

import argparse
import os
import time


def grid() -> dict:
    return dict(
        model=[
            "vgg16",
            "resnet18",
            "resnet50",
            "densenet121",
            "efficientnet_v2_s",
            "efficientnet_v2_l",
            "convnext_tiny",
            "convnext_large",
            "vit_b_16",
            "mobilenet_v3_large",
        ],
        strategy=["ddp", "fsdp-full", "fsdp-grad_op", "fsdp-hybrid", "fsdp-none"],
        gpus=[1, 2, 4, 8, 16, 32, 64, 128, 512, 1024],
        batch_size=[16, 32, 64, 128],
        nic_Gb_per_s=[25, 100, 200, 400, 800],
        cluster="dgx-a100",
    )


def run(jobs: int | None, executor: str) -> tuple[int, float, int]:
    import simdl

    t0 = time.perf_counter()
    rows = simdl.sweep(jobs=jobs, executor=executor, progress=False, as_frame=False, **grid())
    dt = time.perf_counter() - t0
    errors = sum(1 for r in rows if r.get("error"))
    return len(rows), dt, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    ap.add_argument("--serial", action="store_true", help="also time the grid on one worker")
    a = ap.parse_args()
    t0 = time.perf_counter()
    import simdl  # noqa: F401  (import time is part of what a user waits for, reported apart)

    t_import = time.perf_counter() - t0
    jobs = a.jobs or os.cpu_count() or 1
    n, dt, errors = run(jobs, "process")
    print(
        f"simdl.sweep, {n:,} analytic configurations, process executor with {jobs} worker processes: "
        f"{dt:.2f} s = {n / dt:,.0f} configs/s ({errors} rows with an error; goal < 30 s; import {t_import:.2f} s)"
    )
    if a.serial:
        n, dt, _ = run(1, "serial")
        print(f"same grid in one process (serial executor): {dt:.2f} s = {n / dt:,.0f} configs/s")


if __name__ == "__main__":
    main()
