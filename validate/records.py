"""The committed validation records: packing a sweep's results file and the folder's index.

``python -m validate.records add runs/validate/<name>/results.jsonl --id <id>`` packs a
finished sweep into ``lab/records/<id>.jsonl.xz`` and adds it to ``lab/records/index.json``;
``python -m validate.records check`` verifies every file against the index (CI runs it).

Packing changes paths only, never a measured or predicted value: an absolute path of the
checkout a sweep ran from (``/work/main/``, a clone such as ``/tmp/valclone/``) becomes
repo-relative, and a calibrated profile of the package's former CPU presets
(``simdl/cluster/data/clusters/cpu-*.yaml``) is named where it lives now
(``lab/profiles/``); ``cluster_profile_sha256`` still identifies the version a run used. Each
packed line parses to the same values as the original line apart from those strings
(:func:`pack_line` checks it).

The index gives, per record file: ``id``, ``file`` (repo-relative), ``date`` (UTC days its
runs started), ``host`` (processor model name and caches), ``profile`` (the cluster profiles
that predicted its runs), ``commit`` (the repository commit that first held the file: the code
that ran the sweep is that commit or an earlier one), ``runs`` and ``sha256`` of the stored
bytes. Event-log folders (per-rank JSON of PS runs, read by ``benchmarks/ps_sync_rounds.py``)
are indexed the same way, their ``sha256`` over every file's name and bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import lzma
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from simdl.textfile import read_text

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "lab" / "records"
INDEX = RECORDS / "index.json"
EVENTS = RECORDS / "events"

# Roots of the checkouts the committed sweeps ran from: the main tree and its clones.
CHECKOUT_ROOT = re.compile(r"/(?:work|tmp)/(?:main|valclone\d*|sweepclone|old)/")
FORMER_PRESET = "simdl/cluster/data/clusters/cpu-"
LAB_PROFILE = "lab/profiles/cpu-"
FORMER_VARIANT = "validate/results/epyc-zen4-keepheap.profile.yaml"  # a profile variant kept with the records
LAB_VARIANT = "lab/profiles/epyc-zen4-keepheap.profile.yaml"
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home)/")


def rewrite_paths(text: str) -> str:
    """``text`` with checkout roots (this one's included) removed and former CPU presets named
    in lab/profiles/."""
    return (
        CHECKOUT_ROOT.sub("", text.replace(f"{ROOT}/", ""))
        .replace(FORMER_PRESET, LAB_PROFILE)
        .replace(FORMER_VARIANT, LAB_VARIANT)
    )


def _numbers(value: Any) -> Any:
    """``value`` with every string replaced by a marker: what packing must leave unchanged."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return "<str>" if isinstance(value, str) else value


def pack_line(line: str) -> str:
    """One results line with its paths rewritten; raises when any non-string value would change
    (a torn last line, not JSON, is kept as it is: readers skip it)."""
    new = rewrite_paths(line)
    try:
        before = json.loads(line)
    except json.JSONDecodeError:
        return line
    if _numbers(json.loads(new)) != _numbers(before):
        raise ValueError(f"packing changed a value in run {before.get('run_id')!r}")
    return new


def pack_text(text: str) -> bytes:
    """A results file's text, paths rewritten, as xz bytes (same input, same bytes)."""
    lines = [pack_line(line) for line in text.splitlines()]
    return lzma.compress(("\n".join(lines) + "\n").encode("utf-8"), preset=9 | lzma.PRESET_EXTREME)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sha256_folder(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _records(path: Path) -> list[dict]:
    out = []
    for line in read_text(path).splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _host(recs: list[dict]) -> str:
    hosts = []
    for r in recs:
        h = r.get("host") or {}
        caches = h.get("cpu_caches") or {}
        text = h.get("cpu_model") or h.get("hostname") or "not recorded"
        if caches:
            text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(caches.items())) + ")"
        if text not in hosts:
            hosts.append(text)
    return "; ".join(hosts) or "not recorded"


def describe(path: Path, commit: str, file_id: str | None = None) -> dict[str, Any]:
    """The index entry of a packed results file."""
    recs = _records(path)
    days = sorted({str(r.get("started", ""))[:10] for r in recs if r.get("started")})
    profiles = sorted({Path(str(r["cluster_profile"])).stem for r in recs if r.get("cluster_profile")})
    return {
        "id": file_id or path.name.split(".")[0],
        "file": path.relative_to(ROOT).as_posix(),
        "date": f"{days[0]}..{days[-1]}" if len(days) > 1 else (days[0] if days else ""),
        "host": _host(recs),
        "profile": profiles,
        "commit": commit,
        "runs": len(recs),
        "sha256": sha256_file(path),
    }


def describe_events(folder: Path, commit: str) -> dict[str, Any]:
    """The index entry of an event-log folder (one sub-folder of rank*.json per run). The rank
    files name no host: date, host and profile come from the sweep's record file of the same
    name where there is one (``<folder name>.jsonl.xz``), else they stay empty."""
    runs = sorted({p.parent.name for p in folder.rglob("rank*.json")})
    sweep = RECORDS / f"{folder.name}.jsonl.xz"
    known = describe(sweep, commit) if sweep.exists() else {"date": "", "host": "", "profile": []}
    return {
        "id": f"events/{folder.name}",
        "file": folder.relative_to(ROOT).as_posix() + "/",
        "date": known["date"],
        "host": known["host"],
        "profile": known["profile"],
        "commit": commit,
        "runs": len(runs),
        "sha256": sha256_folder(folder),
    }


def read_index(path: Path = INDEX) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() else []


def write_index(entries: list[dict[str, Any]], path: Path = INDEX) -> None:
    entries = sorted(entries, key=lambda e: e["id"])
    path.write_text(json.dumps(entries, indent=1) + "\n")


def check(index: list[dict[str, Any]] | None = None) -> list[str]:
    """What is wrong with the records folder: files missing from the index or not matching
    their sha256, index rows without a file, absolute paths left in a record."""
    index = read_index() if index is None else index
    problems = []
    listed = {e["file"]: e for e in index}
    for p in sorted(RECORDS.glob("*.jsonl*")):
        rel = p.relative_to(ROOT).as_posix()
        e = listed.pop(rel, None)
        if e is None:
            problems.append(f"{rel}: not in {INDEX.relative_to(ROOT)}")
            continue
        if sha256_file(p) != e["sha256"]:
            problems.append(f"{rel}: sha256 differs from the index")
        if ABSOLUTE_PATH.search(read_text(p)):
            problems.append(f"{rel}: embeds an absolute path")
    for folder in sorted(d for d in EVENTS.glob("*") if d.is_dir()) if EVENTS.exists() else []:
        rel = folder.relative_to(ROOT).as_posix() + "/"
        e = listed.pop(rel, None)
        if e is None:
            problems.append(f"{rel}: not in the index")
        elif sha256_folder(folder) != e["sha256"]:
            problems.append(f"{rel}: sha256 differs from the index")
    problems += [f"{rel}: in the index, no such file" for rel in listed]
    return problems


def fixture_text(path: Path) -> str:
    """A record file as a small test fixture: every record as stored, less its memory
    timelines (``memory_timeline`` of the prediction and the measurement, most of the bytes;
    the report's tables do not read them)."""
    out = []
    for rec in _records(path):
        for part in [(rec.get("predicted") or {}).get(e) for e in ("analytic", "sim")] + [rec.get("measured")]:
            if isinstance(part, dict):
                part.pop("memory_timeline", None)
        out.append(json.dumps(rec) + "\n")
    return "".join(out)


def write_fixture(path: Path, dest: Path) -> None:
    """:func:`fixture_text` of ``path``, gzip-compressed (same input, same bytes)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.compress(fixture_text(path).encode("utf-8"), compresslevel=9, mtime=0))


def _head_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "not recorded"


def add(results: Path, file_id: str, commit: str | None = None) -> dict[str, Any]:
    """Pack ``results`` as ``lab/records/<file_id>.jsonl.xz`` and list it in the index."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", file_id):
        raise SystemExit(f"--id {file_id!r}: accepted: lower-case letters, digits, '.', '_', '-'")
    dest = RECORDS / f"{file_id}.jsonl.xz"
    RECORDS.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(pack_text(read_text(results)))
    entry = describe(dest, commit or _head_commit(), file_id)
    write_index([e for e in read_index() if e["id"] != file_id] + [entry])
    return entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.records", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="pack a results file into lab/records/ and index it")
    a.add_argument("results", type=Path)
    a.add_argument("--id", required=True, help="the record's name (lab/records/<id>.jsonl.xz)")
    a.add_argument("--commit", help="commit that ran the sweep (default: HEAD)")
    sub.add_parser("check", help="verify lab/records/ against its index")
    f = sub.add_parser("fixture", help="write a record file without its memory timelines as a gzip test fixture")
    f.add_argument("record", type=Path)
    f.add_argument("dest", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "add":
        print(json.dumps(add(args.results, args.id, args.commit), indent=1))
        return 0
    if args.cmd == "fixture":
        write_fixture(args.record, args.dest)
        return 0
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    print(f"{len(read_index())} index entries, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
