"""Fit how much the concurrent compute/communication time costs (interference).

The analytic engine runs compute and communication on separate streams and, by default,
lets them overlap for free. On a CPU cluster gloo's communication threads run on the same
cores as the compute, so the overlap is an illusion, and worse: both slow down. The profile key
``efficiency.comm_compute_interference`` (a factor ``k``) makes the engine add
``k x concurrent`` seconds to an SPMD step, where ``concurrent`` is the time both streams
are busy at once (see :func:`simdl.analytic.engine._spmd_timing`): ``k = 0`` free overlap,
``k = 1`` serialised, ``k > 1`` mutual slow-down.

A prediction is therefore linear in ``k``: ``pred(k) = P0 + k (P1 - P0)`` with ``P0`` the
step predicted with ``k = 0`` and ``P1`` with ``k = 1``. :class:`InterferenceFit` solves for
``k`` in [0, 20] by least squares on the errors of measured DDP/FSDP steps, each divided by
the measured step.

Anchoring (when a row gives ``measured_local_s`` and ``pred_compute_s``): the step is split
into the compute the same ranks measure without communication (the ``local`` variant) and
the rest, and only the rest is fitted: ``measured - local`` against ``pred(o) - C`` with
``C`` the predicted compute-stream time. The factor then reflects the communication and
its interference, not the error of the compute model (fitted and checked separately).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
from scipy.optimize import least_squares


class InterferenceFit:
    """Estimator: ``fit(X)`` with rows ``{measured_s, pred_k0_s, pred_k1_s}`` -> self with
    ``interference_``, ``residuals_`` (relative), ``errors_before_`` (at k = 0)."""

    def __init__(self, *, bounds: tuple[float, float] = (0.0, 20.0)):
        self.bounds = bounds

    def _arrays(self, X):
        m = np.array([x["measured_s"] for x in X], dtype=float)
        p0 = np.array([x["pred_k0_s"] for x in X], dtype=float)
        p1 = np.array([x["pred_k1_s"] for x in X], dtype=float)
        anchored = all(x.get("measured_local_s") and x.get("pred_compute_s") for x in X)
        if anchored:
            local = np.array([x["measured_local_s"] for x in X], dtype=float)
            comp = np.array([x["pred_compute_s"] for x in X], dtype=float)
            p0, p1 = p0 - comp + local, p1 - comp + local
        return m, p0, p1, anchored

    def fit(self, X: Iterable[Mapping]) -> "InterferenceFit":
        X = list(X)
        m, p0, p1, self.anchored_ = self._arrays(X)

        def resid(z):
            return (p0 + z[0] * (p1 - p0) - m) / m

        sol = least_squares(resid, np.array([0.5]), bounds=([self.bounds[0]], [self.bounds[1]]))
        self.interference_ = float(sol.x[0])
        self.residuals_ = resid(sol.x)
        self.errors_before_ = (p0 - m) / m
        return self

    def predict(self, X: Iterable[Mapping]) -> np.ndarray:
        _, p0, p1, _ = self._arrays(list(X))
        return p0 + self.interference_ * (p1 - p0)
