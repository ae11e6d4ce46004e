"""Where an asynchronous parameter server's updates lose staleness: the window between a
worker's own apply and the snapshot its next pull reads.

An update's staleness is the number of other workers' updates applied between the snapshot
its worker pulled and its own apply (validate/train.py). With N workers of equal speed that
is N-1, less the others' applies that land in the worker's *skip window*: from the end of its
own previous apply to its next snapshot. This script splits that window, per steady update,
into its parts from the server's event log and the workers' RPC times (one monotonic clock
for every process on the host; validate/train.py ``push_events``, ``pull_events``,
``rpc_times``):

- push answer: the server's apply done -> the worker's ``rpc_sync`` push returns;
- worker: push returned -> next pull called (the loop, the next batch);
- pull request: pull called -> the request reaches the server's handler;
- lock wait: handler -> lock taken (other updates or snapshots hold it);
- snapshot: lock taken -> snapshot copied (the version is read under the lock, so applies
  cannot land here; shown for completeness).

Windows count from the first snapshot pulled after every worker stopped its profiler, as
validate/train.py's steady staleness does since 2026-11-27.

Usage: python benchmarks/ps_staleness_window.py RUN_WORKDIR [...]
(RUN_WORKDIR: a validate run's directory holding rank0.json ... rankN.json; runs made with
the event log, 2026-11-27 on.)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def analyse(workdir: Path, warmup: int = 2) -> dict:
    ranks = {int(p.stem[4:]): json.loads(p.read_text()) for p in workdir.glob("rank*.json")}
    server = ranks[0]
    t0 = server["events_t0"]
    pushes = [dict(zip(("w", "arrived", "taken", "done", "version"), e)) for e in server["push_events"]]
    pulls = [dict(zip(("w", "arrived", "taken", "done", "version"), e)) for e in server["pull_events"]]
    rpc = {r - 1: [[t - t0 for t in step] for step in ranks[r]["rpc_times"]] for r in ranks if r}
    workers = len(rpc)
    # Steady state ends when the first worker applies its last update.
    last_start = min(max(p["done"] for p in pushes if p["w"] == w) for w in rpc)
    # Every worker's profiler has stopped once each has pulled for step warmup + 1
    # (validate/train.py stops it after step ``warmup``); steady state begins there.
    steady_from = max([p["taken"] for p in pulls if p["w"] == w][warmup + 1] for w in rpc)
    parts = {k: [] for k in ("push answer", "worker", "pull request", "lock wait", "snapshot", "window")}
    skipped, staleness = [], []
    for w in range(workers):
        mine = [p for p in pushes if p["w"] == w]
        pulls_w = [p for p in pulls if p["w"] == w]
        steps = rpc[w]
        # Step k: pull k (snapshot), compute, push k (apply). The window before pull k+1 runs
        # from push k's apply done to pull k+1's snapshot.
        for k in range(warmup, min(len(mine), len(pulls_w), len(steps)) - 1):
            apply_done = mine[k]["done"]
            nxt = pulls_w[k + 1]
            if nxt["taken"] > last_start or nxt["arrived"] < 0 or nxt["taken"] < steady_from:
                continue  # a peer has finished, a pull held by the SSP bound, or profiling
            parts["push answer"].append(steps[k][3] - apply_done)
            parts["worker"].append(steps[k + 1][0] - steps[k][3])
            parts["pull request"].append(nxt["arrived"] - steps[k + 1][0])
            parts["lock wait"].append(nxt["taken"] - nxt["arrived"])
            parts["snapshot"].append(nxt["done"] - nxt["taken"])
            parts["window"].append(nxt["taken"] - apply_done)
            skipped.append(sum(apply_done < p["done"] <= nxt["taken"] for p in pushes if p["w"] != w))
            if k + 1 < len(mine):
                staleness.append(mine[k + 1]["version"] - 1 - nxt["version"])
    cycle = statistics.median(b[0] - a[0] for s in rpc.values() for a, b in zip(s, s[1:]))
    return {
        "workers": workers,
        "updates": len(skipped),
        "cycle_s": cycle,
        "median_s": {k: statistics.median(v) for k, v in parts.items() if v},
        "mean_s": {k: statistics.fmean(v) for k, v in parts.items() if v},
        "skipped_mean": statistics.fmean(skipped) if skipped else None,
        "staleness_mean": statistics.fmean(staleness) if staleness else None,
    }


def main(argv: list[str]) -> int:
    for d in argv:
        r = analyse(Path(d))
        print(
            f"{Path(d).name}: {r['workers']} workers, {r['updates']} steady windows, "
            f"cycle {r['cycle_s'] * 1e3:.0f} ms; staleness {r['staleness_mean']:.2f}, "
            f"others' applies skipped per window {r['skipped_mean']:.2f}"
        )
        for k in r["mean_s"]:
            print(
                f"  {k:13s} mean {r['mean_s'][k] * 1e3:8.1f} ms   median {r['median_s'][k] * 1e3:8.1f} ms"
                f"   ({r['mean_s'][k] / r['cycle_s']:.1%} of a cycle)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
