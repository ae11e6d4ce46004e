"""Probe (not part of calibration): does a synchronous gloo collective block the calling
thread on CPU for its whole duration, as FSDP2 issues them?

    torchrun --nproc-per-node=2 benchmarks/fsdp2_blocking_cpu.py

Why: FSDP2 calls its reduce-scatter and HSDP all-reduce with ``async_op=False`` and
unshards with ``unshard_async_op=False`` (torch/distributed/fsdp/_fully_shard/
_fsdp_collectives.py ``foreach_reduce``, _fsdp_param_group.py), and c10d then calls
``work.wait()`` (distributed_c10d.py). On CUDA that only orders streams; on gloo's CPU work
it waits on the host, so on a CPU cluster the training thread cannot compute while an FSDP2
collective runs; simdl's FSDP plan blocks the same way on CPU clusters
(simdl/strategies/fsdp.py ``collectives_block``).

Run on the 2-core VM, 2026-11-24 (64 MiB, three repeats, ms):

    collective      sync call returns   async call returns   async wait() returns
    reduce_scatter    82 / 93 / 80         27 / 27 / 26          77 / 73 / 78
    all_reduce        53 / 52 / 44          1.3 / 0.1 / 0.2      48 / 53 / 53
    all_gather        82 / 65 / 67          0.3 / 0.2 / 0.3      60 / 72 / 59

so a synchronous call holds the thread for the whole collective. (gloo's reduce-scatter
also does about a third of its work on the calling thread before it returns the handle.)
"""

import time

import torch
import torch.distributed as dist

NUMEL = 16 << 20  # 64 MiB of fp32


def main() -> None:
    torch.set_num_threads(1)  # one core per rank, as validate/train.py runs
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.ones(NUMEL)
    out = torch.empty(NUMEL // world)
    cases = {
        "reduce_scatter": lambda a: dist.reduce_scatter_tensor(out, x, async_op=a),
        "all_reduce": lambda a: dist.all_reduce(x, async_op=a),
        "all_gather": lambda a: dist.all_gather_into_tensor(x, out, async_op=a),
    }
    for name, call in cases.items():
        call(False)  # warm-up
        for _ in range(3):
            dist.barrier()
            t = time.perf_counter()
            call(False)
            sync = time.perf_counter() - t
            dist.barrier()
            t = time.perf_counter()
            work = call(True)
            issued = time.perf_counter() - t
            work.wait()
            done = time.perf_counter() - t
            if rank == 0:
                print(
                    f"{name:15s} sync call returns after {sync * 1e3:6.1f} ms; async call returns after "
                    f"{issued * 1e3:6.2f} ms, wait() after {done * 1e3:6.1f} ms"
                )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
