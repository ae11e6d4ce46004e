"""gloo collectives on one host at 4 ranks: one call over the world against two concurrent
calls over pairs (the shard groups of a 2 x 2 HSDP mesh), the same full buffer, and what a
4-rank profile charges each.

Why: simdl prices a collective over a group smaller than the one its profile's curves were
measured on by ring factors (simdl.collectives.regimes.RegimeCurve.parts: (n-1)/n of the
buffer for an all-gather or reduce-scatter, 2(n-1)/n for an all-reduce), so a 2-rank call
costs 0.67 of a 4-rank one. lab/CAMPAIGN.md, "Hybrid sharding on one host": VGG16 hybrid
(2 x 2) measured 4.7 % slower than full sharding, predicted 6.2 % faster. This script checks
the factor for each collective on the machine itself, outside training.

Per collective and size (16 / 128 / 400 MiB full buffer), the median of ``REPS`` calls of
the slowest rank (after one untimed call), world and pairs back to back; then the same
calls priced by ``--cluster`` (default lab/profiles/cpu-epyc-x4.yaml: its curves were measured at 4 ranks).

Run: ``python -m torch.distributed.run --standalone --nproc-per-node=4
benchmarks/gloo_group_size_cpu.py [--cluster NAME]`` (about 90 s). On the AMD EPYC VM,
idle, two runs (2026-11-28 00:04 and 00:06 UTC), pairs / world at 16 / 128 / 400 MiB,
measured against cpu-epyc-x4's factor:

- all_gather 1.15 / 1.41 / 0.90 and 1.18 / 0.90 / 0.93, against 1.09 / 0.67 / 0.67;
- reduce_scatter 0.80 / 0.73 / 0.71 and 0.63 / 0.83 / 0.77, against 0.89 / 0.66 / 0.66;
- all_reduce 0.75 / 0.78 / 0.76 and 0.88 / 0.66 / 0.57, against 0.67.

Two concurrent 2-rank all-gathers of 128-400 MiB cost 0.90-1.41 of one 4-rank all-gather,
where the ring factor says 0.67 (each rank still writes the whole output); reduce-scatter
and all-reduce scale about as the factor says, within this VM's run-to-run spread.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

LAB_PROFILES = Path(__file__).resolve().parents[1] / "lab" / "profiles"

REPS = 5
SIZES_MIB = (16, 128, 400)
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


def _call(op: str, full: torch.Tensor, shard: torch.Tensor, group) -> None:
    if op == "all_gather":
        dist.all_gather_into_tensor(full, shard, group=group)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(shard, full, group=group)
    else:
        dist.all_reduce(full, group=group)


def measure(rank: int) -> dict[tuple[str, int, str], float]:
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates every group
    mine = pairs[rank // 2]
    out = {}
    for mib in SIZES_MIB:
        elems = mib * 2**20 // 4
        for op in COLLECTIVES:
            for label, group, n in (("world", None, 4), ("pairs", mine, 2)):
                full, shard = torch.ones(elems), torch.ones(elems // n)
                times = []
                for k in range(REPS + 1):
                    dist.barrier()
                    t0 = time.perf_counter()
                    _call(op, full, shard, group)
                    dt = torch.tensor([time.perf_counter() - t0])
                    dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank's call
                    if k:
                        times.append(float(dt))
                out[(op, mib, label)] = statistics.median(times)
    return out


def table(measured: dict, cluster: str) -> str:
    from simdl.analytic.costs import CommCosts

    from simdl.cluster import allocate

    costs = CommCosts(allocate(cluster, 4))
    lines = [
        f"| collective | full buffer | world, measured | pairs, measured | pairs / world | {cluster}: world | pairs | "
        "pairs / world |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op in COLLECTIVES:
        for mib in SIZES_MIB:
            w, p = measured[(op, mib, "world")], measured[(op, mib, "pairs")]
            mw, mp = costs.time(op, mib * 2**20, 4, "intra"), costs.time(op, mib * 2**20, 2, "intra")
            lines.append(
                f"| {op} | {mib} MiB | {w * 1e3:.0f} ms | {p * 1e3:.0f} ms | {p / w:.2f} | "
                f"{mw * 1e3:.0f} ms | {mp * 1e3:.0f} ms | {mp / mw:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cluster",
        default=str(LAB_PROFILES / "cpu-epyc-x4.yaml"),
        help="profile whose prices to compare (default lab/profiles/cpu-epyc-x4.yaml)",
    )
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if dist.get_world_size() != 4:
        raise SystemExit(f"needs 4 ranks (--nproc-per-node=4); got {dist.get_world_size()}")
    measured = measure(rank)
    dist.destroy_process_group()
    if rank == 0:
        print(table(measured, args.cluster))


if __name__ == "__main__":
    main()
