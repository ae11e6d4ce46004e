"""benchmarks/bench_scale.py --quick: every figure it promises is printed and the PNG is written."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_prints_figures_and_writes_the_png(tmp_path):
    png = tmp_path / "scale.png"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_scale.py"), "--quick", "-o", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if re.match(r"^\s+\d+\s+(homo|hetero)\s", line)]
    assert [(int(x[0]), x[1]) for x in rows] == [(16, "homo"), (64, "homo"), (16, "hetero"), (64, "hetero")]
    for x in rows:
        wall, cpu, rss = float(x[2]), float(x[3]), float(x[4])
        assert wall > 0 and cpu > 0 and rss > 10  # MiB: a Python process with numpy is more
    assert re.search(r"64\s+hetero\s+\S+\s+\S+\s+\S+\s+\d+\.\d+x\s+\d+\.\d+x", r.stdout)  # growth per 4x ranks
    m = re.search(r"([\d,]+) analytic configurations .* = ([\d,]+) configs/s", r.stdout)
    assert m and int(m.group(1).replace(",", "")) == 500 and int(m.group(2).replace(",", "")) > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
