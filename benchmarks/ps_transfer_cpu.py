"""CPU time of a parameter-server transfer on one host, per second of its wall time.

On a shared-device cluster (cpu-local) the PS workers and the server are processes on the
same cores, so the cores a push or pull keeps busy are taken from the workers' compute
(simdl.analytic.engine.shared_host_bound). This script measures how many: two processes,
``torch.distributed.rpc`` over TensorPipe's uv transport as validate/train.py runs it; the
worker sends an fp32 tensor and gets one of the same size back (a push and a pull), and
both processes' user + system CPU time (getrusage) is summed over the timed repeats and
divided by the wall time. 1.0 = one core busy for the duration of the transfer.

Run: ``python benchmarks/ps_transfer_cpu.py`` (about 30 s). On this 2-core host
(2026-11-23): 1.01 to 1.02 at 16, 64 and 256 MiB (two runs).
"""

from __future__ import annotations

import os
import resource
import time

MiB = 2**20
SIZES_MIB = (16, 64, 256)
REPEATS = 10
_STORE: dict = {}


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _echo(t):
    # The server answers with a tensor of the same size (a pull), like a snapshot.
    return _STORE.setdefault(t.numel(), t.new_ones(t.shape)).clone()


def _server_cpu_s() -> float:
    return _cpu_s()


def _run(rank: int, nbytes: int, port: int) -> None:
    import torch
    import torch.distributed.rpc as rpc

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, _transports=["uv"])
    rpc.init_rpc(f"p{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 1:
        x = torch.ones(nbytes // 4)
        for _ in range(3):  # warm-up: connections, allocator
            rpc.rpc_sync("p0", _echo, args=(x,))
        s0, c0, t0 = rpc.rpc_sync("p0", _server_cpu_s), _cpu_s(), time.perf_counter()
        for _ in range(REPEATS):
            rpc.rpc_sync("p0", _echo, args=(x,))
        wall = time.perf_counter() - t0
        c1, s1 = _cpu_s(), rpc.rpc_sync("p0", _server_cpu_s)
        print(
            f"{nbytes / MiB:6.0f} MiB push + pull: wall {wall / REPEATS * 1e3:7.1f} ms, worker CPU "
            f"{(c1 - c0) / REPEATS * 1e3:7.1f} ms, server CPU {(s1 - s0) / REPEATS * 1e3:7.1f} ms, "
            f"CPU / wall {((c1 - c0) + (s1 - s0)) / wall:.2f}",
            flush=True,
        )
    rpc.shutdown()


def main() -> None:
    import torch.multiprocessing as mp

    for i, mib in enumerate(SIZES_MIB):
        mp.spawn(_run, args=(mib * MiB, 29533 + i), nprocs=2)


if __name__ == "__main__":
    main()
