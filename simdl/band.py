"""How far a measured step may fall from a prediction on a calibrated cluster: a band.

A calibrated profile says two things about its own accuracy. Both come from the calibration
alone, never from validation runs:

* the model's error on models it was not fitted on. This is the strategy-step fit's
  leave-one-model-out errors (``calibration.strategy_fit.held_out``, simdl.calibrate.overlap),
  on the log scale, as their root mean square;
* the machine's own wander from step to step (``efficiency.compute_jitter``,
  simdl.calibrate.jitter): the robust sd of log step time.

Taken as independent errors on the log scale, they add in quadrature:
``sigma = sqrt(model^2 + jitter^2)``. The band is ``step x exp(+-z sigma)``, with z the
normal quantile of the level (1.645 for 90 %). A preset without a calibration has neither,
and gets no band: its error is unknown, not zero.

Checked against every committed validation sweep, predicted again with each machine's own
profile (lab/CAMPAIGN.md, "A band around each prediction"). That check is the only
test of the band: nothing in it was fitted to those runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LEVEL = 0.90  # the band simdl predict prints and Result carries


@dataclass(frozen=True)
class StepSpread:
    """The two parts of a profile's step spread, log scale, and where each came from."""

    model: float  # rms of log(1 + held-out error) of the strategy-step fit
    model_points: int
    jitter: float  # efficiency.compute_jitter (0 when the profile has none)

    @property
    def sigma(self) -> float:
        return math.hypot(self.model, self.jitter)

    def describe(self) -> str:
        return (
            f"calibration's held-out step error {100 * self.model:.1f} % rms over {self.model_points} steps "
            f"and step jitter {100 * self.jitter:.1f} %"
        )


def step_spread(spec) -> StepSpread | None:
    """The profile's step spread, or None for a profile without held-out step errors (presets)."""
    fit = (spec.calibration or {}).get("strategy_fit") or {}
    errors = [
        float(e)
        for h in (fit.get("held_out") or {}).values()
        for e in ((h or {}).get("rel_errors") or {}).values()
        if e is not None and float(e) > -1.0
    ]
    if not errors:
        return None
    model = math.sqrt(sum(math.log1p(e) ** 2 for e in errors) / len(errors))
    cj = spec.efficiency.compute_jitter
    return StepSpread(model=model, model_points=len(errors), jitter=float(cj.value) if cj is not None else 0.0)


def band(value: float, sigma: float, level: float = LEVEL) -> tuple[float, float]:
    """(low, high) around ``value`` holding ``level`` of a lognormal spread ``sigma``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level {level!r}: accepted 0 < level < 1")
    from statistics import NormalDist  # only for calibrated profiles: presets have no band

    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return value * math.exp(-z * sigma), value * math.exp(z * sigma)


def no_band_reason(spec) -> str | None:
    """Why a calibrated profile gives no band (None for an uncalibrated preset, whose error is
    simply unknown, and for a profile that has a band)."""
    cal = spec.calibration or {}
    if not cal or step_spread(spec) is not None:
        return None
    fit = cal.get("strategy_fit") or {}
    if not fit:
        return (
            "none: the profile's calibration has no strategy-step fit (its strategies stage was not run, or "
            "measured too little to fit), so no held-out step error sizes a band"
        )
    models = sorted({str(p.get("model")) for p in fit.get("points") or [] if isinstance(p, dict)})
    if len(models) < 2:
        return (
            f"none: the strategy-step fit has {len(models)} model(s){': ' + models[0] if models else ''}; "
            "a held-out step error needs a model left out of the fit, so at least two"
        )
    return "none: the strategy-step fit recorded no held-out step errors, so none sizes a band"
