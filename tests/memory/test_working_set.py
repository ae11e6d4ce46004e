"""A backward op's working set beyond what its row already holds (the table's
``bwd_working_bytes``) is live while the op runs (simdl.memory.rowevents)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simdl.cluster import allocate, load_cluster
from simdl.memory.timeline import MemoryOptions, build_timeline
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload


def _peak(table, batch=8):
    wl = Workload(table=table, batch_size=batch, optimizer="momentum")
    plan = build_plan(wl, allocate(load_cluster("a100-80gb-nvlink"), 1), StrategyConfig("ddp"))
    tl = build_timeline(wl, plan, MemoryOptions())
    return tl.peak()[0], tl


def _with_working(table, row: int, per_sample: float, column: str = "bwd_working_bytes"):
    col = np.zeros(table.n_rows)
    col[row] = per_sample
    ps = dict(table.per_sample, **{column: col})
    fx = dict(table.fixed, **{column: np.zeros(table.n_rows)})
    return replace(table, per_sample=ps, fixed=fx)


def test_a_working_set_below_the_rows_gradients_changes_nothing():
    t = load_workload("resnet50", "cifar10")
    base, _ = _peak(t)
    out = t.per_sample["output_bytes"]
    row = int(np.argmax(out))
    assert _peak(_with_working(t, row, out[row]))[0] == base


def test_a_large_working_set_is_live_during_the_rows_backward_and_freed_after():
    t = load_workload("resnet50", "cifar10")
    base, tl0 = _peak(t)
    row = 5
    huge = 4 * base / 8  # per sample, batch 8: four times the old peak
    peak, tl = _peak(_with_working(t, row, huge))
    assert peak > 3 * base
    assert tl.total()[-1] == tl0.total()[-1]  # freed again: the step ends where it did
    labels = [lab for lab in tl.labels if lab == "backward op working set"]
    assert len(labels) == 2


def test_forward_temporaries_are_live_during_the_rows_forward_and_freed_after():
    t = load_workload("resnet50", "cifar10")
    base, tl0 = _peak(t)
    huge = 4 * base / 8  # per sample, batch 8: four times the old peak
    peak, tl = _peak(_with_working(t, 5, huge, "fwd_working_bytes"))
    assert peak > 3 * base
    assert tl.total()[-1] == tl0.total()[-1]
    assert [lab for lab in tl.labels if lab == "forward temporaries"] == ["forward temporaries"] * 2
