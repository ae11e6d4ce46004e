"""The measured figures a CPU device file (simdl/cluster/data/gpus/cpu*.yaml) cites.

    python benchmarks/device_peaks_cpu.py

Prints, for this host: the processor (model name, family/model, caches, MHz, AVX-512 flags),
MemTotal, the memory bandwidth of np.copyto on a 512 MiB float32 array (read + write bytes
counted; 1 thread, and 2 threads on halves), and float32 matmul GFLOP/s of torch.mm on one
thread (2048 x 2048, the per-core figure) and on every core, and of numpy (OpenBLAS) at
N = 2048 and 4096. The device files before this script quote the same measurements made by
hand; run it on an idle machine (it takes about a minute) and quote median and best.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np


def _timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def copy_bandwidth(threads: int, mib: int = 512, repeats: int = 9) -> list[float]:
    """GB/s of np.copyto over a ``mib`` MiB float32 array split among ``threads`` threads
    (numpy releases the GIL in copyto), counting the bytes read and the bytes written."""
    n = mib * 2**20 // 4
    src, dst = np.ones(n, np.float32), np.zeros(n, np.float32)
    np.copyto(dst, src)  # touch every page once: the first pass pays the page faults
    parts = np.array_split(np.arange(n), threads)
    bounds = [(p[0], p[-1] + 1) for p in parts]

    def run() -> None:
        ts = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return [2 * n * 4 / s / 1e9 for s in _timed(run, repeats)]


def torch_mm(n: int, threads: int, repeats: int = 5) -> list[float]:
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    return [2 * n**3 / s / 1e9 for s in _timed(lambda: torch.mm(a, b), repeats)]


def numpy_mm(n: int, repeats: int = 5) -> list[float]:
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    a @ b
    return [2 * n**3 / s / 1e9 for s in _timed(lambda: a @ b, repeats)]


def _line(label: str, values: list[float], unit: str) -> str:
    return f"{label:<44} median {statistics.median(values):7.1f}  best {max(values):7.1f} {unit}"


def main() -> None:
    from simdl.cluster.host import cache_sizes, cpu_identity, cpu_model

    ident = cpu_identity()
    mhz = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                mhz = line.split(":")[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    print(
        f"processor: {cpu_model()!r}, family {ident.get('family')} model {ident.get('model')} "
        f"stepping {ident.get('stepping')}, {os.cpu_count()} cores, cpu MHz {mhz}"
    )
    print(f"caches per core: {cache_sizes()}; ISA flags: {ident.get('isa')}")
    print(f"MemTotal {mem_kb} kB = {mem_kb / 2**20:.2f} GiB")
    cores = os.cpu_count() or 1
    print(_line("np.copyto 512 MiB, 1 thread", copy_bandwidth(1), "GB/s"))
    print(_line(f"np.copyto 512 MiB, {cores} threads on parts", copy_bandwidth(cores), "GB/s"))
    print(_line("torch.mm 2048 float32, 1 thread", torch_mm(2048, 1), "GFLOP/s"))
    print(_line(f"torch.mm 2048 float32, {cores} threads", torch_mm(2048, cores), "GFLOP/s"))
    for n in (2048, 4096):
        print(_line(f"numpy float32 matmul N={n} ({np.__version__})", numpy_mm(n), "GFLOP/s"))


if __name__ == "__main__":
    main()
