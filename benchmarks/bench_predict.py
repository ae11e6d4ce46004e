"""How fast is a prediction? Prints figures; asserts nothing (targets live here, not in tests).

1. Whole-process wall time of ``simdl predict`` on a built-in model (goal < 0.5 s),
   the median of several runs, measured from outside the process.
2. Analytic predictions per second in one process over a grid of models, strategies,
   GPU counts and batch sizes (goal > 1,000/s).

Run: ``python benchmarks/bench_predict.py`` (or ``make bench``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time


def cli_wall_time(repeats: int = 7) -> list[float]:
    exe = shutil.which("simdl", path=os.path.dirname(sys.executable)) or shutil.which("simdl")
    cmd = [exe] if exe else [sys.executable, "-m", "simdl"]
    cmd += ["predict", "--model", "vgg16", "--strategy", "fsdp", "--gpus", "4"]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return times


def grid_rate(seconds: float = 5.0) -> tuple[int, float, int]:
    import simdl

    models = ["vgg16", "resnet50", "convnext_large", "vit_b_16", "densenet121", "efficientnet_v2_l"]
    strategies = [("ddp", {}), ("fsdp", {"sharding": "full"}), ("fsdp", {"sharding": "grad_op"}),
                  ("fsdp", {"sharding": "hybrid"}), ("fsdp", {"sharding": "none"})]
    gpus = [1, 2, 4, 8, 16, 64, 256, 1024]
    batches = [16, 32, 64, 128]
    grid = list(itertools.product(models, strategies, gpus, batches))
    # Warm the table cache once per model, as a sweep would.
    for m in models:
        simdl.predict(model=m, strategy="ddp", gpus=1, cluster="dgx-a100")
    # First pass: every config distinct, so plans and row times are computed, not memoised.
    t0 = time.perf_counter()
    for m, (s, kw), g, b in grid:
        simdl.predict(model=m, strategy=s, gpus=g, cluster="dgx-a100", batch_size=b, **kw)
    first = time.perf_counter() - t0
    print(f"analytic predictions, first pass over {len(grid)} distinct configs: {first:.2f} s = "
          f"{len(grid) / first:,.0f} /s (goal > 1,000/s)")
    n = 0
    t0 = time.perf_counter()
    for m, (s, kw), g, b in itertools.cycle(grid):
        simdl.predict(model=m, strategy=s, gpus=g, cluster="dgx-a100", batch_size=b, **kw)
        n += 1
        if n % 100 == 0 and time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    return n, dt, len(grid)


def main() -> None:
    times = cli_wall_time()
    print(f"simdl predict --model vgg16 --strategy fsdp --gpus 4: wall time median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs; goal < 0.5 s)")
    n, dt, size = grid_rate()
    print(f"analytic predictions repeated over the same grid (plans and row times memoised): {n} in {dt:.2f} s = "
          f"{n / dt:,.0f} /s (grid of {size} configs: 6 models x 5 strategies x 8 GPU counts (1-1024) x 4 batches)")


if __name__ == "__main__":
    main()
