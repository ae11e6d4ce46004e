"""Probe (not part of calibration): how much of an FSDP2 step on CPU is the allocator giving
memory back to the OS and faulting it in again?

    python benchmarks/fsdp2_allocator_cpu.py [MODEL:DATASET:BATCH] [SHARDING] [RANKS] [STEPS]
    (default wide_resnet101_2:cifar10:16 none 2 12)

Runs the same FSDP2 training steps twice under torchrun (gloo, one thread per rank, as
calibration/strategies.py does): with glibc malloc's defaults, and with
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_TOP_PAD_`` set so that
it neither maps large buffers afresh nor trims the heap (mallopt(3): setting any of them
also turns off the dynamic mmap threshold). Prints per rank the median step and the minor
page faults per step (``getrusage`` ``ru_minflt``): every fault is a 4 KiB page the step
touched for the first time since the allocator got it from the OS.

Why: FSDP2 allocates each unit's unsharded parameters, gradients and reduce-scatter
buffers in every step and frees them again; glibc returns big freed blocks to the OS
(munmap above the mmap threshold, heap trimming above the trim threshold), so the next step
faults them in again. simdl charges page faults only for buffers above the mmap threshold
(host.mmap_threshold_MiB, simdl.analytic.costs.fresh_mapped_bytes).

Run on the 2-core VM, 2026-11-24, 2 ranks, 12 steps (median step, rank 0; minor faults per
step as MiB of 4 KiB pages; what simdl charges as fresh mapped bytes per step):

    model, FSDP2 sharding               glibc defaults        no mmap, no trim   simdl's fresh bytes
    wide_resnet101_2 b16, none           2.546 s  1,412 MiB    1.964 s  0 MiB     428 MiB
    convnext_tiny b32, full              0.901 s    162 MiB    0.782 s  0 MiB       0 MiB
    vit_b_32 b8, full                    1.628 s    288 MiB    1.530 s 13 MiB       0 MiB

(wide_resnet101_2 allocates about 1,429 MiB of FSDP buffers per step in simdl's plan: glibc
gave nearly all of it back and faulted it in again.) The faults are not the buffers above
the mmap threshold alone, and which ones are depends on the heap's history.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_RETURN = {
    "MALLOC_MMAP_THRESHOLD_": str(16 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),
    "MALLOC_TOP_PAD_": str(1 << 30),
}


def worker(item: str, sharding: str, steps: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, os.getcwd())
    from simdl.workload.datasets import get_dataset
    from simdl.workload.zoo import DEFAULT_WRAP_TYPES, build_adapted

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    name, dataset, batch = item.rsplit(":", 2)
    ds = get_dataset(dataset)
    torch.manual_seed(0)
    model, _, shape = build_adapted(name, ds.input_shape, ds.num_classes, device="meta")
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    mesh = (
        init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
        if sharding == "none"
        else init_device_mesh("cpu", (world,))
    )
    types = set(DEFAULT_WRAP_TYPES.get(name, ()))
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in types:
            fully_shard(m, mesh=mesh, reshard_after_forward=sharding == "full")
    fully_shard(model, mesh=mesh, reshard_after_forward=sharding == "full")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(int(batch), *shape)
    y = torch.randint(0, ds.num_classes, (int(batch),))
    times, faults = [], []
    for _ in range(steps):
        dist.barrier()
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    warm = steps // 3  # the first steps also build the allocator's pools
    if rank == 0:
        Path(out).write_text(
            json.dumps({"step_s": statistics.median(times[warm:]), "faults": statistics.median(faults[warm:])}) + "\n"
        )
    dist.destroy_process_group()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:4], int(sys.argv[4]), sys.argv[5])
        return 0
    item = sys.argv[1] if len(sys.argv) > 1 else "wide_resnet101_2:cifar10:16"
    sharding = sys.argv[2] if len(sys.argv) > 2 else "none"
    ranks = sys.argv[3] if len(sys.argv) > 3 else "2"
    steps = sys.argv[4] if len(sys.argv) > 4 else "12"
    print(f"{item}, FSDP2 {sharding}, {ranks} ranks, {steps} steps (median of the last two thirds, rank 0)")
    for label, env in (("glibc defaults", {}), ("no mmap, no trim", NO_RETURN)):
        with tempfile.TemporaryDirectory() as td:
            out = Path(td) / "r.json"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    f"--nproc-per-node={ranks}",
                    __file__,
                    "--worker",
                    item,
                    sharding,
                    steps,
                    str(out),
                ],
                env={**os.environ, **env},
                check=True,
                capture_output=True,
            )
            r = json.loads(out.read_text())
        print(
            f"  {label:17s} step {r['step_s']:.3f} s  minor page faults per step {r['faults']:,.0f} "
            f"({r['faults'] * 4096 / 2**20:,.0f} MiB of 4 KiB pages)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
