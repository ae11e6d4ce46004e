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

Run: ``python benchmarks/device_memory_table.py``
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simdl  # noqa: E402

GiB = 2**30
BATCHES = (16, 32, 64, 128, 256)


def main() -> int:
    t0, c0 = time.time(), time.process_time()
    head = (f"{'model':<9}{'sharding':>9}{'batch':>6}{'tensors':>9}{'alloc':>8}{'reserved':>9}{'cache':>7}"
            f"{'context':>8}{'nccl':>6}{'device':>8}{'fits':>6}   GiB")
    print(head)
    for model in ("vgg16", "vit_b_16"):
        for sharding in ("full", "grad_op", "none"):
            for b in BATCHES:
                r = simdl.predict(model=model, dataset="imagenet", cluster="a100-40gb-2node", gpus=8,
                                  strategy="fsdp", sharding=sharding, batch_size=b, optimizer="momentum")
                p = r.device_memory_bytes
                print(f"{model:<9}{sharding:>9}{b:>6}{p['tensors'] / GiB:>9.2f}{r.max_memory_allocated_bytes / GiB:>8.2f}"
                      f"{r.max_memory_reserved_bytes / GiB:>9.2f}{p['allocator_cache'] / GiB:>7.2f}"
                      f"{p['cuda_context'] / GiB:>8.2f}{p['nccl_buffers'] / GiB:>6.2f}{r.peak_memory_bytes / GiB:>8.2f}"
                      f"{'yes' if r.fits_in_memory else 'NO':>6}", flush=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nwall {time.time() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, max RSS {ru.ru_maxrss / 1024:.0f} MiB; "
          "host shared with other jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
