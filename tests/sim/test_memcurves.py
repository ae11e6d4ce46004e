"""Memory curves placed for all rank classes at once equal each class placed alone."""

import numpy as np
from simdl.analytic.costs import device_rates, row_times, spmd_or_ps_rates

import simdl
from simdl.memory.model import timeline_for
from simdl.memory.place import event_times
from simdl.sim.memcurves import task_windows
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload


def test_every_class_curve_is_its_own_placement():
    run = simdl.predict(
        model="resnet18",
        strategy="fsdp",
        gpus=8,
        cluster="dgx-a100",
        engine="sim",
        jitter="lognormal:0.2",
        return_run=True,
    )
    plan, cluster = run.plan, run.cluster
    wl = Workload(load_workload("resnet18", dataset="cifar10"))
    rows = row_times(wl.table, wl.batch_size, spmd_or_ps_rates(device_rates(cluster, wl.precision), plan, wl.table))
    tl = timeline_for(wl, plan, cluster)
    assert len(run.classes) == 8
    assert len({tuple(m.times) for m in run.memory.values()}) == 8  # jitter: every class its own times
    for c in range(8):
        start, stop = task_windows([r for r in run.records if r.cls == c], len(plan.tasks), 2)
        alone = np.maximum.accumulate(event_times(tl, plan.tasks, start, stop, rows))
        assert np.array_equal(run.memory[c].times, np.concatenate([[0.0], alone]))
        assert run.memory[c].times[-1] > 0
