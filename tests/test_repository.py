"""The repository stays a code repository: tracked files under 15 MB together (generated
reports are not committed; validation records are compressed lab data), and nothing in the
package names a path of the machine it was written on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_TRACKED_BYTES = 15_000_000
# an absolute path of a development machine: /work/..., /root/..., /home/..., /tmp/..., /Users/...
ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp|Users)/")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.decode().split("\0") if p]


def test_tracked_files_stay_under_15_mb():
    files = [p for p in tracked_files() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    biggest = sorted(files, key=lambda p: p.stat().st_size)[-3:]
    assert total <= MAX_TRACKED_BYTES, (
        f"tracked files hold {total / 1e6:.1f} MB (limit {MAX_TRACKED_BYTES / 1e6:.0f} MB); largest: "
        + ", ".join(f"{p.relative_to(ROOT)} {p.stat().st_size / 1e6:.1f} MB" for p in biggest)
    )


def test_no_file_in_the_package_embeds_an_absolute_path():
    hits = []
    for p in sorted((ROOT / "simdl").rglob("*")):
        if not p.is_file() or p.suffix in (".pyc", ".gz", ".png") or "__pycache__" in p.parts:
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ABSOLUTE_PATH.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}")
    assert not hits, "absolute paths in simdl/:\n" + "\n".join(hits)


def test_the_path_check_catches_one():
    assert ABSOLUTE_PATH.search('file: "/work/main/simdl/cluster/data/clusters/cpu-local.yaml"')
    assert ABSOLUTE_PATH.search("see /root/.cache/x")
    assert not ABSOLUTE_PATH.search("runs/validate/tmp/x and lab/profiles/cpu-local.yaml")
