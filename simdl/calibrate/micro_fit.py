"""Fit microbenchmarks of one op class: a fixed cost per call plus the work over a rate."""

from __future__ import annotations

from typing import Iterable

import numpy as np
from scipy.optimize import least_squares


class MicroFit:
    """Estimator for microbenchmarks of one op class: ``t = overhead + max(flops/F, bytes/B)``.

    ``fit`` -> self with ``flops_per_s_``, ``bytes_per_s_``, ``overhead_s_`` (whichever the
    class has data for), ``residuals_`` (relative). Reported per op class next to the
    roofline fit; not written to the profile (the engine has one efficiency per resource).
    """

    def __init__(self, *, op_class: str):
        self.op_class = op_class

    def fit(self, X: Iterable[dict]) -> "MicroFit":
        X = list(X)
        t = np.array([x["time_s"] for x in X])
        f = np.array([x.get("flops", 0.0) for x in X])
        b = np.array([x.get("bytes", 0.0) for x in X])
        use_f = bool(f.any())

        def model(z):
            o, inv = z[0] * 1e-6, z[1] * 1e-12
            work = f if use_f else b
            return o + work * inv

        if not (f.any() or b.any()):  # launch-only: the overhead is the median time
            self.overhead_s_ = float(np.median(t))
            self.flops_per_s_ = self.bytes_per_s_ = None
            self.residuals_ = (t - self.overhead_s_) / t
            return self
        work = f if use_f else b
        x0 = np.array([1.0, float(np.median(t / np.maximum(work, 1))) * 1e12])
        sol = least_squares(lambda z: (model(z) - t) / t, x0, bounds=([0, 1e-12], [np.inf, np.inf]))
        self.overhead_s_ = float(sol.x[0] * 1e-6)
        rate = 1.0 / (sol.x[1] * 1e-12)
        self.flops_per_s_ = rate if use_f else None
        self.bytes_per_s_ = None if use_f else rate
        self.residuals_ = (model(sol.x) - t) / t
        return self
