"""Fit a piecewise alpha-beta regime curve (:mod:`simdl.collectives.regimes`) to one
collective's measured times.

Within a regime the time is linear in the two unknowns::

    t - overhead = ring_steps(n) * alpha + wire_coefficient(n) * m * (1 / B)

so one regime is a non-negative least-squares problem (:func:`scipy.optimize.nnls`) on
*relative* residuals ``(t_pred - t) / t`` (rows divided by ``t``: sizes span five decades),
iteratively reweighted to a Huber loss (``f_scale`` = 10 %: a size that landed in the host's
slow mode counts linearly, not squared). The regimes are contiguous runs of the measured
sizes ordered by bytes per ring step; dynamic programming finds, for every number of regimes
K <= ``max_regimes``, the split with the least total loss (every regime holding at least
``min_points`` sizes, so that both of its parameters are pinned by data). K is chosen by
interleaved cross-validation *within the data given to fit()* (the fewest regimes within one
standard error of the best CV error): a regime that only follows noise predicts its
left-out neighbours worse, or no better. Each regime records the step sizes it was
fitted on; between two regimes the curve blends them (:class:`~simdl.collectives.regimes.RegimeCurve`),
or, given ``temp_threshold`` (the calibrated host's mmap threshold, for gloo), steps at the
threshold where the gap holds it -- in the cross-validation, the held-out check and
``predict`` alike, as the engines will price it.

``overhead_s`` is not fitted: at one group size it cannot be told from ``alpha`` (both are
a constant per call); :mod:`simdl.calibrate.fit` passes the cost of the same call on a
one-rank group, measured by calibration/collectives.py.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np
from scipy.optimize import nnls

from ..collectives.regimes import Regime, RegimeCurve, ring_steps, step_bytes, wire_coefficient
from .quality import summary


def _huber(r: np.ndarray, c: float) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= c, 0.5 * r * r, c * (a - 0.5 * c))


# 1/B below this (1e-15 s/byte = 1 PB/s) means "no bandwidth term": a regime whose times do
# not grow with size. Kept finite so that the curve stays a valid alpha-beta line.
_MIN_INV_BW = 1e-15


class RegimeFit:
    """Estimator: ``fit(measurements)`` -> self with ``curve_`` (a
    :class:`~simdl.collectives.regimes.RegimeCurve`), ``regimes_``, ``breakpoints_step_bytes_``,
    ``n_regimes_``, ``cv_error_`` (mean |rel. error| of the cross-validation per K tried), ``residuals_`` (relative, in input order),
    ``quality_`` and ``regime_quality_`` (per regime).

    A measurement is a mapping with ``bytes``, ``group_size`` and ``time_s`` (one collective).
    ``temp_threshold``: bytes at which the measured host's allocator maps a buffer fresh, for
    a backend that allocates a whole-message temporary per call (gloo); None otherwise.
    """

    def __init__(
        self,
        collective: str,
        *,
        overhead_s: float = 0.0,
        max_regimes: int = 4,
        min_points: int = 3,
        cv_folds: int = 3,
        f_scale: float = 0.1,
        irls_iterations: int = 3,
        temp_threshold: float | None = None,
    ):
        self.collective = collective
        self.overhead_s = overhead_s
        self.temp_threshold = temp_threshold
        self.max_regimes = max_regimes
        self.min_points = min_points
        self.cv_folds = cv_folds
        self.f_scale = f_scale
        self.irls_iterations = irls_iterations

    # ------------------------------------------------------------------ one regime
    def _design(self, X: list[Mapping]) -> tuple[np.ndarray, np.ndarray]:
        A = np.array(
            [
                [
                    ring_steps(self.collective, int(x["group_size"])),
                    wire_coefficient(self.collective, int(x["group_size"])) * float(x["bytes"]),
                ]
                for x in X
            ]
        )
        t = np.array([float(x["time_s"]) for x in X])
        return A, t

    def _segment(self, A: np.ndarray, t: np.ndarray) -> tuple[float, float, float]:
        """(alpha, 1/B, loss) of one regime: non-negative least squares on relative residuals,
        reweighted (Huber, ``f_scale``) so that one noisy size does not pull the regime."""
        # Rows scaled by 1/t; 1/B >= _MIN_INV_BW written as 1/B = _MIN_INV_BW + z, z >= 0.
        W = A / t[:, None]
        b = (t - self.overhead_s - A[:, 1] * _MIN_INV_BW) / t
        scale = np.maximum(np.abs(W).max(axis=0), 1e-300)  # columns to O(1) for nnls
        w = np.ones(len(t))
        for _ in range(self.irls_iterations + 1):
            sw = np.sqrt(w)
            z, _ = nnls(W / scale * sw[:, None], b * sw)
            alpha, inv = z[0] / scale[0], z[1] / scale[1] + _MIN_INV_BW
            r = (A @ np.array([alpha, inv]) + self.overhead_s - t) / t
            a = np.abs(r)
            w = np.where(a <= self.f_scale, 1.0, self.f_scale / np.maximum(a, 1e-300))
        return float(alpha), float(inv), float(np.sum(_huber(r, self.f_scale)))

    def _split(self, s: np.ndarray, A: np.ndarray, t: np.ndarray, k_max: int) -> dict[int, tuple[float, list]]:
        """For every K <= k_max: (least total loss, [(i, j), ...] regime index ranges) over the
        points sorted by step bytes (dynamic programming over contiguous splits)."""
        N = len(t)
        m = max(1, min(self.min_points, N))
        seg: dict[tuple[int, int], float] = {}

        def cost(i: int, j: int) -> float:
            # Too few points, or a split between equal step sizes: not a regime.
            if j - i < m or (i > 0 and s[i] == s[i - 1]) or (j < N and s[j] == s[j - 1]):
                return math.inf
            if (i, j) not in seg:
                seg[(i, j)] = self._segment(A[i:j], t[i:j])[2]
            return seg[(i, j)]

        kmax = max(1, min(k_max, N // m))
        best = np.full((kmax + 1, N + 1), math.inf)
        back = np.zeros((kmax + 1, N + 1), dtype=int)
        best[0][0] = 0.0
        for k in range(1, kmax + 1):
            for j in range(k * m, N + 1):
                for i in range((k - 1) * m, j - m + 1):
                    if best[k - 1][i] < math.inf:
                        c = best[k - 1][i] + cost(i, j)
                        if c < best[k][j]:
                            best[k][j], back[k][j] = c, i
        out = {}
        for k in range(1, kmax + 1):
            if best[k][N] < math.inf:
                bounds, j = [], N
                for kk in range(k, 0, -1):
                    i = back[kk][j]
                    bounds.append((i, j))
                    j = i
                out[k] = (float(best[k][N]), bounds[::-1])
        return out

    def _curve(self, s: np.ndarray, A: np.ndarray, t: np.ndarray, bounds: list) -> RegimeCurve:
        regimes = []
        for i, j in bounds:
            alpha, inv, _ = self._segment(A[i:j], t[i:j])
            regimes.append(Regime(float(s[i]), float(s[j - 1]), alpha, 1.0 / inv))
        return RegimeCurve(self.collective, float(self.overhead_s), tuple(regimes))

    # ------------------------------------------------------------------ fit
    def fit(self, X: Iterable[Mapping]) -> "RegimeFit":
        X = list(X)
        if len(X) < 2:
            raise ValueError(f"RegimeFit needs at least 2 measurements, got {len(X)}")
        if {x.get("collective", self.collective) for x in X} != {self.collective}:
            raise ValueError(f"RegimeFit({self.collective!r}) got measurements of other collectives")
        steps = np.array([step_bytes(self.collective, float(x["bytes"]), int(x["group_size"])) for x in X])
        order = np.argsort(steps, kind="stable")
        Xs = [X[i] for i in order]
        s = steps[order]
        A, t = self._design(Xs)
        N = len(Xs)
        splits = self._split(s, A, t, self.max_regimes)
        # Number of regimes: interleaved cross-validation inside the data given to fit() (every
        # ``cv_folds``-th size left out in turn, the split refitted on the rest): the K whose
        # left-out sizes are predicted best (mean |relative error|). A regime that only follows
        # noise predicts its left-out neighbours worse and is not kept.
        self.cv_error_ = {}
        cv_se = {}
        for k in splits:
            errs: list[float] = []
            complete = True
            for f in range(self.cv_folds):
                test = np.arange(N) % self.cv_folds == f
                if test.all() or not test.any():
                    continue
                tr = ~test
                sub = self._split(s[tr], A[tr], t[tr], k)
                if k not in sub:
                    complete = False
                    break
                curve = self._curve(s[tr], A[tr], t[tr], sub[k][1])
                pred = np.array(
                    [
                        curve.time(float(x["bytes"]), int(x["group_size"]), temp_threshold=self.temp_threshold)
                        for x, keep in zip(Xs, test)
                        if keep
                    ]
                )
                errs += list(np.abs(pred / t[test] - 1.0))
            if complete and errs:
                self.cv_error_[k] = round(float(np.mean(errs)), 4)
                cv_se[k] = float(np.std(errs) / math.sqrt(len(errs)))
        if self.cv_error_:
            # The one-standard-error rule (Hastie, Tibshirani & Friedman, ESL 2nd ed., s. 7.10):
            # the fewest regimes whose CV error is within one standard error of the best.
            k_best = min(self.cv_error_, key=lambda kk: (self.cv_error_[kk], kk))
            k = min(kk for kk in self.cv_error_ if self.cv_error_[kk] <= self.cv_error_[k_best] + cv_se[k_best])
        else:
            k = min(splits)
        bounds = splits[k][1]
        self.curve_ = self._curve(s, A, t, bounds)
        self.regimes_ = self.curve_.regimes
        self.n_regimes_ = k
        # Where one regime's fitted sizes end and the next one's begin (the curve blends between).
        self.breakpoints_step_bytes_ = [
            (a.hi_step_bytes, b.lo_step_bytes) for a, b in zip(self.regimes_, self.regimes_[1:])
        ]
        pred = self.predict(X)
        t_in = np.array([float(x["time_s"]) for x in X])
        self.residuals_ = (pred - t_in) / t_in
        self.quality_ = summary(t_in, pred)
        ps = self.predict(Xs)
        self.regime_quality_ = [
            {"step_bytes": [float(s[i]), float(s[j - 1])], **summary(t[i:j], ps[i:j])} for i, j in bounds
        ]
        self.n_samples_ = N
        self.bytes_range_ = (min(int(x["bytes"]) for x in X), max(int(x["bytes"]) for x in X))
        return self

    def predict(self, X: Iterable[Mapping]) -> np.ndarray:
        return np.array(
            [self.curve_.time(float(x["bytes"]), int(x["group_size"]), temp_threshold=self.temp_threshold) for x in X]
        )

    def params(self) -> dict:
        """Readable fitted values (the profile's form: us, GB/s, bytes per ring step)."""
        return {
            "overhead_us": round(self.curve_.overhead * 1e6, 3),
            "regimes": [
                {
                    "step_bytes": [int(r.lo_step_bytes), int(r.hi_step_bytes)],
                    "alpha_us": float(f"{r.alpha * 1e6:.5g}"),
                    "bus_GB_per_s": float(f"{r.bandwidth / 1e9:.5g}"),
                }
                for r in self.regimes_
            ],
        }
