"""Read a calibration run directory: per-stage, per-rank JSONL records and markers.

Layout written by ``simdl calibrate`` (all git-ignored under ``runs/``)::

    RUN_DIR/run.json                 the command's settings (for --resume)
    RUN_DIR/<stage>/rank<R>.jsonl    header, plan, measurement..., end   (one JSON per line)
    RUN_DIR/<stage>/DONE             written by rank 0 when the stage completed
    RUN_DIR/<stage>/torchrun.log     torchrun's own output for the stage
    RUN_DIR/fit.json                 fitted values, fit quality, held-out errors
    RUN_DIR/profile.yaml             the profile (also copied to -o)

A torn last line (a rank killed mid-write) is skipped; for a key measured twice (a resumed
stage) the last record wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..textfile import open_text

STAGES = ("collectives", "compute", "strategies", "ps")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    with open_text(path) as f:  # plain, .gz or .xz
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # torn write of a killed rank
    return out


@dataclass
class StageRecords:
    stage: str
    path: Path
    done: bool
    headers: dict[int, dict] = field(default_factory=dict)  # rank -> last header
    measurements: dict[int, dict[str, dict]] = field(default_factory=dict)  # rank -> key -> record
    planned: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(set(self.headers) | set(self.measurements))

    def keys_all_ranks(self) -> set[str]:
        """Keys measured by every rank that wrote a header."""
        sets = [set(self.measurements.get(r, {})) for r in self.headers]
        return set.intersection(*sets) if sets else set()

    def records(self, key: str) -> list[dict]:
        return [m[key] for r, m in sorted(self.measurements.items()) if key in m]

    def n_measured(self, rank: int = 0) -> int:
        return len(self.measurements.get(rank, {}))


def load_stage(run_dir: Path, stage: str) -> StageRecords:
    path = Path(run_dir) / stage
    rec = StageRecords(stage, path, (path / "DONE").exists())
    if not path.is_dir():
        return rec
    for f in sorted(path.glob("rank*.jsonl")):
        try:
            rank = int(f.stem[4:])
        except ValueError:
            continue
        for r in read_jsonl(f):
            t = r.get("type")
            if t == "header":
                rec.headers[rank] = r
            elif t == "plan" and rank == 0:
                rec.planned = list(r.get("keys", []))
            elif t == "measurement" and "key" in r:
                rec.measurements.setdefault(rank, {})[r["key"]] = r
    return rec


def load_run(run_dir: Path) -> dict[str, StageRecords]:
    return {s: load_stage(run_dir, s) for s in STAGES}
