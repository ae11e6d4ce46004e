"""Stage 4: parameter-server push/pull round trip against message size, and update throughput.

Rank 0 plays the server, every other rank a worker.

* Ping-pong over the process group (4 KB .. 64 MB): each worker in turn sends ``m`` bytes
  and receives ``m`` bytes back into the same buffer, fastest of repeats. Its latency is
  the one-way latency between two processes (the profile's intra-node latency on a
  shared host).
* The parameter server's own transport, ``torch.distributed.rpc`` over TensorPipe (the
  transports of validate/train.py, ``RPC_TRANSPORTS``), 1 MiB .. 256 MiB: a push is an
  RPC carrying an fp32 tensor of ``m`` bytes, a pull an RPC whose answer is one; the
  receiver materialises each message in a freshly allocated buffer, as the real server
  and workers do. ``rpc_alone``: each worker in turn, the others idle (per-worker link:
  latency and bandwidth). ``rpc_together``: every worker pushes at once, then every
  worker pulls at once (an incast: the server side's bandwidth, shared). Medians of
  repeats: a message this large is never the fastest by luck. CPU tensors on every
  device: the server is a host process (on GPU clusters the worker's device-to-host copy
  is priced with the worker's compute).
* The server's optimizer update: momentum SGD on a flat fp32 tensor (``buf.mul_(0.9)
  .add_(g); p.add_(buf, alpha=-lr)``: 8 parameter-sized passes, see
  simdl.strategies.optimizer_step) against size -> the bytes/s the update streams at.

Run: torchrun --nproc-per-node 2 calibration/ps.py --out runs/x/ps
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from _common import agreed_done, base_parser, finish, plan, setup, timed, within_budget  # noqa: E402

STAGE = "ps"
MOMENTUM_PASSES = 8  # simdl.strategies.optimizer_step.PASSES["momentum"]
# TensorPipe transports, as validate/train.py runs its parameter server (uv: TCP; on one
# host, loopback). A cluster whose PS runs over another transport measures that one here.
RPC_TRANSPORTS = ["uv"]
MiB = 1024 * 1024

# The server's side of the RPC measurements: a pull answers with a kept tensor (not a copy:
# the server's snapshot copy is priced on its own, simdl.analytic.engine.ps_snapshot_time).
_KEPT: dict[int, torch.Tensor] = {}


def _rpc_push(t: torch.Tensor) -> None:
    return None


def _rpc_pull(numel: int) -> torch.Tensor:
    return _KEPT.setdefault(numel, torch.ones(numel))


def _rpc_sizes(quick: bool) -> list[int]:
    return [MiB, 16 * MiB, 64 * MiB] if quick else [MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]


def _median(xs: list[float]) -> float | None:
    return sorted(xs)[len(xs) // 2] if xs else None


def measure_rpc(ctx, args, done: set[str], repeats: int) -> bool:
    """The rpc_alone / rpc_together measurements; False when the budget ran out."""
    from torch.distributed import rpc

    if ctx.world < 2:
        return True
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=max(8, 2 * ctx.world), rpc_timeout=600, _transports=RPC_TRANSPORTS
    )
    rpc.init_rpc(
        "ps" if ctx.rank == 0 else f"worker{ctx.rank}", rank=ctx.rank, world_size=ctx.world, rpc_backend_options=opts
    )
    workers = list(range(1, ctx.world))
    ok = True

    def push_pull(buf: torch.Tensor) -> tuple[float, float]:
        t0 = time.perf_counter()
        rpc.rpc_sync("ps", _rpc_push, args=(buf,))
        t1 = time.perf_counter()
        got = rpc.rpc_sync("ps", _rpc_pull, args=(buf.numel(),))
        t2 = time.perf_counter()
        del got
        return t1 - t0, t2 - t1

    for nbytes in _rpc_sizes(ctx.quick):
        if not within_budget(ctx, 0.5):
            ok = False
            break
        buf = torch.ones(nbytes // 4)
        key = f"rpc_alone/{nbytes}"
        if key not in done:
            push, pull = [], []
            for w in workers:
                for i in range(repeats + 1):
                    dist.barrier()
                    if ctx.rank == w:
                        a, b = push_pull(buf)
                        if i:  # the first is a warm-up
                            push.append(a)
                            pull.append(b)
            role = "server" if ctx.rank == 0 else "worker"
            ctx.log.measurement(
                key,
                kind="ps_rpc_alone",
                bytes=nbytes,
                push_s=push,
                pull_s=pull,
                push_time_s=_median(push),
                pull_time_s=_median(pull),
                role=role,
                transports=RPC_TRANSPORTS,
                repeats=repeats,
            )
        key = f"rpc_together/{nbytes}"
        if key not in done:
            push, pull = [], []
            for i in range(repeats + 1):
                dist.barrier()  # every worker starts its push at once
                if ctx.rank:
                    t0 = time.perf_counter()
                    rpc.rpc_sync("ps", _rpc_push, args=(buf,))
                    a = time.perf_counter() - t0
                dist.barrier()  # then every worker its pull
                if ctx.rank:
                    t0 = time.perf_counter()
                    got = rpc.rpc_sync("ps", _rpc_pull, args=(buf.numel(),))
                    b = time.perf_counter() - t0
                    del got
                    if i:
                        push.append(a)
                        pull.append(b)
            ctx.log.measurement(
                key,
                kind="ps_rpc_together",
                bytes=nbytes,
                workers=len(workers),
                push_s=push,
                pull_s=pull,
                role="server" if ctx.rank == 0 else "worker",
                transports=RPC_TRANSPORTS,
                repeats=repeats,
            )
        del buf
    dist.barrier()
    rpc.shutdown()
    return ok


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--min-bytes", type=int, default=4 * 1024)
    p.add_argument("--max-bytes", type=int, default=64 * 1024 * 1024)
    args = p.parse_args()
    ctx = setup(args, STAGE)
    step = 4 if args.quick else 2
    sizes, s = [], args.min_bytes
    while s <= args.max_bytes:
        sizes.append(s)
        s *= step
    repeats = 5 if args.quick else 9
    upd_sizes = [s for s in sizes if s >= 1024 * 1024] + [256 * 1024 * 1024]  # up to a 64M-parameter model
    rpc_keys = (
        [f"rpc_{how}/{s}" for s in _rpc_sizes(args.quick) for how in ("alone", "together")] if ctx.world > 1 else []
    )
    keys = [f"roundtrip/{s}" for s in sizes] + rpc_keys + [f"update/{s}" for s in upd_sizes]
    plan(ctx, keys)
    done = agreed_done(ctx)
    stopped = False
    workers = list(range(1, ctx.world))
    for nbytes in sizes:
        key = f"roundtrip/{nbytes}"
        if key in done or not workers:
            continue
        if not within_budget(ctx, 0.5):
            stopped = True
            break
        buf = torch.ones(max(1, nbytes // 4), device=ctx.device)
        per_worker = {}
        for w in workers:
            times = []
            for i in range(repeats + 1):
                if ctx.rank == w:
                    ctx.sync()
                    t0 = time.perf_counter()
                    dist.send(buf, 0)
                    dist.recv(buf, 0)
                    ctx.sync()
                    if i:  # the first is a warm-up
                        times.append(time.perf_counter() - t0)
                elif ctx.rank == 0:
                    dist.recv(buf, w)
                    dist.send(buf, w)
            if ctx.rank == w:
                per_worker[w] = times
            dist.barrier()
        times = per_worker.get(ctx.rank, [])
        med = min(times) if times else None  # fastest: others' load only ever adds time
        ctx.log.measurement(
            key,
            kind="ps_roundtrip",
            bytes=nbytes,
            times_s=times,
            time_s=med,
            role="server" if ctx.rank == 0 else "worker",
            repeats=repeats,
        )
    if not stopped:
        stopped = not measure_rpc(ctx, args, done, repeats)
    for nbytes in upd_sizes:
        key = f"update/{nbytes}"
        if key in done:
            continue
        if stopped or not within_budget(ctx, 0.5):
            stopped = True
            break
        rec = {}
        if ctx.rank == 0:
            n = nbytes // 4
            param, grad, mom = (
                torch.randn(n, device=ctx.device),
                torch.randn(n, device=ctx.device),
                torch.zeros(n, device=ctx.device),
            )

            def update():
                mom.mul_(0.9).add_(grad)
                param.add_(mom, alpha=-0.01)

            update()
            times = timed(ctx, update, repeats)
            med = sorted(times)[len(times) // 2]
            rec = {
                "times_s": times,
                "time_s": med,
                "passes": MOMENTUM_PASSES,
                "streamed_bytes": MOMENTUM_PASSES * nbytes,
            }
        dist.barrier()
        ctx.log.measurement(key, kind="ps_update", bytes=nbytes, role="server" if ctx.rank == 0 else "worker", **rec)
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
