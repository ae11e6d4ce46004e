"""Ending a torchrun and the ranks it started.

torchrun starts each rank in a session of its own (torch 2.14,
torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py:
``Popen(..., start_new_session=True)``; seen with ``ps -o pid,pgid,sid``: every rank is its own
process group). Killing torchrun's process group therefore leaves the ranks running. What
does reach them: SIGTERM to torchrun, which its agent forwards to the workers before it exits
(a graceful stop, if the machine still schedules it), or a signal to each process found under
torchrun in /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess


def proc_stats(proc: str = "/proc") -> list[tuple[int, str, list[str]]]:
    """(pid, command name, the fields after it) of every process's /proc/<pid>/stat ([] where
    /proc cannot be read). The fields start at ``state``: [1] is the parent pid, [11] and [12]
    utime and stime in clock ticks (proc(5))."""
    try:
        names = os.listdir(proc)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        out.append((int(name), stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()))
    return out


def descendants(pid: int, proc: str = "/proc") -> list[int]:
    """Every live descendant of ``pid``, from the parent field of /proc/<pid>/stat ([] where
    /proc cannot be read)."""
    children: dict[int, list[int]] = {}
    for child, _, fields in proc_stats(proc):
        children.setdefault(int(fields[1]), []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(p: subprocess.Popen, grace_s: float = 0.0) -> None:
    """Stop ``p`` and every process under it, then reap ``p``. With ``grace_s`` > 0, SIGTERM
    first (torchrun forwards it to its ranks) and SIGKILL whatever is left after that long;
    with 0, SIGKILL at once (a machine out of memory may not schedule a graceful exit)."""
    tree = descendants(p.pid)  # read before p dies: orphans are re-parented to init
    if grace_s > 0:
        _signal([p.pid], signal.SIGTERM)
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal([p.pid, *tree, *descendants(p.pid)], signal.SIGKILL)
    p.wait()


def _signal(pids, sig) -> None:
    for pid in dict.fromkeys(pids):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
