"""How much of the host's CPU other processes took while simdl measured.

Why: on the 2-core VMs simdl is calibrated and validated on, anything else that runs takes a
core from ranks that each expect one. One report run beside a validation sweep slowed a run
by 32 % (lab/CAMPAIGN.md, "Emerald Rapids"), and a calibration started while the test suite
was finishing fitted a profile whose blind step MAPE was 9.0 % against 5.2 % for one fitted
on a quiet machine (lab/CALIBRATION.md, "cpu-xeon-emr"). The load average cannot
tell these apart: it counts simdl's own ranks, and its 1-minute figure still reads above 1
a minute after the other work stopped. So simdl measures the CPU others used directly:

* the host's busy CPU seconds, /proc/stat's first line: user + nice + system, in USER_HZ
  ticks (``os.sysconf('SC_CLK_TCK')``; Documentation/filesystems/proc.rst, "1.7 Miscellaneous
  kernel statistics in /proc/stat"). irq and softirq are left out: the kernel does not charge
  them to the process whose packets they carry (gloo's loopback traffic), so counting them
  would make a run's own traffic look like someone else's;
* this process's and its reaped children's CPU seconds (``resource.getrusage``;
  RUSAGE_CHILDREN includes grandchildren that their parent waited for, as torchrun does its
  ranks: getrusage(2));
* others = host busy - own. ``steal`` (time the hypervisor gave this VM's cores to other
  guests, the same proc.rst section) is recorded beside it: a slow neighbour the guest cannot
  see in its own process list.

The two accountings sample differently (ticks against the scheduler's per-task times), so a
run alone on the machine reads a few hundredths of a core either way; the "busy" threshold,
a quarter of a core on average, is an operational choice well above that, and well below the
one core a second job takes.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from .processes import proc_stats

PROC_STAT = "/proc/stat"
BUSY_CORES = 0.25  # others' average cores above which a measurement counts as perturbed (module docstring)
HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc's clock ticks per second (proc(5))


def host_ticks(path: str = PROC_STAT) -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of all cores since boot, or None where /proc/stat cannot be read."""
    try:
        with open(path) as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 4:
        return None
    # cpu user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
    vals = [int(x) for x in first[1:]]
    steal = vals[7] if len(vals) > 7 else 0
    return (vals[0] + vals[1] + vals[2]) / HZ, steal / HZ


def own_cpu_s() -> float:
    """CPU seconds of this process and of every child (and their waited-for children) it has reaped."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


@dataclass(frozen=True)
class CpuShare:
    """What the host's cores did over ``wall_s`` seconds (SI: seconds of CPU time)."""

    wall_s: float
    host_busy_s: float
    own_s: float
    steal_s: float
    cores: int

    @property
    def others_s(self) -> float:
        # may be slightly negative: the two accountings sample differently (module docstring)
        return self.host_busy_s - self.own_s

    @property
    def others_cores(self) -> float:
        """Average number of cores other processes kept busy (>= 0)."""
        return max(self.others_s, 0.0) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steal_cores(self) -> float:
        return self.steal_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy(self) -> bool:
        return self.others_cores > BUSY_CORES

    def to_dict(self) -> dict:
        return {
            "wall_s": round(self.wall_s, 3),
            "host_busy_cpu_s": round(self.host_busy_s, 3),
            "own_cpu_s": round(self.own_s, 3),
            "others_cpu_s": round(self.others_s, 3),
            "others_cores": round(self.others_cores, 3),
            "steal_cores": round(self.steal_cores, 3),
            "cores": self.cores,
        }


class CpuMeter:
    """``m = CpuMeter(); ...; share = m.stop()``: the CPU others took meanwhile. Stop it after
    the children it should count as its own have been waited for (a live child's CPU is not
    in RUSAGE_CHILDREN yet, so it would count as another's). ``stop()`` is None where the
    host's counters cannot be read (not Linux)."""

    def __init__(
        self,
        *,
        ticks: Callable[[], tuple[float, float] | None] = host_ticks,
        own: Callable[[], float] = own_cpu_s,
        clock: Callable[[], float] = time.monotonic,
        cores: int | None = None,
    ):
        self._ticks, self._own, self._clock = ticks, own, clock
        self.cores = cores or os.cpu_count() or 1
        self._t0, self._h0, self._o0 = clock(), ticks(), own()

    def stop(self) -> CpuShare | None:
        h1, o1, t1 = self._ticks(), self._own(), self._clock()
        if h1 is None or self._h0 is None:
            return None
        return CpuShare(
            wall_s=t1 - self._t0,
            host_busy_s=h1[0] - self._h0[0],
            own_s=o1 - self._o0,
            steal_s=h1[1] - self._h0[1],
            cores=self.cores,
        )


def process_cpu(proc: str = "/proc") -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds so far) of every process ({} where /proc cannot be read)."""
    return {pid: (comm, (int(f[11]) + int(f[12])) / HZ) for pid, comm, f in proc_stats(proc)}


def busiest(
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    wall_s: float,
    exclude: frozenset[int] | set[int] = frozenset(),
    n: int = 3,
) -> list[dict]:
    """The ``n`` processes that used the most CPU between two :func:`process_cpu` readings."""
    rows: list[dict[str, Any]] = []
    for pid, (comm, cpu) in after.items():
        if pid in exclude or pid not in before or wall_s <= 0:
            continue
        used = (cpu - before[pid][1]) / wall_s
        if used > 0.01:
            rows.append({"pid": pid, "name": comm, "cores": round(used, 3)})
    return sorted(rows, key=lambda r: -r["cores"])[:n]


def describe(reading: dict) -> str:
    """'other processes used 0.97 cores (pytest pid 812: 0.95)' for a :func:`wait_for_quiet` reading."""
    top = ", ".join(f"{b['name']} pid {b['pid']}: {b['cores']:.2f}" for b in reading.get("busiest", []))
    return f"other processes used {reading['others_cores']:.2f} cores" + (f" ({top})" if top else "")


def wait_for_quiet(
    max_wait_s: float,
    *,
    window_s: float = 2.0,
    threshold: float = BUSY_CORES,
    what: str = "measuring",
    out=sys.stderr,
    sleep: Callable[[float], None] = time.sleep,
    meter: Callable[[], CpuMeter] = CpuMeter,
    processes: Callable[[], dict[int, tuple[str, float]]] = process_cpu,
) -> dict:
    """Measure others' CPU over ``window_s``; while it is above ``threshold`` cores, say so
    once and measure again, for up to ``max_wait_s`` seconds. Returns the last reading:
    ``{"others_cores", "steal_cores", "busiest", "waited_s", "quiet"}`` (``quiet`` None where
    the host's counters cannot be read). Never refuses: a busy reading is recorded with the
    measurement, which is what tells a reader to distrust it."""
    waited, said = 0.0, False
    me = {os.getpid()}
    while True:
        m, procs = meter(), processes()
        sleep(window_s)
        share = m.stop()
        if share is None:
            return {
                "others_cores": None,
                "steal_cores": None,
                "busiest": [],
                "waited_s": round(waited, 1),
                "quiet": None,
            }
        reading = {
            "others_cores": round(share.others_cores, 3),
            "steal_cores": round(share.steal_cores, 3),
            "busiest": busiest(procs, processes(), share.wall_s, exclude=me),
            "waited_s": round(waited, 1),
            "quiet": share.others_cores <= threshold,
        }
        if reading["quiet"] or waited >= max_wait_s:
            if not reading["quiet"]:
                after = f" after waiting {waited:.0f} s" if waited else ""
                print(
                    f"warning: the machine is busy{after}: {describe(reading)}; {what} anyway (the record says so)",
                    file=out,
                    flush=True,
                )
            return reading
        if not said:
            print(
                f"the machine is busy: {describe(reading)}; waiting up to {max_wait_s:.0f} s before {what}",
                file=out,
                flush=True,
            )
            said = True
        waited += share.wall_s


def busy_note(rec: dict) -> str:
    """'' for a validation record (validate/run.py) measured on a quiet machine, else what
    was busy: 'other processes used 0.97 cores during the run (0.95 before it)'."""
    during = (rec.get("host_cpu") or {}).get("others_cores")
    before = (rec.get("host_cpu_before") or {}).get("others_cores")
    parts = []
    if during is not None and during > BUSY_CORES:
        parts.append(f"{during:.2f} cores during the run")
    if before is not None and before > BUSY_CORES:
        top = (rec.get("host_cpu_before") or {}).get("busiest") or []
        parts.append(f"{before:.2f} just before it" + (f" ({top[0]['name']} pid {top[0]['pid']})" if top else ""))
    return f"other processes used {', '.join(parts)}" if parts else ""
