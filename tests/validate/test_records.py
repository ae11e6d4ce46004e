"""The committed validation records (lab/records/, validate/records.py) and compressed
results files read like plain ones (simdl/textfile.py)."""

from __future__ import annotations

import gzip
import json
import lzma

import pytest

from simdl.calibrate.records import read_jsonl
from simdl.report.metrics import read_results
from validate import records


def _rec(i, path="/work/main/simdl/cluster/data/clusters/cpu-epyc-zen4.yaml"):
    return {
        "run_id": f"r{i}",
        "status": "ok",
        "cluster_profile": path,
        "started": f"2026-01-0{i}T00:00:00+00:00",
        "measured": {"steady_step_times_s": [1.0 + i, 2.0 + i]},
        "command": "/tmp/valclone/.venv/bin/python -m x",
    }


def test_every_record_file_matches_its_index_row():
    assert records.check() == []
    ids = {e["id"] for e in records.read_index()}
    assert "xeon-emr" in ids and "events/xeon-emr-x4-sync-events" in ids
    row = next(e for e in records.read_index() if e["id"] == "epyc-zen4")
    assert row["profile"] == ["cpu-epyc-zen4"] and row["date"] == "2026-12-02" and row["runs"] == 24
    assert row["host"].startswith("AMD EPYC (L1d 32K")


def test_check_names_a_file_whose_bytes_changed():
    index = [dict(e) for e in records.read_index()]
    index[0]["sha256"] = "0" * 64
    assert any("sha256 differs" in p for p in records.check(index))
    assert any("not in" in p for p in records.check(index[1:]))


@pytest.mark.parametrize("suffix,opener", [(".jsonl.gz", gzip.open), (".jsonl.xz", lzma.open)])
def test_compressed_results_read_as_the_plain_file(tmp_path, suffix, opener):
    text = "".join(json.dumps(_rec(i)) + "\n" for i in (1, 2)) + '{"torn'
    plain = tmp_path / "r.jsonl"
    plain.write_text(text)
    packed = tmp_path / f"r{suffix}"
    with opener(packed, "wt") as f:
        f.write(text)
    assert read_jsonl(packed) == read_jsonl(plain) and len(read_jsonl(plain)) == 2
    assert read_results(packed) == read_results(plain)


def test_packing_rewrites_paths_and_nothing_else(tmp_path):
    line = json.dumps(_rec(3))
    new = json.loads(records.pack_line(line))
    assert new["cluster_profile"] == "lab/profiles/cpu-epyc-zen4.yaml"
    assert new["command"] == ".venv/bin/python -m x"
    assert new["measured"] == _rec(3)["measured"]
    assert records.pack_line('{"torn') == '{"torn'
    assert not records.ABSOLUTE_PATH.search(lzma.decompress(records.pack_text(line)).decode())
    # the same input packs to the same bytes (the index's sha256 is reproducible)
    assert records.pack_text(line) == records.pack_text(line)


def test_a_shipped_profile_finds_its_4_rank_sibling_in_the_lab(tmp_path):
    """cpu-local ships; cpu-local-x4, calibrated on the same Xeon with 4 ranks, is lab data:
    validation still predicts 4-rank runs with it, not with an oversubscribed copy."""
    from validate.run import LAB_PROFILES, profile_for_ranks

    path, note = profile_for_ranks("cpu-local", 4, tmp_path)
    assert path == str((LAB_PROFILES / "cpu-local-x4.yaml").resolve()) and "calibrated" in note
    assert profile_for_ranks("cpu-local", 2, tmp_path)[1] == ""


def test_a_sweep_refuses_to_append_to_a_packed_file(tmp_path, capsys, monkeypatch):
    from validate import run as vrun

    monkeypatch.setattr(vrun, "run_one", lambda *a, **k: pytest.fail("no run may start"))
    assert vrun.main(["--profile", "smoke", "-o", str(tmp_path / "r.jsonl.xz"), "--allow-other-host"]) == 2
    err = capsys.readouterr().err
    assert "r.jsonl.xz" in err and "plain .jsonl" in err and "\n" == err[-1] and err.count("\n") == 1
