"""How much a rank's compute time varies from one step to the next, from the strategy stage.

The strategy stage (calibration/strategies.py) times ``local`` training -- every rank
trains its own copy, no communication, all ranks at once -- for 20-50 steps per model. On
a shared host the ranks' steps wander: the OS schedules more threads than there are cores,
and other tenants come and go. The spread of ``log(step time)`` around each rank's own
level is that wander, free of the differences between models and ranks. It is taken on
the log because it scales with the step.

The spread has two parts on this kind of host: most steps vary by a few percent, and now
and then one stalls (cpu-local-x4: a step 1.5-2x its neighbours). A lognormal cannot be
both, and the SimPy engine draws every step of every PS worker from one: fitted by the
plain standard deviation it would put the rare stalls' size on every step (an
``E[max]`` of four workers' steps 12% above their mean instead of 3%, for a 4-rank
calibration). So ``sigma_`` is the robust estimate, 1.4826 x the median absolute deviation of
each series about its median (the standard deviation for normal data), pooled over the
series weighted by their steps; the plain standard deviation is kept as ``sd_`` to show
how heavy the tail is.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

MAD_TO_SD = 1.4826  # 1 / Phi^-1(3/4): a normal distribution's sd over its median absolute deviation


class StepJitterFit:
    """Estimator: ``fit(series)`` -> self with ``sigma_`` (robust sd of log step time,
    pooled), ``sd_`` (plain sd, pooled by degrees of freedom), ``n_series_``, ``n_steps_``
    and ``per_series_`` ({label: robust sd}).

    ``series``: rows with ``step_times_s`` (a list of one rank's steady step times) and a
    ``label``; series with fewer than 3 steps are ignored.
    """

    def fit(self, series: Iterable[Mapping]) -> "StepJitterFit":
        import statistics  # here: a prediction imports this module (noise_warning) but fits nothing

        ss, dof, n, robust_ss = 0.0, 0, 0, 0.0
        self.per_series_: dict[str, float] = {}
        for s in series:
            t = [float(x) for x in (s.get("step_times_s") or []) if x and x > 0]
            if len(t) < 3:
                continue
            logs = [math.log(x) for x in t]
            mean = sum(logs) / len(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            dof += len(logs) - 1
            med = statistics.median(logs)
            r = MAD_TO_SD * statistics.median(abs(v - med) for v in logs)
            robust_ss += len(logs) * r * r
            n += len(logs)
            self.per_series_[str(s.get("label", len(self.per_series_)))] = r
        if dof == 0:
            raise ValueError("StepJitterFit needs at least one series of 3 or more step times")
        self.sigma_ = math.sqrt(robust_ss / n)
        self.sd_ = math.sqrt(ss / dof)
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


# Above this spread a machine's own steps wander more than the accuracy simdl's validation
# judges a step-time prediction by (step-time MAPE at most 5 %, validate/README.md), so one run cannot
# show that accuracy. Measured: cpu-xeon-emr (sigma 0.013) gave 5.2 % in its first blind
# sweep; cpu-xeon-emr-b (0.130) gave 6.4 % and 13.0 % in two blind sweeps of the same 24
# runs two hours apart, whose step medians differed by a median 11 % (max 51 %) with no other
# process busy (lab/CAMPAIGN.md, "The same 24 runs again").
NOISY_SIGMA = 0.05


def noise_warning(sigma: float | None) -> str:
    """'' for a quiet machine, else one sentence for calibration and validation reports."""
    if sigma is None or not sigma > NOISY_SIGMA:
        return ""
    return (
        f"this machine's steps wander: compute jitter {sigma:.3f} (robust sd of log step time, "
        f"simdl.calibrate.jitter) is above {NOISY_SIGMA:g}, so one run cannot check a prediction to better "
        f"than about {100 * sigma:.0f} %; repeat the validation runs and pool them (`simdl report --repeats`)"
    )
