"""benchmarks/ps_sync_rounds.py and proc_cpu_timeline.py on the committed event logs of the
VGG16 sync runs (lab/records/events/xeon-emr-x4-sync-events/, lab/CAMPAIGN.md)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "lab" / "records" / "events" / "xeon-emr-x4-sync-events"
sys.path.insert(0, str(ROOT / "benchmarks"))

import proc_cpu_timeline  # noqa: E402
import ps_sync_rounds  # noqa: E402


def test_rounds_of_the_kept_sum_and_the_old_clone():
    kept = ps_sync_rounds.analyse(EVENTS / "kept-sum-1")
    old = ps_sync_rounds.analyse(EVENTS / "old-clone-2")
    assert kept["rounds"] == old["rounds"] == 5
    # The kept sum's copy is cheaper than the old fresh clone; the adds cost the same.
    assert kept["first_cpu"] < 0.5 * old["first_cpu"]
    assert kept["add_cpu"] == pytest.approx(old["add_cpu"], rel=0.2)
    # The round's period is dominated by the last push's way to the server, not the sum.
    assert kept["last_arrival"] > 5 * (kept["first_cpu"] + 3 * kept["add_cpu"] + kept["mean"])
    assert 5.0 < kept["period"] < 7.0


def test_the_server_burns_the_cpu_while_the_last_push_arrives():
    a = ps_sync_rounds.analyse(EVENTS / "kept-sum-7")
    for span, busy in a["last_push_cpu"]:
        (top, cpu), *rest = busy.items()
        assert cpu > 0.8 * span  # one process, about one core, the whole window
        assert all(c < 0.2 * cpu for _, c in rest)


def test_window_counts_a_process_that_started_inside_it():
    rows = [(0.0, {"1": 100}), (1.0, {"1": 150, "2": 30})]
    assert proc_cpu_timeline.window(rows, 0.0, 1.0) == {
        "1": 50 / proc_cpu_timeline.TICK,
        "2": 30 / proc_cpu_timeline.TICK,
    }


@pytest.mark.parametrize(
    "args", [["ps_sync_rounds.py", "/nonexistent"], ["proc_cpu_timeline.py", "window", "/nonexistent", "0", "x"]]
)
def test_bad_input_is_one_line_and_status_2(args):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
