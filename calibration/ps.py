"""Stage 4: parameter-server push/pull round trip against message size, and update throughput.

Rank 0 plays the server, every other rank a worker. For each message size (4 KB ..
64 MB), each worker in turn pushes ``m`` bytes (gradients) and pulls ``m`` bytes back
(parameters): the round trip, timed on the worker, fastest of repeats. The server
measures its optimizer update: momentum SGD on a flat fp32 tensor (``buf.mul_(0.9)
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
    keys = [f"roundtrip/{s}" for s in sizes] + [f"update/{s}" for s in upd_sizes]
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
        ctx.log.measurement(key, kind="ps_roundtrip", bytes=nbytes, times_s=times, time_s=med,
                            role="server" if ctx.rank == 0 else "worker", repeats=repeats)
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
            param, grad, mom = torch.randn(n, device=ctx.device), torch.randn(n, device=ctx.device), torch.zeros(n, device=ctx.device)

            def update():
                mom.mul_(0.9).add_(grad)
                param.add_(mom, alpha=-0.01)

            update()
            times = timed(ctx, update, repeats)
            med = sorted(times)[len(times) // 2]
            rec = {"times_s": times, "time_s": med, "passes": MOMENTUM_PASSES,
                   "streamed_bytes": MOMENTUM_PASSES * nbytes}
        dist.barrier()
        ctx.log.measurement(key, kind="ps_update", bytes=nbytes, role="server" if ctx.rank == 0 else "worker", **rec)
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
