"""simdl.calibrate.processes: a torchrun-like launcher's ranks, each in a session of its own,
are stopped with it -- killing the launcher's process group would leave them running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from simdl.calibrate.processes import descendants, kill_tree

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")

# Like torchrun: the "rank" is started with start_new_session=True; SIGTERM ends the launcher
# (here without forwarding it, as a torchrun too slow or too stuck to forward would).
_LAUNCHER = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
    "print(c.pid, flush=True)\n"
    "c.wait()\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int) -> bool:
    for _ in range(100):  # a SIGKILLed orphan is reaped by init, not by us
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("grace_s", [0.0, 2.0])
def test_kill_tree_stops_a_rank_in_its_own_session(grace_s):
    p = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    rank = int(p.stdout.readline())
    assert descendants(p.pid) == [rank]
    assert os.getpgid(rank) != os.getpgid(p.pid)  # killpg(launcher) would not reach it
    kill_tree(p, grace_s=grace_s)
    assert p.returncode is not None
    assert _gone(rank), "the rank outlived kill_tree"


def test_descendants_of_a_process_without_children_is_empty():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert descendants(p.pid) == []
    finally:
        kill_tree(p)
    assert descendants(os.getpid() + 10_000_000) == []  # no such process
