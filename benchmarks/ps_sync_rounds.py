"""Where a synchronous parameter server's round goes: the server's event log of each round
against the workers' RPC times (one monotonic clock for every process on the host).

Per steady round (the rounds after the warm-up and the profiled step, as step time counts),
medians over the rounds of:

- period: from one round's update done to the next's;
- sum, first push: CPU seconds of the thread that copies the round's first gradient into the
  sum (``sum_cpu_s``; before 2026-11-29 the server cloned it into a fresh buffer) and its
  wall seconds;
- add_, later pushes: CPU seconds of each further gradient's ``add_``;
- mean, update: wall seconds of the sum's ``div_`` and of the optimizer step;
- pulls done spread: from the first worker's pull returning to the last's (the server
  serves snapshots one at a time);
- push calls spread: from the first worker's push call to the last's;
- last push: from the last push call to its arrival at the server's handler (the transfer
  and the receive) and to the round's end;
- with a ``proc_cpu.txt`` beside the logs (benchmarks/proc_cpu_timeline.py): per round, the
  CPU seconds of the busiest processes while the last push was on its way.

Usage: python benchmarks/ps_sync_rounds.py RUN_WORKDIR [...]
(RUN_WORKDIR: a ps-sync validate run's directory holding rank0.json ... rankN.json, made
with the round log, 2026-11-29 on; lab/records/events/xeon-emr-x4-sync-events/ holds some.)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _fail(message: str):
    """Bad input: one line on stderr, exit status 2."""
    print(f"ps_sync_rounds: {message}", file=sys.stderr)
    raise SystemExit(2)


def analyse(workdir: Path, warmup: int = 2) -> dict:
    ranks = {int(p.stem[4:]): json.loads(p.read_text()) for p in workdir.glob("rank*.json")}
    if 0 not in ranks or len(ranks) < 2:
        _fail(f"{workdir}: no rank0.json and worker rank files (expected a validate run's directory)")
    server = ranks[0]
    if "round_events" not in server:
        _fail(f"{workdir}: no round log (a ps-sync run made before 2026-11-29, or not ps-sync)")
    t0 = server["events_t0"]
    n = len(ranks) - 1
    rpc = {r - 1: [[t - t0 for t in step] for step in ranks[r]["rpc_times"]] for r in ranks if r}
    rounds = server["round_events"]
    pushes = server["push_events"]  # n per round, in arrival order
    cpu = server.get("sum_cpu_s") or [None] * len(pushes)
    steady = range(warmup + 1, len(rounds))  # after the profiled step
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "period",
            "first_cpu",
            "first_wall",
            "add_cpu",
            "mean",
            "update",
            "pull_spread",
            "call_spread",
            "last_arrival",
            "last_to_end",
        )
    }
    last_push: list[tuple[float, float]] = []  # per steady round: the last push's call and arrival
    for k in steady:
        out["period"].append(rounds[k][2] - rounds[k - 1][2])
        mine = list(zip(pushes[k * n : (k + 1) * n], cpu[k * n : (k + 1) * n]))
        (first, c_first), later = mine[0], mine[1:]
        out["first_wall"].append(first[3] - first[2])
        if c_first is not None:
            out["first_cpu"].append(c_first)
            out["add_cpu"] += [c for _, c in later]
        out["mean"].append(rounds[k][1] - rounds[k][0])
        out["update"].append(rounds[k][2] - rounds[k][1])
        pulled = sorted(rpc[w][k][1] for w in rpc)
        calls = sorted((rpc[w][k][2], w) for w in rpc)
        out["pull_spread"].append(pulled[-1] - pulled[0])
        out["call_spread"].append(calls[-1][0] - calls[0][0])
        last_call, last_w = calls[-1]
        arrival = next(e[1] for e, _ in mine if e[0] == last_w)
        last_push.append((last_call, arrival))
        out["last_arrival"].append(arrival - last_call)
        out["last_to_end"].append(rounds[k][2] - last_call)
    res = {k: statistics.median(v) if v else float("nan") for k, v in out.items()} | {"rounds": len(steady)}
    # benchmarks/proc_cpu_timeline.py record, beside the run (xz-compressed where committed)
    cpu_log = next((p for p in (workdir / "proc_cpu.txt", workdir / "proc_cpu.txt.xz") if p.exists()), None)
    if cpu_log is not None:
        from proc_cpu_timeline import read, window

        rows = read(str(cpu_log))
        res["last_push_cpu"] = []
        for last_call, arrival in last_push:
            busy = window(rows, last_call + t0, arrival + t0)
            res["last_push_cpu"].append(
                (
                    round(arrival - last_call, 2),
                    {p: round(c, 2) for p, c in sorted(busy.items(), key=lambda x: -x[1])[:3]},
                )
            )
    return res


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-3])
        return 2
    cols = (
        "period",
        "first_cpu",
        "first_wall",
        "add_cpu",
        "mean",
        "update",
        "pull_spread",
        "call_spread",
        "last_arrival",
        "last_to_end",
    )
    results = [(arg, analyse(Path(arg))) for arg in argv]  # bad input fails before any output
    print("run | rounds | " + " | ".join(cols) + "  (seconds, medians over the steady rounds)")
    for arg, a in results:
        print(
            f"{Path(arg).parent.name}/{Path(arg).name[:24]} | {a['rounds']} | "
            + " | ".join(f"{a[c]:.3f}" for c in cols)
        )
        for span, busy in a.get("last_push_cpu", []):
            print(f"    last push {span:.2f} s; CPU-s of the busiest processes meanwhile: {busy}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
