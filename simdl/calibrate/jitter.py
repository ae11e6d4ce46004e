"""How much a rank's compute time varies from one step to the next, from the strategy stage.

The strategy stage (calibration/strategies.py) times ``local`` training -- every rank
trains its own copy, no communication, all ranks at once -- for 20-50 steps per model. On
a shared host the ranks' steps wander: the OS schedules more threads than there are cores,
and other tenants come and go. The spread of ``log(step time)`` around each rank's own mean
is that wander, free of the differences between models and ranks; pooled over every
(rank, model) series by its degrees of freedom it is ``efficiency.compute_jitter``, the
sigma of the mean-one lognormal the SimPy engine draws a parameter-server worker's compute
from (simdl.sim.stragglers). The log is used because the spread scales with the step (a
stall of a few percent of the step), and the plain standard deviation rather than a robust
one because the occasional long step is part of what drives workers apart.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping


class StepJitterFit:
    """Estimator: ``fit(series)`` -> self with ``sigma_`` (pooled sd of log step time),
    ``n_series_``, ``n_steps_`` and ``per_series_`` ({label: sd}).

    ``series``: rows with ``step_times_s`` (a list of one rank's steady step times) and a
    ``label``; series with fewer than 3 steps are ignored.
    """

    def fit(self, series: Iterable[Mapping]) -> "StepJitterFit":
        ss, dof, n = 0.0, 0, 0
        self.per_series_: dict[str, float] = {}
        for s in series:
            t = [float(x) for x in (s.get("step_times_s") or []) if x and x > 0]
            if len(t) < 3:
                continue
            logs = [math.log(x) for x in t]
            mean = sum(logs) / len(logs)
            dev = sum((v - mean) ** 2 for v in logs)
            ss += dev
            dof += len(logs) - 1
            n += len(logs)
            self.per_series_[str(s.get("label", len(self.per_series_)))] = math.sqrt(dev / (len(logs) - 1))
        if dof == 0:
            raise ValueError("StepJitterFit needs at least one series of 3 or more step times")
        self.sigma_ = math.sqrt(ss / dof)
        self.n_series_ = len(self.per_series_)
        self.n_steps_ = n
        return self


def local_step_series(stage) -> list[dict]:
    """Each rank's ``local`` step-time series in a strategy stage's records
    (:class:`simdl.calibrate.records.StageRecords`)."""
    out = []
    for rank, recs in sorted(stage.measurements.items()):
        for key, r in sorted(recs.items()):
            if r.get("variant") == "local" and not r.get("skipped") and r.get("step_times_s"):
                out.append({"label": f"{key}/rank{rank}", "step_times_s": r["step_times_s"]})
    return out
