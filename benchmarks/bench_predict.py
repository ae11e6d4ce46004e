"""How fast is a prediction? Prints figures; asserts nothing (targets live here, not in tests).

1. Whole-process wall time of ``simdl predict`` on a built-in model (goal < 0.5 s),
   the median of several runs, measured from outside the process; then the CPU time
   (``getrusage(RUSAGE_CHILDREN)``, user + system) of ``python -m simdl predict`` and of four
   rejected inputs (goals: 0.2 s and 0.3 s), 5 runs each, two ways: compiling simdl from
   source in every process (``PYTHONDONTWRITEBYTECODE=1``, no ``__pycache__``: how this
   repository's development environment runs) and with bytecode compiled once (into a
   temporary ``PYTHONPYCACHEPREFIX``, as an installed wheel has it). Run from a temporary
   folder, so that ``-m`` does not put the checkout's own folder first on ``sys.path``.
2. Analytic predictions per second in one process over a grid of models, strategies,
   GPU counts and batch sizes (goal > 1,000/s).

Run: ``python benchmarks/bench_predict.py`` (or ``make bench``); ``--cli-cpu``: part 1's CPU table only.
"""

from __future__ import annotations

import itertools
import os
import resource
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


CLI_CASES = {
    "predict --model vgg16 --strategy fsdp --gpus 4": (
        "predict",
        "--model",
        "vgg16",
        "--strategy",
        "fsdp",
        "--gpus",
        "4",
    ),
    "error: --model nope": ("predict", "--model", "nope"),
    "error: --cluster nope": ("predict", "--cluster", "nope"),
    "error: ps-sync without servers": ("predict", "--strategy", "ps-sync", "--gpus", "4"),
    "error: --gpus 640000 (lists multi-node presets)": (
        "predict",
        "--model",
        "vgg16",
        "--strategy",
        "ddp",
        "--gpus",
        "640000",
    ),
}


def cli_cpu_times(args: tuple[str, ...], env: dict, cwd: str, repeats: int = 5) -> list[float]:
    """CPU seconds (user + system) of each of ``repeats`` runs of ``python -m simdl ARGS``."""
    out = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, "-m", "simdl", *args],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return out


def cli_cpu_table(repeats: int = 5) -> None:
    import tempfile

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
    with tempfile.TemporaryDirectory() as tmp:
        source = dict(base, PYTHONDONTWRITEBYTECODE="1")  # the installed packages keep their own bytecode
        compiled = dict(base, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
        compiled.pop("PYTHONDONTWRITEBYTECODE", None)
        print(
            f"\nCPU seconds of whole processes (getrusage children, {repeats} runs each; host load "
            f"{os.getloadavg()[0]:.2f}, possibly shared): median (min-max)"
        )
        print(f"{'command':52s} {'from source':>22s} {'bytecode compiled':>22s}")
        for name, args in CLI_CASES.items():
            cells = []
            for env in (source, compiled):
                if env is compiled:
                    cli_cpu_times(args, env, tmp, repeats=1)  # writes the bytecode
                t = cli_cpu_times(args, env, tmp, repeats)
                cells.append(f"{statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})")
            print(f"{name:52s} {cells[0]:>22s} {cells[1]:>22s}")
        print("goals: predict <= 0.2 s, an error <= 0.3 s")


def grid_rate(seconds: float = 5.0) -> tuple[int, float, int]:
    import simdl

    models = ["vgg16", "resnet50", "convnext_large", "vit_b_16", "densenet121", "efficientnet_v2_l"]
    strategies = [
        ("ddp", {}),
        ("fsdp", {"sharding": "full"}),
        ("fsdp", {"sharding": "grad_op"}),
        ("fsdp", {"sharding": "hybrid"}),
        ("fsdp", {"sharding": "none"}),
    ]
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
    print(
        f"analytic predictions, first pass over {len(grid)} distinct configs: {first:.2f} s = "
        f"{len(grid) / first:,.0f} /s (goal > 1,000/s)"
    )
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
    if "--cli-cpu" in sys.argv:
        cli_cpu_table()
        return
    times = cli_wall_time()
    print(
        f"simdl predict --model vgg16 --strategy fsdp --gpus 4: wall time median {statistics.median(times):.3f} s "
        f"(min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs; goal < 0.5 s)"
    )
    n, dt, size = grid_rate()
    print(
        f"analytic predictions repeated over the same grid (plans and row times memoised): {n} in {dt:.2f} s = "
        f"{n / dt:,.0f} /s (grid of {size} configs: 6 models x 5 strategies x 8 GPU counts (1-1024) x 4 batches)"
    )
    cli_cpu_table()


if __name__ == "__main__":
    main()
