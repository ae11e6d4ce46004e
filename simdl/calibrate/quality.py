"""Fit-quality numbers every fitter reports the same way."""

from __future__ import annotations

import numpy as np


def r2(measured, predicted) -> float:
    """Coefficient of determination 1 - SS_res / SS_tot (nan with fewer than 2 points)."""
    y = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    if y.size < 2:
        return float("nan")
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - float(np.sum((y - p) ** 2)) / ss_tot


def rel_errors(measured, predicted) -> np.ndarray:
    """(predicted - measured) / measured."""
    y = np.asarray(measured, dtype=float)
    return (np.asarray(predicted, dtype=float) - y) / y


def summary(measured, predicted) -> dict:
    """R2 on the values and on their logs, and relative-error statistics."""
    y = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    e = rel_errors(y, p)
    ok = (y > 0) & (p > 0)
    return {
        "n": int(y.size),
        "r2": _round(r2(y, p)),
        "r2_log": _round(r2(np.log(y[ok]), np.log(p[ok]))) if ok.sum() > 1 else float("nan"),
        "median_abs_rel_error": _round(float(np.median(np.abs(e)))) if e.size else float("nan"),
        "max_abs_rel_error": _round(float(np.max(np.abs(e)))) if e.size else float("nan"),
        "rms_rel_error": _round(float(np.sqrt(np.mean(e**2)))) if e.size else float("nan"),
    }


def _round(x: float) -> float:
    return float(f"{x:.4g}") if np.isfinite(x) else float("nan")


def rounded_params(params: dict) -> dict:
    """An estimator's ``params()`` as the fit report keeps them: floats to 5 significant digits."""
    return {k: (float(f"{v:.5g}") if isinstance(v, float) else v) for k, v in params.items()}
