"""A compute-stage record matched to its workload table: the measured per-row times of one
(model, batch) step, rescaled to the unhooked repeat :data:`STEP_ANCHOR` picks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..workload.table import WorkloadTable


@dataclass
class Run:
    """One measured (model, batch) step matched to its workload table."""

    label: str
    table: WorkloadTable
    batch: int
    fwd: np.ndarray  # measured seconds per row, rescaled to the unhooked step
    bwd: np.ndarray
    step_fwd: float  # unhooked step, seconds
    step_bwd: float

    @property
    def step(self) -> float:
        return self.step_fwd + self.step_bwd


# Which of a model's unhooked repeats its per-row times are rescaled to. The compute stage
# times 5 whole steps per (model, batch) (calibration/compute.py ``measure_model``) and
# records each. A prediction is read against the median steady step of a real run
# (validate/measure.py, ``step_stats``), and what a user's epoch costs is the typical step,
# not the best one (timeit's rule, that other processes only ever add time, suits
# microbenchmarks, not this): on a Zen 3 EPYC the median repeat was 1-26 % slower than the
# fastest (median 6.5 %, 66 model/batch/rank records of one calibration), an error every
# prediction anchored on the fastest carries in the same direction. "median" takes the
# repeat whose whole step is the median (the lower one of an even count); "fastest" the
# fastest repeat.
STEP_ANCHORS = ("median", "fastest")
STEP_ANCHOR = "median"


def anchored_step(rec: dict, anchor: str | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the unhooked repeat ``rec``'s rows are rescaled to.

    Records without every repeat (no ``step_fwd_all_s`` / ``step_bwd_all_s``: written by older
    calibration scripts) have only the fastest, which is then what there is."""
    anchor = STEP_ANCHOR if anchor is None else anchor
    if anchor not in STEP_ANCHORS:
        raise ValueError(f"step anchor {anchor!r}: expected one of {', '.join(STEP_ANCHORS)}")
    f, b = rec.get("step_fwd_all_s") or [], rec.get("step_bwd_all_s") or []
    if anchor == "fastest" or not f or len(f) != len(b):
        return float(rec["step_fwd_s"]), float(rec["step_bwd_s"])
    order = sorted(range(len(f)), key=lambda i: f[i] + b[i])
    i = order[(len(order) - 1) // 2]
    return float(f[i]), float(b[i])


def make_run(table: WorkloadTable, rec: dict, anchor: str | None = None) -> Run:
    """Match a compute-stage record to ``table`` (row names and types must agree); its rows
    rescaled to the unhooked step :func:`anchored_step` picks."""
    rows = rec["rows"]
    names, types = tuple(rows["name"]), tuple(rows["type"])
    if names != table.names or types != table.types:
        n = next((i for i, (a, b) in enumerate(zip(names, table.names)) if a != b), min(len(names), len(table.names)))
        raise ValueError(
            f"{rec['model']}: measured rows do not match the workload table "
            f"({len(names)} vs {table.n_rows} rows; first difference at row {n})"
        )
    fwd = np.asarray(rows["fwd_s"], dtype=float).clip(min=0.0)
    bwd = np.asarray(rows["bwd_s"], dtype=float).clip(min=0.0)
    sf, sb = anchored_step(rec, anchor)
    if fwd.sum() > 0:
        fwd = fwd * (sf / fwd.sum())
    if bwd.sum() > 0:
        bwd = bwd * (sb / bwd.sum())
    return Run(f"{rec['model']}/{rec['dataset']}/b{rec['batch']}", table, int(rec["batch"]), fwd, bwd, sf, sb)
