"""DeepSpeed's CPU all-reduce segments are removed after a run (simdl.calibrate.deepspeed_check)."""

from __future__ import annotations

import mmap
import os

from simdl.calibrate.deepspeed_check import SHM_PREFIX, deepspeed_shm_removed


def _segment(d, tail: str):
    p = d / f"{SHM_PREFIX}{os.getuid()}_localhost_29500_{tail}"
    p.write_bytes(b"\0" * 4096)
    return p


def test_a_run_s_segments_go_and_others_stay(tmp_path):
    older = _segment(tmp_path, "old")
    other_user = tmp_path / f"{SHM_PREFIX}{os.getuid() + 1}_localhost_29500_0"
    unrelated = tmp_path / "torch_12345"
    with deepspeed_shm_removed(tmp_path):
        made = [_segment(tmp_path, str(r)) for r in range(2)]
        other_user.write_bytes(b"x")
        unrelated.write_bytes(b"x")
    assert not any(p.exists() for p in made)
    assert older.exists() and other_user.exists() and unrelated.exists()


def test_a_segment_still_mapped_by_a_live_process_stays(tmp_path):
    with deepspeed_shm_removed(tmp_path):
        live = _segment(tmp_path, "0")
        f = open(live, "r+b")
        m = mmap.mmap(f.fileno(), 4096)
    try:
        assert live.exists()
    finally:
        m.close()
        f.close()
