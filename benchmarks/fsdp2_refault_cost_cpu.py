"""Probe (not part of calibration): what glibc's heap trimming costs an FSDP2 step on CPU,
against what simdl charges for it.

    python benchmarks/fsdp2_refault_cost_cpu.py PROFILE RUN [RUN ...]
    e.g. python benchmarks/fsdp2_refault_cost_cpu.py lab/profiles/cpu-epyc-zen4.yaml convnext_tiny:cifar10:32:none

RUN as benchmarks/fsdp2_heap_trim_cpu.py takes it. Each RUN is trained twice at 2 ranks with
that probe (12 steps, the first 2 dropped): with glibc's defaults, and with trimming off
(``MALLOC_TRIM_THRESHOLD_`` at 64 GiB; ``MALLOC_MMAP_THRESHOLD_`` pinned at the 32 MiB the
dynamic threshold reaches, so buffers above it are still mapped fresh as before). Printed
per RUN: the median step and the minor page faults per step (mean of the two ranks) in
each mode; the step time trimming adds; and simdl's side for the same configuration on
PROFILE: the bytes its plan refaults (``Task.refaults``, simdl.hosts.cpu_glibc
``GlibcCpuHost.refault_limit``) and what it charges for them (x ``host.page_fault_ns_per_byte``).
Results go to runs/refault/<RUN>/ (the probe's per-rank traces) and are printed.

Run on the 2-core VM (AMD EPYC Zen 4, family 25 model 17), 2026-12-02, 11:23-11:40 UTC,
profile cpu-epyc-zen4 (fill rate 0.464 ns/B); the first four are calibration models, the
last three validation models (run here as a diagnosis, not fitted on):

    run                        step s  no trim   added | faults MB  no trim | simdl refault  fresh  charged s
    convnext_tiny b32 none      1.007    0.846  +0.161 |       233       10 |          111      0      0.052
    efficientnet_v2_s b16 none  1.173    1.101  +0.072 |        76        0 |           81      0      0.037
    wide_resnet101_2 b16 none   4.770    2.957  +1.814 |      1541       72 |          332    449      0.362
    vit_b_32 b32 none           2.612    1.522  +1.090 |       368        3 |          350      0      0.162
    vgg16 b32 none              3.943    3.898  +0.045 |      2015     1878 |           59   1434      0.693
    convnext_large b32 none     8.428    5.871  +2.557 |      2753       71 |          557    682      0.575
    efficientnet_v2_l b32 none  6.468    5.261  +1.207 |       451        9 |          469      0      0.218

("fresh": buffers above the mmap threshold simdl maps fresh at every step. With trimming
off glibc serves them from the kept top of the heap, so "no trim" removes those faults as
well, except VGG16's: it still faults 1.9 GB a step and trimming adds only 0.045 s.)
Except for VGG16, what trimming adds is 1.9-7x what simdl charges, and not a cost per byte:
0.33-2.98 ns/B of faults, against the 0.46 ns/B of an idle fill. The same configuration
also moves between runs: ViT-B/32 b32 took 1.95 s with trimming in an earlier probe the
same day (against 2.61 s here), and ConvNeXt-L b32 none 6.06 s in the validation sweep
(7:40-8:39 UTC) against 8.43 s here. The heap's state, not the bytes, sets the cost.

Why: ViT FSDP none is under-predicted on every host by 12-29 %; with trimming off the same
ViT-B/32 step took 1.5 s against 1.95 s, more than the 0.16 s simdl charges for the
refaulted gradients (lab/CAMPAIGN.md, 2026-12-02). The calibration models show whether
that gap is a property of the mechanism (and so fit for a calibrated term) or of ViT.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = 12
DROP = 2  # the first steps map the heap and warm the allocator
NO_TRIM = {"MALLOC_TRIM_THRESHOLD_": str(64 << 30), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


def _probe(run: str, out: Path, env: dict) -> list[list[dict]]:
    if not all((out / f"steps{r}.json").exists() for r in (0, 1)):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(ROOT / "benchmarks" / "fsdp2_heap_trim_cpu.py"),
            run,
            str(out),
            str(STEPS),
        ]
        subprocess.run(
            cmd, check=True, env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    return [json.loads((out / f"steps{r}.json").read_text())[DROP:] for r in (0, 1)]


def _summary(ranks: list[list[dict]]) -> tuple[float, float]:
    """Median step (the slower rank's clock) and mean faulted bytes per step and rank."""
    steps = [max(a["s"], b["s"]) for a, b in zip(*ranks)]
    faults = [r["faults_MB"] * 1e6 for rank in ranks for r in rank]
    return statistics.median(steps), statistics.mean(faults)


def _modelled(profile: str, run: str) -> tuple[float, float, float]:
    """simdl's refaulted and freshly mapped bytes per step and rank, and their charge (s)."""
    from simdl.analytic.costs import device_rates, fresh_mapped_bytes

    from simdl.cluster import allocate, load_cluster
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload import workload as wl
    from simdl.workload.datasets import get_dataset
    from simdl.workload.library import load_workload

    model, dataset, batch, sharding = run.split(":")
    ds = get_dataset(dataset)
    table = load_workload(model, dataset=dataset, input_shape=ds.input_shape, num_classes=ds.num_classes)
    w = wl.Workload(
        table=table, batch_size=int(batch), train_samples=1536, epochs=1, optimizer="momentum", precision="fp32"
    )
    alloc = allocate(load_cluster(profile), 2, None)
    plan = build_plan(w, alloc, StrategyConfig(name="fsdp", sharding=sharding, wrap="block", reshard_root=True))
    rates = device_rates(alloc, "fp32")
    refault = sum(t.refaults for t in plan.tasks if not t.collective)
    fresh = sum(fresh_mapped_bytes(t.allocs, rates) for t in plan.tasks if not t.collective)
    return refault, fresh, (refault + fresh) * rates.page_fault_per_byte


def main() -> None:
    profile, runs = sys.argv[1], sys.argv[2:]
    print(
        f"{'run':38s} {'step s':>7s} {'no trim':>7s} {'added':>6s} | {'faults MB':>9s} {'no trim':>7s} | "
        f"{'simdl refault MB':>16s} {'fresh MB':>8s} {'charged s':>9s} | added per faulted byte"
    )
    for run in runs:
        base = ROOT / "runs" / "refault" / run.replace(":", "-")
        trim = _summary(_probe(run, base / "default", {}))
        keep = _summary(_probe(run, base / "no-trim", NO_TRIM))
        ref, fresh, charged = _modelled(profile, run)
        added, faulted = trim[0] - keep[0], trim[1] - keep[1]
        per = f"{added / faulted * 1e9:.2f} ns/B" if faulted > 0 else "-"
        print(
            f"{run:38s} {trim[0]:7.3f} {keep[0]:7.3f} {added:+6.3f} | {trim[1] / 1e6:9.0f} {keep[1] / 1e6:7.0f} | "
            f"{ref / 1e6:16.0f} {fresh / 1e6:8.0f} {charged:9.3f} | {per}",
            flush=True,
        )


if __name__ == "__main__":
    main()
