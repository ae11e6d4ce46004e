"""What other processes take of the CPU while simdl measures (simdl/calibrate/host_load.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from simdl.calibrate import host_load
from simdl.calibrate.host_load import CpuMeter, CpuShare, busiest, busy_note, wait_for_quiet


def _seq(*vals):
    it = iter(vals)
    return lambda: next(it)


def test_meter_subtracts_its_own_and_its_childrens_cpu():
    # host busy 100 -> 103 s of CPU over 2 s of wall time; this process and its children 1 s
    m = CpuMeter(ticks=_seq((100.0, 5.0), (103.0, 5.5)), own=_seq(10.0, 11.0), clock=_seq(0.0, 2.0), cores=2)
    s = m.stop()
    assert s.others_s == pytest.approx(2.0) and s.others_cores == pytest.approx(1.0)
    assert s.steal_cores == pytest.approx(0.25) and s.busy
    d = s.to_dict()
    assert d["others_cores"] == 1.0 and d["own_cpu_s"] == 1.0 and d["cores"] == 2
    # the two accountings disagree a little on a quiet host: a negative difference is no one's CPU
    quiet = CpuShare(wall_s=10.0, host_busy_s=19.9, own_s=20.0, steal_s=0.0, cores=2)
    assert quiet.others_s == pytest.approx(-0.1) and quiet.others_cores == 0.0 and not quiet.busy
    # no /proc/stat (not Linux): nothing to say
    assert CpuMeter(ticks=lambda: None, own=lambda: 0.0).stop() is None


def test_host_ticks_reads_user_nice_system_and_steal(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    p = tmp_path / "stat"
    p.write_text("cpu  100 20 30 400 5 6 7 8 0 0\ncpu0 50 10 15 200 2 3 3 4 0 0\n")
    busy, steal = host_load.host_ticks(str(p))
    assert busy == pytest.approx(150 / hz) and steal == pytest.approx(8 / hz)  # irq, softirq left out
    assert host_load.host_ticks(str(tmp_path / "missing")) is None
    p.write_text("intr 1 2 3\n")
    assert host_load.host_ticks(str(p)) is None


def test_process_cpu_and_busiest_name_the_processes(tmp_path):
    hz = os.sysconf("SC_CLK_TCK")
    rest = "S 1 1 1 0 -1 4194304 0 0 0 0 {u} {s} 0 0 20 0 1 0 1 1 1"

    def write(pid, comm, u, s):
        d = tmp_path / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_text(f"{pid} ({comm}) " + rest.format(u=u, s=s) + "\n")

    write(7, "my (odd) proc", 100, 0)
    write(8, "pytest", 10, 0)
    write(9, "simdl", 0, 0)
    (tmp_path / "self").mkdir()
    before = host_load.process_cpu(str(tmp_path))
    assert before[7] == ("my (odd) proc", pytest.approx(100 / hz))
    write(7, "my (odd) proc", 100 + hz, 0)  # one CPU second more
    write(8, "pytest", 10 + 2 * hz, 0)  # two more
    write(9, "simdl", 4 * hz, 0)  # four more, but it is us
    after = host_load.process_cpu(str(tmp_path))
    rows = busiest(before, after, 2.0, exclude={9})
    assert [(r["name"], r["cores"]) for r in rows] == [("pytest", 1.0), ("my (odd) proc", 0.5)]


def test_wait_for_quiet_waits_while_busy_and_says_so_once():
    shares = iter([CpuShare(2.0, 3.0, 0.1, 0.0, 2), CpuShare(2.0, 3.0, 0.1, 0.0, 2), CpuShare(2.0, 0.3, 0.1, 0.0, 2)])

    class FakeMeter:
        def stop(self):
            return next(shares)

    out, slept = io.StringIO(), []
    r = wait_for_quiet(60, out=out, sleep=slept.append, meter=FakeMeter, processes=dict)
    assert r["quiet"] and r["others_cores"] == pytest.approx(0.1) and r["waited_s"] == 4.0 and len(slept) == 3
    assert out.getvalue().count("the machine is busy") == 1 and "1.45 cores" in out.getvalue()
    # not waiting: one reading, a warning, and the caller goes on
    shares = iter([CpuShare(2.0, 3.0, 0.1, 0.0, 2)])
    out = io.StringIO()
    r = wait_for_quiet(0, out=out, sleep=lambda s: None, meter=FakeMeter, processes=dict, what="calibrating")
    assert r["quiet"] is False and "calibrating anyway" in out.getvalue()
    # the deadline: still busy after the wait
    shares = iter([CpuShare(2.0, 3.0, 0.1, 0.0, 2)] * 5)
    out = io.StringIO()
    r = wait_for_quiet(3, out=out, sleep=lambda s: None, meter=FakeMeter, processes=dict)
    assert r["quiet"] is False and r["waited_s"] == 4.0 and "after waiting 4 s" in out.getvalue()
    # counters that cannot be read: no verdict
    r = wait_for_quiet(
        60, out=io.StringIO(), sleep=lambda s: None, meter=lambda: CpuMeter(ticks=lambda: None), processes=dict
    )
    assert r["quiet"] is None and r["others_cores"] is None


def test_busy_note_of_a_validation_record():
    assert busy_note({}) == ""
    assert busy_note({"host_cpu": {"others_cores": 0.02}, "host_cpu_before": {"others_cores": 0.01}}) == ""
    note = busy_note(
        {
            "host_cpu": {"others_cores": 0.97},
            "host_cpu_before": {"others_cores": 0.9, "busiest": [{"name": "pytest", "pid": 5, "cores": 0.9}]},
        }
    )
    assert note == "other processes used 0.97 cores during the run, 0.90 just before it (pytest pid 5)"


_BURN = "import time\nwhile time.process_time() < 0.6:\n    pass\n"


@pytest.mark.skipif(not os.path.exists("/proc/stat") or not hasattr(os, "waitid"), reason="Linux counters")
def test_a_reaped_child_is_own_and_a_running_one_is_another():
    """On this host, for real: a child that burns 0.6 s of CPU and is reaped before the meter
    stops counts as this process's own; one that has exited but is not reaped yet (as a
    process outside this tree would be) counts as another's."""
    m = CpuMeter()
    subprocess.run([sys.executable, "-c", _BURN], check=True)
    s = m.stop()
    assert s.own_s >= 0.5 and s.host_busy_s >= 0.4
    m = CpuMeter()
    p = subprocess.Popen([sys.executable, "-c", _BURN])
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: not in RUSAGE_CHILDREN
    s = m.stop()
    p.wait()
    assert s.own_s < 0.3 and s.others_s >= 0.4
