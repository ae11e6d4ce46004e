"""Which c10d calls DDP and FSDP2 make on this backend: the ones collectives.py must time.

Profiles one training step of a 3-layer MLP under DDP and under FSDP2 (``fully_shard`` per
Linear and the root) and prints every c10d / backend op the profiler records, with the
input shapes. On CPU + gloo with torch 2.14.1 (run 2026-11-23):

  ddp    c10d::allreduce_ -> gloo:all_reduce of each bucket
  fsdp2  c10d::_allgather_base_ -> gloo:all_gather (forward and backward, per unit)
         c10d::_reduce_scatter_base_ -> gloo:all_reduce of the whole unsharded gradient

i.e. dist.all_reduce, dist.all_gather_single and dist.reduce_scatter_single (FSDP2's
DefaultAllGather / DefaultReduceScatter in torch/distributed/fsdp/_fully_shard/
_fsdp_collectives.py), which is what collectives.py times (printed last, for comparison).

Run: torchrun --nproc-per-node 2 calibration/check_calls.py
"""

from __future__ import annotations

import collections

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

KEYS = ("gloo", "nccl", "c10d", "all_gather", "reduce_scatter", "allreduce", "all_reduce", "broadcast")


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def calls(m: torch.nn.Module, x: torch.Tensor) -> collections.Counter:
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(2):  # warm-up: lazy state, DDP's bucket rebuild
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
    return collections.Counter(
        (e.name, str(e.input_shapes)[:60]) for e in prof.events() if any(k in e.name.lower() for k in KEYS)
    )


def main() -> None:
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    x = torch.randn(8, 512)
    found = {"ddp": calls(DDP(model()), x)}
    m = model()
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    found["fsdp2"] = calls(m, x)
    # The calls collectives.py times, for comparison (same c10d ops expected).
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    n = dist.get_world_size()
    a, b = torch.ones(4096), torch.empty(4096 * n)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        dist.all_reduce(b)
        ag(b, a)
        rs(a, b)
    found["collectives.py"] = collections.Counter(
        (e.name, str(e.input_shapes)[:60]) for e in prof.events() if any(k in e.name.lower() for k in KEYS)
    )
    if dist.get_rank() == 0:
        print(f"torch {torch.__version__}, backend {dist.get_backend()}")
        for name, c in found.items():
            print(f"== {name}")
            for (op, shapes), k in sorted(c.items()):
                print(f"  {k:3d} x {op:32} {shapes}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
