"""Per-process CPU over time on this host: which process burns the cores during a window of a
validate run (for example a parameter server's receive of the last push of a round).

``record OUT SECONDS``: every 50 ms, one line ``<CLOCK_MONOTONIC s> pid:comm:utime:stime ...``
for every python process (utime and stime in clock ticks, /proc/<pid>/stat fields 14-15,
proc(5)). CLOCK_MONOTONIC is the clock of validate/train.py's event logs (time.perf_counter
on Linux), so its windows can be cut from the samples.

``window FILE START END``: CPU seconds of each process between two CLOCK_MONOTONIC times.

Started beside a run (``python benchmarks/proc_cpu_timeline.py record out.txt 100 &``), it
counts among the run's other processes: the run that carried
lab/records/events/xeon-emr-x4-sync-events/kept-sum-7/proc_cpu.txt.xz recorded 0.055 cores of
others' CPU, this sampler included (its ``host_cpu``; lab/CAMPAIGN.md: "Where VGG16 PS sync's
time goes").
"""

from __future__ import annotations

import bisect
import os
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")  # clock ticks per second of /proc/<pid>/stat's times


def _fail(message: str):
    """Bad input: one line on stderr, exit status 2."""
    print(f"proc_cpu_timeline: {message}", file=sys.stderr)
    raise SystemExit(2)


def sample() -> dict[str, tuple[str, int, int]]:
    """pid -> (comm, utime, stime) of every python process."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue  # the process ended between listdir and open
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if not comm.startswith("python"):
            continue
        f = stat[stat.rindex(")") + 2 :].split()
        out[pid] = (comm, int(f[11]), int(f[12]))
    return out


def record(path: str, seconds: float) -> None:
    end = time.monotonic() + seconds
    with open(path, "w") as fh:
        while time.monotonic() < end:
            t = time.clock_gettime(time.CLOCK_MONOTONIC)
            fh.write(f"{t:.3f} " + " ".join(f"{p}:{c}:{u}:{k}" for p, (c, u, k) in sample().items()) + "\n")
            fh.flush()
            time.sleep(0.05)


def read(path: str) -> list[tuple[float, dict[str, int]]]:
    """The recorded rows; a path ending in .xz is read decompressed (the committed records)."""
    import lzma

    rows = []
    for line in lzma.open(path, "rt") if path.endswith(".xz") else open(path):
        parts = line.split()
        rows.append(
            (float(parts[0]), {x.split(":")[0]: int(x.split(":")[-2]) + int(x.split(":")[-1]) for x in parts[1:]})
        )
    return rows


def window(rows, start: float, end: float) -> dict[str, float]:
    times = [t for t, _ in rows]
    i, j = bisect.bisect_left(times, start), bisect.bisect_right(times, end) - 1
    if j <= i:
        return {}
    a, b = rows[i][1], rows[j][1]
    # A process absent at the window's start began inside it: all its CPU is the window's.
    return {p: (b[p] - a.get(p, 0)) / TICK for p in b if b[p] > a.get(p, 0)}


def _seconds(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        _fail(f"{what} {text!r} is not a number of seconds")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "record":
        record(argv[1], _seconds(argv[2], "SECONDS"))
        return 0
    if len(argv) == 4 and argv[0] == "window":
        start, end = _seconds(argv[2], "START"), _seconds(argv[3], "END")
        try:
            rows = read(argv[1])
        except OSError as e:
            _fail(f"cannot read {argv[1]!r}: {e.strerror}")
        for pid, s in sorted(window(rows, start, end).items(), key=lambda x: -x[1]):
            print(f"{pid}\t{s:.2f} CPU-s")
        return 0
    print("usage: proc_cpu_timeline.py record OUT SECONDS | window FILE START END", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
