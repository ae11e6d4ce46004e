"""Fit what communication costs inside a training step, from measured strategy steps.

The collective costs of a profile are measured on an otherwise idle machine
(calibration/collectives.py). Inside a training step they are not alone:

* the engines run compute and communication on separate streams and let them overlap; on a
  CPU, gloo's threads run on the cores the compute uses, so the overlap is not free. The
  profile key ``efficiency.comm_compute_interference`` (``k``) adds ``k x concurrent``
  seconds to an SPMD step, ``concurrent`` being the time both streams are busy at once
  (:func:`simdl.analytic.engine._spmd_timing`): ``k = 0`` free overlap, ``k = 1`` they
  serialise, ``k > 1`` each slows the other down (gloo's threads and the compute time-slice
  the same cores, and each switch costs);
* a collective waits for its peers' threads to be scheduled on busy cores, and shares the
  memory bandwidth with the compute: ``efficiency.collective_load_factor`` (``f``) scales
  its latency and bandwidth terms and ``efficiency.collective_load_overhead_us`` (``a``)
  adds a delay per call (:class:`simdl.analytic.costs.CommCosts`);
* all_reduce has a factor of its own, ``efficiency.collective_load_factor_all_reduce``
  (``f_ar``): idle, gloo's all_reduce reaches 2-3x the bus bandwidth of its all_gather and
  reduce_scatter, and inside a step it loses most of that lead (simdl.cluster.spec);
* both factors are for small messages: a message of S bytes is slowed by
  1 + (f - 1) / (1 + S / h), ``h`` = ``efficiency.collective_load_half_size_MiB`` (a 403 MB
  all-reduce in a step runs at nearly its idle speed, 1-67 MB ones at a half or a third).

:class:`StrategyStepFit` finds ``(k, f, f_ar, h, a)`` by bounded least squares on the relative
errors of the measured DDP/FSDP steps, each predicted by the engine itself with candidate
values (the ``predict`` callable), everything else of the profile fixed (compute rows,
optimizer, copies, collective curves: fitted separately). It then predicts each model's
steps from a fit to the *other* models' steps (``held_out_``): the check that the values
carry over to a model they were not fitted on.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
from scipy.optimize import least_squares

PARAMS = (
    "comm_compute_interference",
    "collective_load_factor",
    "collective_load_factor_all_reduce",
    "collective_load_half_size_MiB",
    "collective_load_overhead_us",
    "fsdp_unit_overhead_us",
)


class StrategyStepFit:
    """Estimator: ``fit(points, predict)`` -> self with ``interference_``,
    ``load_factor_``, ``load_factor_all_reduce_``, ``load_half_size_bytes_``,
    ``load_overhead_s_``, ``unit_overhead_s_``, ``residuals_`` (relative), ``errors_before_``
    (at the defaults k = 0, f = f_ar = 1, a = u = 0) and ``held_out_`` (leave-one-model-out
    errors).

    ``points``: rows with ``measured_s`` and ``model``; ``predict(theta, point)`` -> seconds,
    ``theta = (k, f, f_ar, h_bytes, a_seconds, u_seconds)``, u being FSDP2's host time per unit
    per step (``strategies.fsdp.unit_overhead_us`` in a profile). The half size is searched on a log scale,
    1 MB to 3 GB. ``fixed={5: 0.0}`` gives the form without u.
    """

    # k up to 5 (the profile accepts 20): CPU fits capped at 1 stop on the cap. f and f_ar up
    # to 10, as the profile accepts; a up to 20 ms per call, u up to 50 ms per unit.
    def __init__(
        self,
        *,
        bounds=((0.0, 5.0), (1.0, 10.0), (1.0, 10.0), (1e6, 3e9), (0.0, 0.02), (0.0, 0.05)),
        held_out: bool = True,
        fixed: Mapping[int, float] | None = None,
    ):
        self.bounds = bounds
        self.held_out = held_out
        # theta index -> value held there: a parameter no measured step depends on (f where
        # every all-gather and reduce-scatter blocks and is priced by its measured factor).
        self.fixed = dict(fixed or {})

    @staticmethod
    def _resid(theta, pts, predict) -> np.ndarray:
        return np.array([(predict(tuple(theta), p) - p["measured_s"]) / p["measured_s"] for p in pts])

    @staticmethod
    def _theta(z) -> tuple:
        """Search coordinates -> theta: the half size is searched as log10(bytes), a and u in ms."""
        return (z[0], z[1], z[2], 10.0 ** z[3], z[4] * 1e-3, z[5] * 1e-3)

    def _solve(self, pts, predict) -> np.ndarray:
        lo = np.array([b[0] for b in self.bounds], dtype=float)
        hi = np.array([b[1] for b in self.bounds], dtype=float)
        lo[3], hi[3] = np.log10(lo[3]), np.log10(hi[3])
        lo[4], hi[4] = lo[4] * 1e3, hi[4] * 1e3
        lo[5], hi[5] = lo[5] * 1e3, hi[5] * 1e3
        fixed = {i: (np.log10(v) if i == 3 else v * 1e3 if i in (4, 5) else v) for i, v in self.fixed.items()}
        free = [i for i in range(6) if i not in fixed]

        def full(zf):
            z = np.empty(6)
            z[free] = zf
            for i, v in fixed.items():
                z[i] = v
            return z

        best = None
        for x0 in ((1.0, 2.0, 2.0, 7.0, 1.0, 1.0), (0.5, 3.0, 4.0, 6.0, 2.0, 0.0), (1.0, 2.0, 4.0, 8.0, 0.0, 3.0)):
            x0 = np.clip(np.array(x0), lo, hi)[free]
            sol = least_squares(
                lambda zf: self._resid(self._theta(full(zf)), pts, predict),
                x0,
                bounds=(lo[free], hi[free]),
                diff_step=1e-3,
            )
            if best is None or sol.cost < best.cost:
                best = sol
        assert best is not None  # the loop above runs three starts
        return np.array(self._theta(full(best.x)))

    def fit(self, points: Iterable[Mapping], predict: Callable) -> "StrategyStepFit":
        pts = list(points)
        if not pts:
            raise ValueError("StrategyStepFit needs at least one measured step")
        theta = self._solve(pts, predict)
        (
            self.interference_,
            self.load_factor_,
            self.load_factor_all_reduce_,
            self.load_half_size_bytes_,
            self.load_overhead_s_,
            self.unit_overhead_s_,
        ) = (float(v) for v in theta)
        self.residuals_ = self._resid(theta, pts, predict)
        self.at_bounds_ = self._at_bounds(theta)
        self.errors_before_ = self._resid((0.0, 1.0, 1.0, 1e9, 0.0, 0.0), pts, predict)
        self.held_out_ = {}
        models = sorted({p["model"] for p in pts})
        if self.held_out and len(models) > 1:
            for m in models:
                rest = [p for p in pts if p["model"] != m]
                test = [p for p in pts if p["model"] == m]
                th = self._solve(rest, predict)
                self.held_out_[m] = {
                    "fitted_on": sorted({p["model"] for p in rest}),
                    "params": [float(v) for v in th],
                    "rel_errors": {p["variant"]: float(e) for p, e in zip(test, self._resid(th, test, predict))},
                }
        return self

    def _at_bounds(self, theta) -> dict[str, str]:
        """Free parameters the fit left on a bound ({params() name: "lower" | "upper"}): the
        steps do not pin them, and the value is the bound's, not a measurement's (on an Intel
        Xeon at 4 ranks, cpu-local-x4, h stayed at its 3e9-byte upper bound: all_reduce's load
        factor applied at every size measured). Within 0.1 % of the search range, in the
        coordinates searched (h on a log scale)."""
        out = {}
        for i, name in enumerate(self._params_of(theta)):
            if i in self.fixed:
                continue
            x, lo, hi = (np.log10(v) if i == 3 else v for v in (theta[i], *self.bounds[i]))
            if x - lo <= 1e-3 * (hi - lo):
                out[name] = "lower"
            elif hi - x <= 1e-3 * (hi - lo):
                out[name] = "upper"
        return out

    @staticmethod
    def _params_of(theta) -> dict:
        """theta (k, f, f_ar, h bytes, a s, u s) as the profile's keys and units."""
        k, f, far, h, a, u = (float(v) for v in theta)
        return {
            "comm_compute_interference": k,
            "collective_load_factor": f,
            "collective_load_factor_all_reduce": far,
            "collective_load_half_size_MiB": h / 2**20,
            "collective_load_overhead_us": a * 1e6,
            "fsdp_unit_overhead_us": u * 1e6,
        }

    def params(self) -> dict:
        return self._params_of(
            (
                self.interference_,
                self.load_factor_,
                self.load_factor_all_reduce_,
                self.load_half_size_bytes_,
                self.load_overhead_s_,
                self.unit_overhead_s_,
            )
        )
