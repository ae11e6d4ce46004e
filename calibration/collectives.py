"""Stage 1: collective bandwidth against message size, the way nccl-tests measures it.

For each collective (all_reduce, all_gather, reduce_scatter, broadcast, send/recv) and
message size (4 KB .. 256 MB, doubling by ``--step`` powers of two, bounded by the time
budget): ``warmup`` untimed calls, then ``iters`` calls back to back between two barriers,
timed on every rank, in 3-5 chunks. The time of one call is the average over the
fastest chunk (see below); algbw = bytes / time and
busbw = algbw x nccl-tests' bus factor (doc/PERFORMANCE.md; simdl.collectives.cost).
Bytes are counted as nccl-tests counts them: the whole buffer for all_reduce/broadcast,
the gathered output for all_gather, the input for reduce_scatter, the message for
send/recv (every rank sends to the next and receives from the previous at once).

Groups: ``world``; and with several nodes also ``intra`` (the ranks of this node, all
nodes at once) and ``inter`` (one rank per node with the same local rank), so the fit can
tell the node's fabric from the network.

Run: torchrun --nproc-per-node 2 calibration/collectives.py --out runs/x/collectives
"""

from __future__ import annotations

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _common import agreed_done, base_parser, finish, plan, setup, within_budget  # noqa: E402

STAGE = "collectives"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv")


# nccl-tests' busbw / algbw factor: the one simdl's cost model uses.
from simdl.collectives.cost import bus_bytes_factor as bus_factor  # noqa: E402


def make_op(collective: str, nbytes: int, group, group_ranks: list[int], rank: int, device):
    """A zero-argument callable running one collective of ``nbytes`` (nccl-tests counting)."""
    n = len(group_ranks)
    elems = max(1, nbytes // 4)
    elems -= elems % n  # divisible by the group size for gather/scatter
    elems = max(elems, n)
    if collective == "all_reduce":
        x = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(x, group=group)
    if collective == "all_gather":
        x = torch.ones(elems // n, device=device)
        y = torch.empty(elems, device=device)
        return lambda: dist.all_gather_into_tensor(y, x, group=group)
    if collective == "reduce_scatter":
        x = torch.ones(elems, device=device)
        y = torch.empty(elems // n, device=device)
        return lambda: dist.reduce_scatter_tensor(y, x, group=group)
    if collective == "broadcast":
        x = torch.ones(elems, device=device)
        src = group_ranks[0]
        return lambda: dist.broadcast(x, src, group=group)
    if collective == "send_recv":
        x = torch.ones(elems, device=device)
        y = torch.empty(elems, device=device)
        me = group_ranks.index(rank)
        nxt, prv = group_ranks[(me + 1) % n], group_ranks[(me - 1) % n]

        def sendrecv():
            reqs = [dist.isend(x, nxt, group=group), dist.irecv(y, prv, group=group)]
            for r in reqs:
                r.wait()
        return sendrecv
    raise ValueError(collective)


def sizes(lo: int, hi: int, step: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2 ** step
    return out


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--min-bytes", type=int, default=4 * 1024)
    p.add_argument("--max-bytes", type=int, default=256 * 1024 * 1024)
    p.add_argument("--step", type=int, default=1, help="size multiplies by 2**step")
    p.add_argument("--collectives", default=",".join(COLLECTIVES))
    args = p.parse_args()
    ctx = setup(args, STAGE)
    step = args.step if not args.quick else max(args.step, 2)
    max_bytes = args.max_bytes if not args.quick else min(args.max_bytes, 64 * 1024 * 1024)
    msg_sizes = sizes(args.min_bytes, max_bytes, step)
    colls = [c for c in args.collectives.split(",") if c]

    # Groups: world always; intra/inter only with several nodes (all ranks create every group).
    groups: list[tuple[str, object, list[int]]] = [("world", None, list(range(ctx.world)))]
    if ctx.nodes > 1:
        lw = ctx.local_world
        for node in range(ctx.nodes):
            ranks = list(range(node * lw, (node + 1) * lw))
            g = dist.new_group(ranks)
            if ctx.node == node and lw > 1:
                groups.append(("intra", g, ranks))
        for local in range(lw):
            ranks = [n * lw + local for n in range(ctx.nodes)]
            g = dist.new_group(ranks)
            if ctx.local_rank == local:
                groups.append(("inter", g, ranks))

    keys = [f"{scope}/{c}/{s}" for scope, _, _ in groups for c in colls for s in msg_sizes]
    plan(ctx, keys)
    done = agreed_done(ctx)
    stopped = False
    # Small sizes first across all collectives, so a short budget still covers every collective.
    order = [(s, scope, g, ranks, c) for s in msg_sizes for scope, g, ranks in groups for c in colls]
    for nbytes, scope, group, ranks, coll in order:
        key = f"{scope}/{coll}/{nbytes}"
        if key in done:
            continue
        if not within_budget(ctx, 0.5):
            stopped = True
            break
        op = make_op(coll, nbytes, group, ranks, ctx.rank, ctx.device)
        # Calls per chunk: aim for ~target s of timed calls per chunk, at least 2.
        ctx.sync()
        t0 = time.perf_counter()
        op()
        ctx.sync()
        first = time.perf_counter() - t0
        probe = torch.tensor([first], device=ctx.device)
        dist.all_reduce(probe, op=dist.ReduceOp.MAX)  # all ranks use the same counts
        per = max(float(probe.item()), 1e-6)
        target = 0.02 if args.quick else 0.05
        iters = int(min(100, max(2, math.ceil(target / per))))
        chunks = 5 if args.quick else 7
        warmup = min(5, max(1, iters // 4))
        for _ in range(warmup):
            op()
        chunk_times = []
        for _ in range(chunks):
            ctx.sync()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                op()
            ctx.sync()
            chunk_times.append((time.perf_counter() - t0) / iters)
        dist.barrier()
        # The fastest chunk: the timeit rule ("the lowest value gives a lower bound for how fast
        # your machine can run the code; higher values are typically caused by other processes
        # interfering", Python docs) -- on a shared host the median drifts with others' load.
        t = min(chunk_times)
        n = len(ranks)
        algbw = nbytes / t
        ctx.log.measurement(key, kind="collective", scope=scope, collective=coll, bytes=nbytes,
                            group_size=n, iters=iters, warmup=warmup, time_s=t, chunk_times_s=chunk_times,
                            algbw_GB_per_s=algbw / 1e9, busbw_GB_per_s=algbw * bus_factor(coll, n) / 1e9)
        del op
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
