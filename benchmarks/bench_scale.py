"""How does simdl scale? Prints figures; asserts nothing (targets live here, not in tests).

1. The simulator on a ResNet-50 DDP step (cifar10 table, batch 32 per GPU) on ``dgx-a100``
   nodes at 256, 1,024, 4,096 and 16,384 ranks, two ways:

   * homogeneous: every rank the same, so one rank class stands for all;
   * heterogeneous: every rank its own jitter draw (lognormal:0.1) plus a few stragglers
     (ranks 1, world/3 and world-2 at factors 1.5, 1.3 and 1.2), so every rank is its own class.

   Each point runs in a child process, so that its peak memory (``ru_maxrss`` of the child)
   and its CPU time are its own; wall and CPU seconds of the ``simulate`` call (3 iterations,
   1 warm-up: what ``--engine sim`` runs; after an 8-rank call that imports the modules), the peak resident memory of the whole child, and
   the growth of the wall time per 4x ranks are printed. A point predicted to take longer
   than ``--max-seconds`` (from the previous point and its growth) is skipped.

2. The sweep rate: one process (``executor="serial"``, a fresh child per grid) answering
   analytic grids on ``dgx-a100``, in configurations per second of wall and of CPU time: a
   mixed grid (models x strategies x GPU counts x batch sizes x NIC rates) and a network
   what-if grid of 20,736 points (:func:`link_grid`), each with the link groups of
   simdl.explore.vector on and off. Under each: how many memory estimates the sweep computed
   (one per distinct workload, plan and device) and their CPU seconds, and the rate of the rest.
   With link groups on, each grid also in ``--jobs`` processes (default 2, ``executor="process"``):
   wall rate, and CPU seconds of this process and of the workers.

A PNG of simulate wall time against ranks goes to ``-o`` (default
``runs/bench/bench_scale.png``; ``runs/`` is git-ignored). ``--quick`` runs a bounded
version (16 and 64 ranks, the 500-point mixed grid, vector on) that a unit test runs;
``--sweep-only`` the sweep rates alone.

The host this runs on may be shared: CPU seconds are printed beside wall seconds.
Run: ``python benchmarks/bench_scale.py [--quick] [-o PNG]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

FULL_RANKS = (256, 1024, 4096, 16384)
QUICK_RANKS = (16, 64)
JITTER = "lognormal:0.1"
DEFAULT_PNG = os.path.join("runs", "bench", "bench_scale.png")


def stragglers(world: int) -> list[str]:
    """A few slow ranks, spread over the world (distinct ranks at every size >= 4)."""
    picks = {1: 1.5, world // 3: 1.3, world - 2: 1.2}
    return [f"rank={r},factor={f:g}" for r, f in sorted(picks.items())]


def run_point(ranks: int, hetero: bool) -> dict:
    """One simulate call in this process; returns its figures (called in a child)."""
    from simdl.cluster import allocate
    from simdl.sim.engine import simulate
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    wl = Workload(load_workload("resnet50", dataset="cifar10"))
    alloc = allocate("dgx-a100", ranks)
    plan = build_plan(wl, alloc, StrategyConfig("ddp"))

    def options(world: int) -> dict:
        return dict(jitter=JITTER, straggler=stragglers(world)) if hetero else {}

    # Warm-up on 8 ranks: the simulator's modules are imported on first use; import time is
    # the same at every size and is not what this measures.
    small = allocate("dgx-a100", 8)
    simulate(wl, small, build_plan(wl, small, StrategyConfig("ddp")), **options(8))
    w0, c0 = time.perf_counter(), time.process_time()
    result = simulate(wl, alloc, plan, **options(ranks))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    # ru_maxrss is in KiB on Linux (getrusage(2)).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return dict(
        ranks=ranks, hetero=hetero, wall_s=wall, cpu_s=cpu, peak_rss_bytes=rss, iteration_s=result.iteration_time_s
    )


def child(ranks: int, hetero: bool, timeout: float) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--point", str(ranks), "--hetero" if hetero else "--homo"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"point {ranks} ranks failed:\n{e.stderr}") from None
    return json.loads(out.stdout.strip().splitlines()[-1])


def sim_table(ranks: tuple[int, ...], max_seconds: float) -> dict[bool, list[dict]]:
    print("1. simulate: ResNet-50 DDP on dgx-a100, cifar10 table, batch 32/GPU, 3 iterations (1 warm-up)")
    print(
        f"{'ranks':>7s} {'kind':>7s} {'wall (s)':>9s} {'CPU (s)':>8s} {'peak RSS (MiB)':>15s} "
        f"{'growth /4x wall':>16s} {'growth /4x CPU':>15s} {'iteration (ms)':>15s}"
    )
    out: dict[bool, list[dict]] = {False: [], True: []}
    for hetero in (False, True):
        prev = None
        for n in ranks:
            kind = "hetero" if hetero else "homo"
            if prev is not None and prev["wall_s"] * (n / prev["ranks"]) ** 2 > max_seconds * 4:
                # Quadratic growth from the previous point would exceed the budget by far.
                print(f"{n:7d} {kind:>7s}   skipped (> --max-seconds {max_seconds:g} predicted)")
                continue
            p = child(n, hetero, timeout=max_seconds * 4)
            if p is None:
                print(f"{n:7d} {kind:>7s}   over {max_seconds * 4:g} s: stopped")
                break
            growth = cpu_growth = ""
            if prev is not None and n == 4 * prev["ranks"]:
                growth = f"{p['wall_s'] / prev['wall_s']:.2f}x"
                cpu_growth = f"{p['cpu_s'] / prev['cpu_s']:.2f}x"
            print(
                f"{n:7d} {kind:>7s} {p['wall_s']:9.3f} {p['cpu_s']:8.3f} {p['peak_rss_bytes'] / 2**20:15.0f} "
                f"{growth:>16s} {cpu_growth:>15s} {p['iteration_s'] * 1e3:15.4f}"
            )
            out[hetero].append(p)
            prev = p
    return out


def sweep_grid(quick: bool) -> dict:
    g = dict(
        model=["resnet50", "vgg16", "vit_b_16", "convnext_tiny", "densenet121"],
        strategy=["ddp", "fsdp-full", "fsdp-grad_op", "fsdp-hybrid", "fsdp-none"],
        gpus=[8, 16, 32, 64, 128, 256, 512, 1024],
        batch_size=[16, 32, 64, 128],
        nic_Gb_per_s=[25, 100, 200, 400, 800],
        cluster="dgx-a100",
    )
    if quick:
        g.update(model=["resnet50", "vgg16"], gpus=[8, 16, 64, 256, 1024], batch_size=[32, 64])
    return g


def link_grid() -> dict:
    """A what-if grid over the network (20,736 points): 4 models x 4 strategies x 3 GPU counts x
    3 batches x 2 precisions, each at 6 NIC rates x 4 NIC counts x 3 latencies on dgx-a100."""
    return dict(
        model=["resnet50", "vgg16", "vit_b_16", "convnext_tiny"],
        strategy=["ddp", "fsdp-full", "fsdp-hybrid", "zero2"],
        gpus=[16, 64, 256],
        batch_size=[16, 32, 64],
        precision=["fp32", "bf16"],
        nic_Gb_per_s=[25, 50, 100, 200, 400, 800],
        nics_per_node=[1, 2, 4, 8],
        inter_latency_us=[2, 5, 10],
        cluster="dgx-a100",
    )


def _axes(grid: dict) -> str:
    return " x ".join(f"{len(v)} {k}" for k, v in grid.items() if isinstance(v, list))


def sweep_rate(name: str, grid: dict, vector: bool = True, jobs: int = 1) -> dict:
    """One ``simdl.sweep`` of ``grid`` in a fresh process (executor=serial, or ``jobs``
    processes: executor=process): wall and CPU rate."""
    spec = json.dumps(dict(grid=grid, vector=vector, jobs=jobs))
    cmd = [sys.executable, os.path.abspath(__file__), "--sweep-point", spec]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    p = json.loads(out.stdout.strip().splitlines()[-1])
    if jobs > 1:
        # The busiest process bounds the wall time on an unshared host with ``jobs`` cores.
        print(
            f"{name}, {jobs} processes (executor=process, jobs={jobs}; {p['errors']} rows with an error; "
            f"{p['vectorised']:,} by link groups): wall {p['wall_s']:.2f} s = {p['configs'] / p['wall_s']:,.0f} "
            f"configs/s, CPU {p['cpu_s']:.2f} s in all, this process {p['own_cpu_s']:.2f} s, "
            f"the workers {p['cpu_s'] - p['own_cpu_s']:.2f} s"
        )
        return p
    print(
        f"{name}: {p['configs']:,} analytic configurations ({_axes(grid)}; {p['errors']} rows with an error; "
        f"{p['vectorised']:,} by link groups, vector={'on' if vector else 'off'}): wall {p['wall_s']:.2f} s = "
        f"{p['configs'] / p['wall_s']:,.0f} configs/s, CPU {p['cpu_s']:.2f} s = {p['configs'] / p['cpu_s']:,.0f} configs/s"
    )
    rest = p["cpu_s"] - p["memory_cpu_s"]
    print(
        f"    of which {p['memory_estimates']:,} memory estimates: CPU {p['memory_cpu_s']:.2f} s "
        f"({100 * p['memory_cpu_s'] / p['cpu_s']:.0f} %); the rest: CPU {rest:.2f} s = "
        f"{p['configs'] / rest if rest > 0 else math.inf:,.0f} configs/s"
    )
    return p


def run_sweep(spec: dict) -> dict:
    """The body of one sweep-rate child: the tables of the grid's models loaded first (a sweep's
    own first point of each model does the same), then the timed sweep."""
    import importlib

    import simdl

    sweep_mod = importlib.import_module("simdl.explore.sweep")
    engine = importlib.import_module("simdl.analytic.engine")
    grid, vector, jobs = spec["grid"], spec["vector"], spec.get("jobs", 1)
    for m in grid["model"]:
        simdl.predict(model=m, strategy="ddp", gpus=1, cluster=grid["cluster"])
    # The memory estimates the sweep computes (the engine's memo misses), counted and timed.
    estimate, spent = engine._memo.fn, [0, 0.0]

    def timed(*args):
        c = time.process_time()
        try:
            return estimate(*args)
        finally:
            spent[0] += 1
            spent[1] += time.process_time() - c

    engine._memo.fn = timed
    executor = "serial" if jobs == 1 else "process"
    t0, w0 = os.times(), time.perf_counter()
    rows = simdl.sweep(executor=executor, jobs=jobs, progress=False, as_frame=False, vector=vector, **grid)
    wall, t1 = time.perf_counter() - w0, os.times()
    engine._memo.fn = estimate
    own = t1.user + t1.system - t0.user - t0.system
    # The workers' CPU: os.times counts children once they are waited for (the pool joins them).
    workers = t1.children_user + t1.children_system - t0.children_user - t0.children_system
    return dict(
        configs=len(rows),
        wall_s=wall,
        cpu_s=own + workers,
        own_cpu_s=own,
        errors=sum(1 for r in rows if r.get("error")),
        vectorised=sweep_mod.last_run["vectorised"],
        memory_estimates=spent[0],
        memory_cpu_s=spent[1],
    )


def sweep_table(quick: bool, jobs: int = 1) -> None:
    print("\n2. sweep in one process (executor=serial), each in a fresh process (tables loaded first)")
    if jobs > 1:
        print(
            f"   and in {jobs} processes (executor=process: this one and {jobs - 1} forked worker{'s' if jobs > 2 else ''})"
        )
    sweep_rate("mixed grid", sweep_grid(quick))
    if jobs > 1:
        sweep_rate("mixed grid", sweep_grid(quick), jobs=jobs)
    if quick:
        return
    sweep_rate("mixed grid", sweep_grid(quick), vector=False)
    sweep_rate("network what-if grid", link_grid())
    if jobs > 1:
        sweep_rate("network what-if grid", link_grid(), jobs=jobs)
    sweep_rate("network what-if grid", link_grid(), vector=False)


def plot(table: dict[bool, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for hetero, pts in table.items():
        if pts:
            label = "heterogeneous (every rank its own class)" if hetero else "homogeneous (one class)"
            ax.loglog([p["ranks"] for p in pts], [p["wall_s"] for p in pts], "o-", label=label)
    ax.set_xlabel("ranks")
    ax.set_ylabel("simulate wall time (s)")
    ax.set_title("simdl simulator: ResNet-50 DDP on dgx-a100")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"\nfigure: {path}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bounded: 16 and 64 ranks, a 500-point grid")
    ap.add_argument(
        "--ranks",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=None,
        help="comma-separated rank counts (default 256,1024,4096,16384)",
    )
    ap.add_argument("--max-seconds", type=float, default=120.0, help="skip points predicted to take longer")
    ap.add_argument("--no-sweep", action="store_true", help="leave out the sweep rate")
    ap.add_argument("--sweep-only", action="store_true", help="only the sweep rates")
    ap.add_argument(
        "--jobs", type=int, default=2, help="the sweep also in this many processes (default 2; 1: one process only)"
    )
    ap.add_argument("-o", "--output", default=DEFAULT_PNG, help=f"PNG path (default {DEFAULT_PNG})")
    ap.add_argument("--point", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--hetero", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--homo", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sweep-point", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.point is not None:
        print(json.dumps(run_point(a.point, a.hetero)))
        return
    if a.sweep_point is not None:
        print(json.dumps(run_sweep(json.loads(a.sweep_point))))
        return
    ranks = a.ranks or (QUICK_RANKS if a.quick else FULL_RANKS)
    print(
        f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (possibly shared: CPU seconds "
        "are this process's own)"
    )
    if a.sweep_only:
        sweep_table(a.quick, a.jobs)
        return
    table = sim_table(ranks, a.max_seconds)
    if not a.no_sweep:
        sweep_table(a.quick, a.jobs)
    plot(table, a.output)


if __name__ == "__main__":
    main()
