"""Stage 1: collective bandwidth against message size, the way nccl-tests measures it.

For each collective (all_reduce, all_gather, reduce_scatter, broadcast, send/recv) and
message size (4 KB .. 256 MB, ``--points-per-octave`` sizes per doubling, bounded by the
time budget): ``warmup`` untimed calls, then ``iters`` calls back to back between two
barriers, timed on every rank, in ``--chunks`` chunks of ~30 ms. The time of one call is
the average over the fastest chunk (see ``time_op``); algbw = bytes / time and busbw =
algbw x nccl-tests' bus factor (doc/PERFORMANCE.md; simdl.collectives.cost). The grid is
walked ``--passes`` times (alternately small-first and large-first, keys
``<scope>/<collective>/<bytes>/p<pass>``), so that the chunks of one size are spread over
the whole stage: on the shared 2-core VM this was written on, a small call either takes
~0.1 ms or waits for a 4 ms scheduler tick, and the slow mode sticks for a few hundred ms
-- all chunks of a size measured back to back can land in it (7 such chunks in a row
scattered by 20-50 %, up to 10x, between three repeats). The fit takes the 25th percentile
of all chunks of a size (simdl/calibrate/fit.py, ``_collective_points``).
Defaults: 7 passes x 2 chunks (about 5 minutes for 33 sizes x 5 collectives at 2 ranks; 12.5
minutes at 4 ranks with the sub2 groups, 2026-11-28 on the 2-core EPYC VM);
``--quick``: 3 passes x 2 chunks, one size per octave, up to 64 MB.
Bytes are counted as nccl-tests counts them: the whole buffer for all_reduce/broadcast,
the gathered output for all_gather, the input for reduce_scatter, the message for
send/recv (every rank sends to the next and receives from the previous at once).
all_gather and reduce_scatter are the calls FSDP2 makes (``all_gather_single`` /
``reduce_scatter_single``); all_reduce is DDP's bucket all-reduce.

Groups: ``world``; ``self`` (a one-rank group per rank, smallest size only: the fixed cost
of a call that moves nothing); and with several nodes also ``intra`` (the ranks of this
node, all nodes at once) and ``inter`` (one rank per node with the same local rank), so the
fit can tell the node's fabric from the network.

Sub-node groups (``sub<d>``, with ``--subgroups``, the default): for every proper divisor d >= 2
of the ranks per node, the node's ranks split into groups of d consecutive ranks, every group
calling at once -- what FSDP2's hybrid sharding does with a shard group smaller than a node
(its shard groups all-gather and reduce-scatter at once, its replicate groups all-reduce at
once). Only those three collectives. On a host whose ranks share cores and memory the
concurrent groups contend: two 2-rank all-gathers of 128-400 MiB cost 0.90-1.41 of one 4-rank
all-gather, where the ring's (n-1)/n factor says 0.67 (benchmarks/gloo_group_size_cpu.py,
2026-11-28), so a curve of the whole node does not price them. The groups are consecutive
ranks; FSDP2's replicate groups are strided (torch.distributed.device_mesh is row-major), the
same thing on one host's shared memory (on GPUs it depends on the node's links).

Run: torchrun --nproc-per-node 2 calibration/collectives.py --out runs/x/collectives
"""

from __future__ import annotations

import argparse
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
# What FSDP2's hybrid sharding calls over groups smaller than a node (module docstring).
SUBGROUP_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


def subgroup_sizes(ranks_per_node: int) -> list[int]:
    """Group sizes d, 2 <= d < ranks_per_node, that divide the node's ranks."""
    return [d for d in range(2, ranks_per_node) if ranks_per_node % d == 0]


# The calls FSDP2 makes (torch 2.14 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
# DefaultAllGather / DefaultReduceScatter): dist.all_gather_single and
# dist.reduce_scatter_single, which reach c10d::_allgather_base_ / _reduce_scatter_base_ (the
# profiler shows gloo running the latter as gloo:all_reduce of the whole input). Older torch
# has them as all_gather_into_tensor / reduce_scatter_tensor (same c10d ops); DDP's buckets go
# through c10d::allreduce_ = dist.all_reduce.
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# nccl-tests' busbw / algbw factor: the one simdl's cost model uses.
from simdl.collectives.cost import bus_bytes_factor as bus_factor  # noqa: E402


def make_op(collective: str, nbytes: int, group, group_ranks: list[int], rank: int, device):
    """(A zero-argument callable running one collective of about ``nbytes``, the bytes it
    really moves in nccl-tests counting: whole fp32 elements, divisible by the group size)."""
    n = len(group_ranks)
    elems = max(1, nbytes // 4)
    elems -= elems % n  # divisible by the group size for gather/scatter
    elems = max(elems, n)
    return _op(collective, elems, group, group_ranks, rank, device), 4 * elems


def _op(collective: str, elems: int, group, group_ranks: list[int], rank: int, device):
    n = len(group_ranks)
    if collective == "all_reduce":
        x = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(x, group=group)
    if collective == "all_gather":
        x = torch.ones(elems // n, device=device)
        y = torch.empty(elems, device=device)
        return lambda: ALL_GATHER(y, x, group=group)
    if collective == "reduce_scatter":
        x = torch.ones(elems, device=device)
        y = torch.empty(elems // n, device=device)
        return lambda: REDUCE_SCATTER(y, x, group=group)
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


def sizes(lo: int, hi: int, per_octave: int) -> list[int]:
    """``per_octave`` sizes per doubling from ``lo`` to ``hi``, geometric, rounded to 64 bytes
    (whole fp32 elements, divisible by every group size up to 16)."""
    out = []
    i = 0
    while True:
        s = int(round(lo * 2 ** (i / per_octave) / 64)) * 64
        if s > hi:
            return out
        if not out or s > out[-1]:
            out.append(s)
        i += 1


def time_op(ctx, op, quick: bool, chunks: int) -> dict:
    """Warm-up calls, then chunks of back-to-back calls between barriers; every rank uses the
    same counts. Returns the fastest chunk's seconds per call and every chunk's."""
    ctx.sync()
    t0 = time.perf_counter()
    op()
    ctx.sync()
    probe = torch.tensor([time.perf_counter() - t0], device=ctx.device)
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    per = max(float(probe.item()), 1e-6)
    # Calls per chunk: ~target s of timed calls, at least 1 (a 256 MB call is ~0.2 s here).
    target = 0.02 if quick else 0.03
    iters = int(min(100, max(1, math.ceil(target / per))))
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
    return {"time_s": min(chunk_times), "chunk_times_s": chunk_times, "iters": iters, "warmup": warmup}


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--min-bytes", type=int, default=4 * 1024)
    p.add_argument("--max-bytes", type=int, default=256 * 1024 * 1024)
    p.add_argument(
        "--points-per-octave",
        type=int,
        default=2,
        help="message sizes per doubling (2: powers of 2 and the geometric midpoints); --quick: 1",
    )
    p.add_argument("--chunks", type=int, default=2, help="timed chunks per size and pass")
    p.add_argument(
        "--passes",
        type=int,
        default=7,
        help="passes over the whole grid (alternately small-first and large-first); the fit takes "
        "the 25th percentile of all their chunks; --quick: 3",
    )
    p.add_argument("--collectives", default=",".join(COLLECTIVES))
    p.add_argument(
        "--subgroups",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time groups smaller than a node, all at once (scopes sub<d>; module docstring)",
    )
    args = p.parse_args()
    ctx = setup(args, STAGE)
    per_octave = args.points_per_octave if not args.quick else min(args.points_per_octave, 1)
    max_bytes = args.max_bytes if not args.quick else min(args.max_bytes, 64 * 1024 * 1024)
    # --quick keeps the pass structure (what makes a size's time robust to the host's slow
    # spells) and cuts the grid: 3 passes instead of 7, one size per octave up to 64 MB.
    passes = args.passes if not args.quick else min(args.passes, 3)
    chunks = args.chunks
    msg_sizes = sizes(args.min_bytes, max_bytes, per_octave)
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
    if args.subgroups:
        lw = ctx.local_world
        for d in subgroup_sizes(lw):
            for node in range(ctx.nodes):
                for start in range(0, lw, d):
                    ranks = list(range(node * lw + start, node * lw + start + d))
                    g = dist.new_group(ranks)  # every rank creates every group
                    if ctx.rank in ranks:
                        groups.append((f"sub{d}", g, ranks))
    # 'self': a one-rank group per rank. Its collectives move no bytes but pay the per-call
    # cost (Python and c10d dispatch, the hand-off to gloo's worker thread and back): the fit
    # uses it as the fixed overhead per call, which a 2-rank curve alone cannot tell apart
    # from the per-ring-step latency (see simdl.collectives.regimes).
    self_group = None
    for r in range(ctx.world):
        g = dist.new_group([r])
        if r == ctx.rank:
            self_group = g
    self_colls = [c for c in colls if c != "send_recv"]

    def key(scope, coll, nbytes, k):
        return f"{scope}/{coll}/{nbytes}/p{k}"

    order = []
    for k in range(passes):
        # Pass 0 small sizes first across all collectives (a short budget still covers every
        # collective); later passes alternate direction so that slow drifts of the host's load
        # do not line up with message size.
        seq = msg_sizes if k % 2 == 0 else msg_sizes[::-1]
        order += [(k, "self", self_group, [ctx.rank], c, msg_sizes[0]) for c in self_colls]
        order += [
            (k, scope, g, ranks, c, s)
            for s in seq
            for scope, g, ranks in groups
            for c in colls
            if not scope.startswith("sub") or c in SUBGROUP_COLLECTIVES
        ]
    plan(ctx, [key(sc, c, s, k) for k, sc, _, _, c, s in order])
    done = agreed_done(ctx)
    stopped = False
    for k, scope, group, ranks, coll, nbytes in order:
        kk = key(scope, coll, nbytes, k)
        if kk in done:
            continue
        if not within_budget(ctx, 0.5):
            stopped = True
            break
        op, actual = make_op(coll, nbytes, group, ranks, ctx.rank, ctx.device)
        m = time_op(ctx, op, args.quick, chunks)
        n = len(ranks)
        algbw = actual / m["time_s"]
        ctx.log.measurement(
            kk,
            kind="collective",
            scope=scope,
            collective=coll,
            bytes=actual,
            group_size=n,
            repeat=k,
            **m,
            algbw_GB_per_s=algbw / 1e9,
            busbw_GB_per_s=algbw * bus_factor(coll, n) / 1e9,
        )
        del op
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
