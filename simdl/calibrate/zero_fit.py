"""Fit DeepSpeed ZeRO's host time per parameter and per submodule call to measured ZeRO steps.

The ZeRO plans (simdl.strategies.zero_plan) price DeepSpeed's Python around each parameter
(``strategies.zero.param_overhead_us``, stages 1-3) and around each module call
(``strategies.zero.module_overhead_us``, stage 3) as host time. :class:`ZeROHostFit` finds both
by bounded least squares on the relative errors of measured ZeRO steps, each predicted by the
engine with candidate values (the ``predict`` callable), everything else of the profile fixed
(the interference and collective-load fit of simdl.calibrate.overlap comes first). A stage-2
step pins the per-parameter cost; a stage-3 step adds the per-call cost. Without a stage-3 step
the per-call cost is held at 0. ``held_out_`` predicts each model's steps (each batch size's,
where one model was measured) from a fit to the others.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
from scipy.optimize import least_squares

# Search bounds, seconds: up to 20 ms per parameter and 50 ms per module call (the FSDP
# per-unit bound of simdl.calibrate.overlap).
BOUNDS = ((0.0, 0.02), (0.0, 0.05))


class ZeROHostFit:
    """Estimator: ``fit(points, predict)`` -> self with ``param_s_``, ``module_s_``,
    ``residuals_`` (relative), ``errors_before_`` (both at 0), ``held_out_`` and ``held_``
    (the parameters no point depends on, held at 0).

    ``points``: rows with ``measured_s``, ``model``, ``batch`` and ``stage``;
    ``predict((param_s, module_s), point)`` -> seconds."""

    def __init__(self, *, bounds=BOUNDS, held_out: bool = True):
        self.bounds = bounds
        self.held_out = held_out

    @staticmethod
    def _resid(theta, pts, predict) -> np.ndarray:
        return np.array([(predict(tuple(theta), p) - p["measured_s"]) / p["measured_s"] for p in pts])

    def _solve(self, pts, predict) -> tuple[float, float]:
        free = [0] + ([1] if any(p["stage"] == 3 for p in pts) else [])
        if not any(p["stage"] >= 1 for p in pts):
            return (0.0, 0.0)
        lo = np.array([self.bounds[i][0] * 1e3 for i in free])  # searched in ms
        hi = np.array([self.bounds[i][1] * 1e3 for i in free])

        def theta(z) -> tuple[float, float]:
            t = [0.0, 0.0]
            for i, v in zip(free, z):
                t[i] = float(v) * 1e-3
            return (t[0], t[1])

        best = None
        for x0 in ((0.1, 1.0), (1.0, 5.0)):
            start = np.clip(np.array([x0[i] for i in free]), lo, hi)
            sol = least_squares(lambda z: self._resid(theta(z), pts, predict), start, bounds=(lo, hi), diff_step=1e-3)
            if best is None or sol.cost < best.cost:
                best = sol
        assert best is not None  # two starts ran
        return theta(best.x)

    def fit(self, points: Iterable[Mapping], predict: Callable) -> "ZeROHostFit":
        pts = list(points)
        if not pts:
            raise ValueError("ZeROHostFit needs at least one measured ZeRO step")
        self.param_s_, self.module_s_ = self._solve(pts, predict)
        self.held_ = [] if any(p["stage"] == 3 for p in pts) else ["module_overhead_us"]
        self.residuals_ = self._resid((self.param_s_, self.module_s_), pts, predict)
        self.errors_before_ = self._resid((0.0, 0.0), pts, predict)
        self.held_out_: dict[str, dict] = {}
        by = "model" if len({p["model"] for p in pts}) > 1 else "batch"
        groups = sorted({p[by] for p in pts})
        if self.held_out and len(groups) > 1:
            for g in groups:
                rest = [p for p in pts if p[by] != g]
                test = [p for p in pts if p[by] == g]
                th = self._solve(rest, predict)
                self.held_out_[f"{by} {g}"] = {
                    "fitted_on": sorted({f"{p['model']}/{p['batch']}" for p in rest}),
                    "params": self._params_of(th),
                    "rel_errors": {
                        f"zero{p['stage']}/{p['model']}/{p['batch']}": float(e)
                        for p, e in zip(test, self._resid(th, test, predict))
                    },
                }
        return self

    @staticmethod
    def _params_of(theta) -> dict[str, float]:
        return {"param_overhead_us": float(theta[0]) * 1e6, "module_overhead_us": float(theta[1]) * 1e6}

    def params(self) -> dict[str, float]:
        return self._params_of((self.param_s_, self.module_s_))
