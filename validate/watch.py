"""Run a launched experiment under two limits: its time, and the host's free memory.

Why a memory floor: a VM like the one validate/ was written on has no swap. When the ranks'
resident memory outgrows RAM, the kernel first evicts the page cache -- the interpreter's and
torch's code pages too -- and the machine thrashes for many minutes before the OOM killer
picks a rank. On 2026-11-27 ViT-B/32 FSDP full at 4 ranks ran 16 minutes that way, with the
shell unresponsive, until a rank was killed (lab/CAMPAIGN.md, "What does not fit this
machine"). A run that does not fit says nothing about simdl's prediction, and it holds up the
sweep. So the runner reads ``MemAvailable`` (/proc/meminfo, the kernel's estimate of memory
available without swapping: Documentation/filesystems/proc.rst) while the run goes, kills
torchrun and every process under it (its ranks) once it falls below a floor, and the
run is recorded as failed with that reason; the sweep goes on.

The default floor, max(512 MiB, 3 % of MemTotal) -- 723 MiB on this 23.5 GiB VM -- is an
operational choice, not a hardware constant: close to the 700 MB at which a shell watchdog
guarded the hybrid sweeps that followed that one (runs/s24/memguard.sh, 2026-11-27), which
killed none of the 4-rank VGG16 and EfficientNet-V2-L runs it watched. A finished run's
record keeps the lowest MemAvailable seen while it ran (``host_min_available_bytes``): how
close it came. Where /proc/meminfo does not exist (not Linux) the floor is not enforced and
``host_min_available_bytes`` is null.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from simdl.calibrate.processes import kill_tree

MiB = 1024 * 1024
MEMINFO = "/proc/meminfo"


def meminfo(path: str = MEMINFO) -> dict[str, int]:
    """/proc/meminfo's fields in bytes ({} where it cannot be read)."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    except OSError:
        return {}
    return out


def mem_available(path: str = MEMINFO) -> int | None:
    return meminfo(path).get("MemAvailable")


def default_floor(path: str = MEMINFO) -> int:
    """Bytes of MemAvailable below which a run is stopped (module docstring)."""
    total = meminfo(path).get("MemTotal", 0)
    return max(512 * MiB, int(0.03 * total))


@dataclass(frozen=True)
class Watched:
    returncode: int  # -9 when the runner killed it
    stopped: str  # why the runner killed it ("" when it ended by itself)
    min_available_bytes: int | None  # the lowest MemAvailable seen while it ran (None: not readable)


def run_watched(
    cmd: list[str],
    *,
    stdout,
    env: Mapping[str, str] | None,
    timeout_s: float,
    min_available: int,
    poll_s: float = 0.5,
    available: Callable[[], int | None] = mem_available,
    cwd=None,
) -> Watched:
    """Run ``cmd`` in a new session; kill the session's processes on ``timeout_s`` or when
    ``available()`` drops below ``min_available`` bytes (0: no floor)."""
    p = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    lowest: int | None = None
    stopped = ""
    while True:
        try:
            rc = p.wait(timeout=poll_s)
            break
        except subprocess.TimeoutExpired:
            pass
        free = available()
        if free is not None:
            lowest = free if lowest is None else min(lowest, free)
        if min_available and free is not None and free < min_available:
            stopped = (
                f"host memory: MemAvailable fell to {free / MiB:.0f} MiB, below the floor of "
                f"{min_available / MiB:.0f} MiB (--min-free-mib); the run does not fit this machine"
            )
        elif time.monotonic() > deadline:
            stopped = f"timeout after {timeout_s:.0f} s (--timeout)"
        if stopped:
            kill_tree(p)
            rc = -9
            break
    return Watched(rc, stopped, lowest)
