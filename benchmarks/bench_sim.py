"""How fast is the simulator? Prints figures; asserts nothing (targets live here, not in tests).

1. ResNet-50 DDP and FSDP (full shard) on dgx-a100 nodes at 8, 64, 512 and 1024 GPUs:
   wall time of one ``simulate`` call (3 iterations, 1 warm-up: what ``--engine sim`` runs)
   and per simulated iteration. Goal: 1024 GPUs in under 2 s.
2. Growth with GPUs (the same at more points) and with layers (models with more table
   rows at a fixed 64 GPUs), and with heterogeneity (jitter: every rank simulated).

Each figure is the best of ``--repeats`` runs after a warm-up call (table loading and
caches are not what is measured). Run: ``python benchmarks/bench_sim.py``.
"""

from __future__ import annotations

import argparse
import time


def _time(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _setup(model: str, strategy: str, gpus: int, cluster: str = "dgx-a100", **kw):
    """Build workload, allocation and plan once, so that only the simulation is timed."""
    from simdl.cluster import allocate
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    wl = Workload(load_workload(model, dataset="cifar10"))
    alloc = allocate(cluster, gpus)
    plan = build_plan(wl, alloc, StrategyConfig(strategy, **kw))
    return wl, alloc, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from simdl.sim.engine import simulate

    iterations = 3
    print("1. ResNet-50 on dgx-a100 (8 GPUs/node, NVSwitch, 8 NICs), cifar10 table, batch 32/GPU")
    print(
        f"{'strategy':10s} {'GPUs':>6s} {'simulate (s)':>13s} {'per iteration (s)':>18s} "
        f"{'iteration (ms)':>15s} {'recomputes':>11s}"
    )
    for strategy, kw in (("ddp", {}), ("fsdp", {"sharding": "full"})):
        for gpus in (8, 64, 512, 1024):
            wl, alloc, plan = _setup("resnet50", strategy, gpus, **kw)
            t = _time(lambda: simulate(wl, alloc, plan, iterations=iterations), args.repeats)
            run = simulate(wl, alloc, plan, iterations=iterations, return_run=True)
            label = strategy if strategy == "ddp" else "fsdp-full"
            print(
                f"{label:10s} {gpus:6d} {t:13.3f} {t / iterations:18.3f} "
                f"{run.result.iteration_time_s * 1e3:15.3f} {run.recomputes:11d}"
            )

    print("\n2a. growth with GPUs: ResNet-50 DDP, seconds per simulate call")
    for gpus in (8, 16, 32, 64, 128, 256, 512, 1024):
        wl, alloc, plan = _setup("resnet50", "ddp", gpus)
        t = _time(lambda: simulate(wl, alloc, plan, iterations=iterations), args.repeats)
        print(f"  {gpus:5d} GPUs  {t:7.3f} s")

    print("\n2b. growth with layers: FSDP full shard at 64 GPUs (more rows/units = more tasks)")
    for model in ("mnist_cnn", "resnet18", "resnet50", "vit_b_16", "densenet121", "efficientnet_v2_l"):
        wl, alloc, plan = _setup(model, "fsdp", 64, sharding="full")
        t = _time(lambda: simulate(wl, alloc, plan, iterations=iterations), args.repeats)
        print(f"  {model:18s} rows {wl.table.n_rows:5d}  tasks {len(plan.tasks):5d}  {t:7.3f} s")

    print("\n2c. heterogeneity (jitter lognormal:0.1 -> every rank is its own process): ResNet-50 DDP")
    for gpus in (8, 64, 256):
        wl, alloc, plan = _setup("resnet50", "ddp", gpus)
        t = _time(lambda: simulate(wl, alloc, plan, iterations=iterations, jitter="lognormal:0.1"), 1)
        print(f"  {gpus:5d} GPUs  {t:7.3f} s")


if __name__ == "__main__":
    main()
