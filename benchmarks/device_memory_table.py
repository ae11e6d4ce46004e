"""simdl's allocated, reserved and device (nvidia-smi) figures side by side, with their parts.

VGG16 and ViT-B/16 at 224x224 (ImageNet tables), batch 16-256 per GPU, FSDP2 full /
grad_op / none on 8 A100-SXM4-40GB (preset a100-40gb-2node), SGD with momentum, fp32.

Columns (all simdl predictions, no measurement here):
  tensors    live tensors at the step's peak (the timeline; what MemTracker counts)
  allocated  torch.cuda.max_memory_allocated as the caching-allocator model replays it
             (tensors + 512 B rounding + unsplit remainders + cuBLAS/cuBLASLt workspaces)
  reserved   torch.cuda.max_memory_reserved (allocated + cached free blocks)
  context    CUDA context (GPU file device_memory.cuda_context_MiB)
  nccl       NCCL communicator buffers (channels x connections x 10 MiB per communicator)
  device     reserved + context + nccl: what nvidia-smi would show
  fits       device <= 95 % of 40 GiB and no allocator OOM
  expand     reserved with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the model's option)

Run: ``python benchmarks/device_memory_table.py``
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simdl  # noqa: E402
from simdl.memory.allocator import AllocatorConfig  # noqa: E402

GiB = 2**30
BATCHES = (16, 32, 64, 128, 256)


def expandable_reserved(model: str, sharding: str, batch: int) -> float:
    """max_memory_reserved with expandable segments (through the memory model's API)."""
    from simdl.cluster import allocate, load_cluster
    from simdl.memory.model import estimate_memory
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    wl = Workload(table=load_workload(model, dataset="imagenet"), batch_size=batch, optimizer="momentum")
    alloc = allocate(load_cluster("a100-40gb-2node"), 8)
    plan = build_plan(wl, alloc, StrategyConfig("fsdp", sharding=sharding))
    return estimate_memory(wl, plan, alloc, allocator=AllocatorConfig(expandable_segments=True)).max_reserved_bytes


def main() -> int:
    t0, c0 = time.time(), time.process_time()
    head = (
        f"{'model':<9}{'sharding':>9}{'batch':>6}{'tensors':>9}{'alloc':>8}{'reserved':>9}{'cache':>7}"
        f"{'context':>8}{'nccl':>6}{'device':>8}{'fits':>6}{'expand':>8}   GiB"
    )
    print(head)
    for model in ("vgg16", "vit_b_16"):
        for sharding in ("full", "grad_op", "none"):
            for b in BATCHES:
                r = simdl.predict(
                    model=model,
                    dataset="imagenet",
                    cluster="a100-40gb-2node",
                    gpus=8,
                    strategy="fsdp",
                    sharding=sharding,
                    batch_size=b,
                    optimizer="momentum",
                )
                p = r.device_memory_bytes
                expand = expandable_reserved(model, sharding, b)
                print(
                    f"{model:<9}{sharding:>9}{b:>6}{p['tensors'] / GiB:>9.2f}{r.max_memory_allocated_bytes / GiB:>8.2f}"
                    f"{r.max_memory_reserved_bytes / GiB:>9.2f}{p['allocator_cache'] / GiB:>7.2f}"
                    f"{p['cuda_context'] / GiB:>8.2f}{p['nccl_buffers'] / GiB:>6.2f}{r.peak_memory_bytes / GiB:>8.2f}"
                    f"{'yes' if r.fits_in_memory else 'NO':>6}{expand / GiB:>8.2f}",
                    flush=True,
                )
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"\nwall {time.time() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, max RSS {ru.ru_maxrss / 1024:.0f} MiB; "
        "host shared with other jobs"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
