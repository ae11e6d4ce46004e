"""Time and page faults per call of gloo's all_gather, reduce_scatter and all_reduce around
glibc's 32 MiB mmap threshold, in one fresh process pair.

gloo's all_gather and reduce_scatter allocate a temporary as large as the message at every
call (simdl.collectives.regimes, "The allocator's step"). Whether that temporary faults its
pages in depends on the process's heap: glibc's dynamic mmap threshold rises to the largest
mapped chunk freed so far (up to 32 MiB) and the heap's top is trimmed past twice that
(mallopt(3), M_MMAP_THRESHOLD / M_TRIM_THRESHOLD). This script measures, per call, the time
(lower quartile of ``CALLS``) and the minor faults (getrusage, host page size) as a fraction
of the message, at sizes from 8 to 47 MB. ``warm`` first makes one 256 MB call of each
collective (the threshold at its 32 MiB maximum, as after calibration's first pass); ``cold``
does not.

Run: ``python -m torch.distributed.run --standalone --nproc-per-node=2
benchmarks/gloo_temp_faults_cpu.py cold|warm`` (about 20 s). On the AMD EPYC VM
(2026-11-27 19:10 UTC), reduce_scatter of 23.7 MB: 34.6 ms (cold), 29.2 ms (warm), against
40.8 ms in calibration run calibrate-20261127T121558Z (lab/CALIBRATION.md); faults below
32 MiB 0-0.65 of the message per call, from 32 MiB 0.63-1.0.
"""

from __future__ import annotations

import os
import resource
import sys
import time

import torch
import torch.distributed as dist

SIZES = (8388608, 11863296, 16777216, 23726592, 33554432, 47453184)
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
CALLS = 8
PAGE = os.sysconf("SC_PAGE_SIZE")


def _op(collective: str, elems: int, n: int):
    if collective == "all_reduce":
        x = torch.ones(elems)
        return lambda: dist.all_reduce(x)
    if collective == "all_gather":
        x, y = torch.ones(elems // n), torch.empty(elems)
        return lambda: dist.all_gather_into_tensor(y, x)
    x, y = torch.ones(elems), torch.empty(elems // n)
    return lambda: dist.reduce_scatter_tensor(y, x)


def _time(collective: str, nbytes: int, n: int, calls: int = CALLS) -> tuple[float, float]:
    """(lower-quartile seconds per call, faulted bytes per call / message bytes)."""
    f = _op(collective, nbytes // 4, n)
    f()
    dist.barrier()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    times.sort()
    return times[len(times) // 4], faults * PAGE / calls / nbytes


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "cold"
    if mode not in ("cold", "warm"):
        sys.exit(f"mode {mode!r}: accepted cold, warm")
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    n, rank = dist.get_world_size(), dist.get_rank()
    if mode == "warm":
        for c in COLLECTIVES:
            _time(c, 268435456, n, calls=2)
    for nbytes in SIZES:
        for c in COLLECTIVES:
            t, faults = _time(c, nbytes, n)
            if rank == 0:
                print(f"{mode} {c:15s} {nbytes:10d} B {1e3 * t:8.2f} ms  faults {faults:5.2f} x message", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
