"""Fit the alpha-beta collective model to nccl-tests-style measurements.

The model is the one the analytic engine evaluates (:class:`simdl.analytic.costs.CommCosts`)::

    t(collective, m bytes, n ranks) = overhead + collective_time(collective, m, n, B_bus, alpha, "auto")

with ``collective_time`` from :mod:`simdl.collectives.cost` (ring/tree, the cheaper one),
``B_bus`` the bus bandwidth (the profile stores it as a raw link rate times
``collective_bandwidth_*``), ``alpha`` the per-step latency (``collective_latency_*_us``)
and ``overhead`` the fixed cost per call (``collective_overhead_us``).

Fitted with :func:`scipy.optimize.least_squares` (bounds: all three >= 0) on *relative*
residuals ``(t_pred - t) / t``: message sizes span five decades and the small ones are
what pin alpha and the overhead. ``soft_l1`` loss keeps one noisy point (a load burst on
a shared host) from dragging the fit.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares

from ..collectives.cost import collective_time
from .quality import summary


class CollectiveFit:
    """Estimator: ``fit(measurements)`` -> self with ``overhead_s_``, ``alpha_s_``,
    ``bus_bandwidth_B_per_s_``, ``residuals_`` (relative), ``quality_``.

    A measurement is a mapping with ``collective``, ``bytes``, ``group_size``, ``time_s``.
    ``fit_overhead=False`` fixes the per-call overhead at ``overhead_s``.

    ``per_collective_bandwidth=True`` gives every collective its own bus bandwidth (alpha
    and overhead stay shared): gloo's all_gather and reduce_scatter reach a fraction of its
    all_reduce's bus bandwidth, NCCL's do not. Then ``bus_bandwidth_B_per_s_`` is the
    reference collective's (all_reduce if measured) and ``bandwidth_factors_`` maps every
    collective to its bandwidth relative to it (the profile's optional
    ``collective_bandwidth_factor_<collective>`` keys).
    """

    def __init__(
        self,
        *,
        algorithm: str = "auto",
        fit_overhead: bool = True,
        loss: str = "soft_l1",
        f_scale: float = 0.1,
        overhead_s: float = 0.0,
        per_collective_bandwidth: bool = False,
    ):
        self.algorithm = algorithm
        self.fit_overhead = fit_overhead
        self.loss = loss
        self.f_scale = f_scale
        self.overhead_s = overhead_s  # used when fit_overhead is False
        self.per_collective_bandwidth = per_collective_bandwidth

    # ------------------------------------------------------------------ model
    def _times(self, theta, X, colls=None) -> np.ndarray:
        overhead, alpha = theta[0], theta[1]
        inv = {c: theta[2 + i] for i, c in enumerate(colls)} if colls else None
        out = []
        for x in X:
            iv = inv.get(x["collective"], theta[2]) if inv else theta[2]
            out.append(
                overhead
                + collective_time(
                    x["collective"],
                    float(x["bytes"]),
                    int(x["group_size"]),
                    1.0 / max(iv, 1e-30),
                    alpha,
                    self.algorithm,
                )
            )
        return np.array(out)

    def fit(self, X: Iterable[Mapping]) -> "CollectiveFit":
        X = list(X)
        if len(X) < 2:
            raise ValueError(f"CollectiveFit needs at least 2 measurements, got {len(X)}")
        t = np.array([float(x["time_s"]) for x in X])
        present = sorted({x["collective"] for x in X})
        colls = None
        if self.per_collective_bandwidth:
            ref = "all_reduce" if "all_reduce" in present else present[0]
            colls = [ref] + [c for c in present if c != ref]
        inv0 = []
        for c in colls or [None]:
            sub = [x for x in X if c is None or x["collective"] == c]
            big = max(sub, key=lambda x: x["bytes"])
            inv0.append(big["time_s"] / max(big["bytes"], 1.0))
        small = float(np.min(t))
        k = len(inv0)
        x0 = np.array([small / 2 if self.fit_overhead else self.overhead_s, small / 4, *inv0])
        lo = np.array([0.0, 0.0] + [1e-15] * k)
        hi = np.array([np.inf] * (2 + k))
        if not self.fit_overhead:
            lo[0], hi[0] = self.overhead_s, self.overhead_s + 1e-15
        # Scale parameters to O(1) so the trust region works in comparable units.
        scale = np.array([max(small, 1e-6), max(small, 1e-6)] + [max(v, 1e-15) for v in inv0])

        def resid(z):
            return (self._times(z * scale, X, colls) - t) / t

        sol = least_squares(
            resid, x0 / scale, bounds=(lo / scale, hi / scale), loss=self.loss, f_scale=self.f_scale, x_scale="jac"
        )
        theta = sol.x * scale
        self.theta_, self.colls_ = theta, colls
        self.overhead_s_ = float(theta[0])
        self.alpha_s_ = float(theta[1])
        self.bus_bandwidth_B_per_s_ = float(1.0 / theta[2])
        self.bandwidth_factors_ = (
            {c: float(theta[2] / theta[2 + i]) for i, c in enumerate(colls)} if colls else {c: 1.0 for c in present}
        )
        pred = self._times(theta, X, colls)
        self.residuals_ = (pred - t) / t
        self.quality_ = summary(t, pred)
        self.n_samples_ = len(X)
        self.collectives_ = present
        self.bytes_range_ = (min(x["bytes"] for x in X), max(x["bytes"] for x in X))
        return self

    def predict(self, X: Iterable[Mapping]) -> np.ndarray:
        return self._times(self.theta_, list(X), self.colls_)

    def params(self) -> dict:
        out: dict[str, Any] = {
            "overhead_us": self.overhead_s_ * 1e6,
            "alpha_us": self.alpha_s_ * 1e6,
            "bus_bandwidth_GB_per_s": self.bus_bandwidth_B_per_s_ / 1e9,
        }
        if self.colls_:
            out["bandwidth_factors"] = {c: round(v, 4) for c, v in self.bandwidth_factors_.items()}
        return out


def held_out_split(X: Sequence[Mapping], every: int = 3) -> tuple[list[Mapping], list[Mapping]]:
    """Split by message size: every ``every``-th distinct size (from the second) is held out,
    and so is the largest size (an extrapolation check); the rest is fitted."""
    sizes = sorted({int(x["bytes"]) for x in X})
    held = {s for i, s in enumerate(sizes) if i % every == 1}
    if len(sizes) >= 4:
        held.add(sizes[-1])
    fit = [x for x in X if int(x["bytes"]) not in held]
    test = [x for x in X if int(x["bytes"]) in held]
    return fit, test


def fit_with_holdout(X: Sequence[Mapping], **kwargs) -> dict:
    """Fit on the kept sizes, report errors on the held-out ones, then refit on all."""
    fit_part, test_part = held_out_split(X)
    out: dict = {}
    if len(fit_part) >= 3 and test_part:
        est = CollectiveFit(**kwargs).fit(fit_part)
        out["held_out"] = _held_out_errors(test_part, est.predict(test_part))
    est = CollectiveFit(**kwargs).fit(X)
    out["estimator"] = est
    return out


def _held_out_errors(test_part: list[Mapping], pred) -> dict:
    """Relative error of each held-out prediction against its measured point, and, where the
    point carries the 95 % interval of its own measurement (``time_s_ci95``, simdl.calibrate
    .fit.quantile_interval), whether the prediction falls inside it: a miss inside the
    interval is one the measurement cannot tell from the model's error."""
    err, inside = [], []
    for x, p in zip(test_part, pred):
        t = float(x["time_s"])
        ci = x.get("time_s_ci95")
        e = {"bytes": int(x["bytes"]), "collective": x["collective"], "rel_error": round(float(p / t - 1.0), 4)}
        if ci:
            e["measured_ci95_rel"] = [round(ci[0] / t - 1.0, 4), round(ci[1] / t - 1.0, 4)]
            inside.append(ci[0] <= p <= ci[1])
        err.append(e)
    rel = [abs(e["rel_error"]) for e in err]
    out = {
        "sizes_bytes": sorted({e["bytes"] for e in err}),
        "errors": err,
        "max_abs_rel_error": round(max(rel), 4),
        "median_abs_rel_error": round(float(np.median(rel)), 4),
        "within_10pct": int(sum(r <= 0.10 for r in rel)),
        "n": len(err),
    }
    if len(inside) == len(err):
        out["within_10pct_or_ci95"] = int(sum(r <= 0.10 or i for r, i in zip(rel, inside)))
        out["median_ci95_halfwidth"] = round(
            float(np.median([(e["measured_ci95_rel"][1] - e["measured_ci95_rel"][0]) / 2 for e in err])), 4
        )
    return out


def regimes_with_holdout(X: Sequence[Mapping], collective: str, **kwargs) -> dict:
    """:class:`~simdl.calibrate.regimes.RegimeFit` on the kept sizes of one collective, errors
    on the held-out ones (:func:`held_out_split`), then the fit on all sizes."""
    from .regimes import RegimeFit

    fit_part, test_part = held_out_split(X)
    out: dict = {}
    if len(fit_part) >= 3 and test_part:
        est = RegimeFit(collective, **kwargs).fit(fit_part)
        out["held_out"] = _held_out_errors(test_part, est.predict(test_part))
        out["held_out"]["fit_on_held_out_split"] = est.params()
    out["estimator"] = RegimeFit(collective, **kwargs).fit(X)
    return out
