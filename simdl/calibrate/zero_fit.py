"""Fit DeepSpeed ZeRO's host time per parameter, per submodule call and per parameter of stage 1's
extra pass to measured ZeRO steps.

The ZeRO plans (simdl.strategies.zero_plan) price DeepSpeed's Python around each parameter
(``strategies.zero.param_overhead_us``, stages 1-3), around each module call
(``strategies.zero.module_overhead_us``, stage 3) and stage 1's extra pass over the parameters
(``strategies.zero.stage1_loop_overhead_us``, stage 1 without overlap_comm) as host time.
:class:`ZeROHostFit` finds the first two by bounded least squares on the relative errors of the
measured stage-2 and stage-3 steps, each predicted by the engine with candidate values (the
``predict`` callable), everything else of the profile fixed (the interference and
collective-load fit of simdl.calibrate.overlap comes first). A stage-2 step pins the
per-parameter cost; a stage-3 step adds the per-call cost. Without a stage-3 step the per-call
cost is held at 0.

Stage 1's extra pass is what a stage-1 step takes beyond the stage-2 step of the same model and
batch. DeepSpeed 0.19.8 (runtime/zero/stage_1_and_2.py) does each parameter's reduction work in
both stages: stage 2 in the gradient hook that create_gradient_handling_hooks registers on every
parameter with requires_grad (process_gradients -> reduce_ready_partitions_and_remove_grads),
stage 1 in reduce_gradients after backward, which loops over every parameter of bit16_groups and
calls reduce_ready_partitions_and_remove_grads for each that has a gradient. Stage 1 registers
the same hooks (contiguous_gradients, DeepSpeed's default, is enough) and they fire, reducing
nothing. With one micro-batch per step every trainable parameter makes one hook call and one
loop iteration, so the cost is per parameter, which is what the plan charges (zero_plan: the
parameter count of the table per stage-1 step). Per pair of steps the fit takes the measured
difference less the engine's difference with the pass at 0 (what stage 1's post-backward
reductions cost the plan already) and divides by the pass's count as the engine charges it (its
prediction's slope in the cost); over the pairs, least squares through 0. Noise can make the
difference negative; the cost is then 0 and ``loop_clamped_`` says so. Without a pair the cost
is held at 0.

``held_out_`` predicts each model's steps (each batch size's, where one model was measured) from
a fit of all three costs to the others.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np
from scipy.optimize import least_squares

# Search bounds, seconds: up to 20 ms per parameter and 50 ms per module call (the FSDP
# per-unit bound of simdl.calibrate.overlap).
BOUNDS = ((0.0, 0.02), (0.0, 0.05))
# Candidate of stage 1's pass, seconds per parameter, at which the engine's slope is read.
LOOP_PROBE_S = 1e-4
NAMES = ("param_overhead_us", "module_overhead_us", "stage1_loop_overhead_us")


class ZeROHostFit:
    """Estimator: ``fit(points, predict)`` -> self with ``param_s_``, ``module_s_``, ``loop_s_``,
    ``loop_raw_s_`` (before clamping at 0), ``loop_clamped_``, ``loop_pairs_`` (one row per
    stage-1/stage-2 pair), ``residuals_`` (relative), ``errors_before_`` (all at 0),
    ``held_out_`` and ``held_`` (the costs no point depends on, held at 0).

    ``points``: rows with ``measured_s``, ``model``, ``batch`` and ``stage``;
    ``predict((param_s, module_s, loop_s), point)`` -> seconds."""

    def __init__(self, *, bounds=BOUNDS, held_out: bool = True, host_stages=(2, 3), fit_loop: bool = True):
        self.bounds = bounds
        self.held_out = held_out
        # The stages whose steps pin the per-parameter and per-call costs, and whether stage 1's
        # pass is fitted (False: predict keeps its own, e.g. a profile's measured value).
        self.host_stages = tuple(host_stages)
        self.fit_loop = fit_loop

    @staticmethod
    def _resid(theta, pts, predict) -> np.ndarray:
        return np.array([(predict(tuple(theta), p) - p["measured_s"]) / p["measured_s"] for p in pts])

    def _solve_host(self, pts, predict) -> tuple[float, float]:
        """Per-parameter and per-call cost from the stage-2/3 steps (stage 1's where none)."""
        pts = [p for p in pts if p["stage"] in self.host_stages] or [p for p in pts if p["stage"] >= 1]
        if not pts:
            return (0.0, 0.0)
        free = [0] + ([1] if any(p["stage"] == 3 for p in pts) else [])
        lo = np.array([self.bounds[i][0] * 1e3 for i in free])  # searched in ms
        hi = np.array([self.bounds[i][1] * 1e3 for i in free])

        def theta(z) -> tuple[float, float, float]:
            t = [0.0, 0.0, 0.0]
            for i, v in zip(free, z):
                t[i] = float(v) * 1e-3
            return (t[0], t[1], 0.0)

        best = None
        for x0 in ((0.1, 1.0), (1.0, 5.0)):
            start = np.clip(np.array([x0[i] for i in free]), lo, hi)
            sol = least_squares(lambda z: self._resid(theta(z), pts, predict), start, bounds=(lo, hi), diff_step=1e-3)
            if best is None or sol.cost < best.cost:
                best = sol
        assert best is not None  # two starts ran
        t = theta(best.x)
        return (t[0], t[1])

    @staticmethod
    def _loop_pairs(pts, predict, host: tuple[float, float]) -> list[dict]:
        """Stage 1 - stage 2 of each model and batch measured under both, measured and as the
        engine predicts it with the pass at 0, and the pass's count (the engine's slope)."""
        ps, ms = host
        by = {(p["model"], p["batch"], p["stage"]): p for p in pts}
        rows = []
        for model, batch in sorted({(p["model"], p["batch"]) for p in pts if p["stage"] == 1}):
            one, two = by.get((model, batch, 1)), by.get((model, batch, 2))
            if two is None:
                continue
            assert one is not None  # the pair's key came from a stage-1 point
            at0 = predict((ps, ms, 0.0), one)
            count = (predict((ps, ms, LOOP_PROBE_S), one) - at0) / LOOP_PROBE_S
            measured = one["measured_s"] - two["measured_s"]
            predicted = at0 - predict((ps, ms, 0.0), two)
            rows.append(
                {
                    "model": model,
                    "batch": batch,
                    "params": round(count, 3),
                    "measured_diff_s": measured,
                    "predicted_diff_at_0_s": predicted,
                    "per_param_us": (measured - predicted) / count * 1e6 if count > 0 else None,
                }
            )
        return rows

    def _solve(self, pts, predict) -> tuple[tuple[float, float, float], float, list[dict]]:
        """(param_s, module_s, loop_s), the pass's cost before clamping, and its pairs."""
        ps, ms = self._solve_host(pts, predict)
        if not self.fit_loop:
            return (ps, ms, 0.0), 0.0, []
        rows = [r for r in self._loop_pairs(pts, predict, (ps, ms)) if r["params"] > 0]
        n = np.array([r["params"] for r in rows])
        d = np.array([r["measured_diff_s"] - r["predicted_diff_at_0_s"] for r in rows])
        raw = float(n @ d / (n @ n)) if rows else 0.0  # least squares through 0
        return (ps, ms, max(raw, 0.0)), raw, rows

    def fit(self, points: Iterable[Mapping], predict: Callable) -> "ZeROHostFit":
        pts = list(points)
        if not pts:
            raise ValueError("ZeROHostFit needs at least one measured ZeRO step")
        theta, self.loop_raw_s_, self.loop_pairs_ = self._solve(pts, predict)
        self.param_s_, self.module_s_, self.loop_s_ = theta
        self.loop_clamped_ = self.loop_raw_s_ < 0
        self.held_ = [] if any(p["stage"] == 3 for p in pts) else ["module_overhead_us"]
        if not self.loop_pairs_:
            self.held_.append("stage1_loop_overhead_us")
        self.residuals_ = self._resid(theta, pts, predict)
        self.errors_before_ = self._resid((0.0, 0.0, 0.0), pts, predict)
        self.held_out_: dict[str, dict] = {}
        by = "model" if len({p["model"] for p in pts}) > 1 else "batch"
        groups = sorted({p[by] for p in pts})
        if self.held_out and len(groups) > 1:
            for g in groups:
                rest = [p for p in pts if p[by] != g]
                test = [p for p in pts if p[by] == g]
                th, raw, pairs = self._solve(rest, predict)
                self.held_out_[f"{by} {g}"] = {
                    "fitted_on": sorted({f"{p['model']}/{p['batch']}" for p in rest}),
                    "params": self._params_of(th),
                    "loop_pairs": len(pairs),
                    "loop_clamped": raw < 0,
                    "rel_errors": {
                        f"zero{p['stage']}/{p['model']}/{p['batch']}": float(e)
                        for p, e in zip(test, self._resid(th, test, predict))
                    },
                }
        return self

    @staticmethod
    def _params_of(theta) -> dict[str, float]:
        return {k: float(v) * 1e6 for k, v in zip(NAMES, theta)}

    def params(self) -> dict[str, float]:
        return self._params_of((self.param_s_, self.module_s_, self.loop_s_))

    def loop_note(self) -> str:
        """One line on stage 1's pass: fitted, clamped at 0, or held (no pair measured)."""
        if not self.loop_pairs_:
            return "stage 1's extra pass: no stage-1 and stage-2 step of one model and batch, held at 0"
        pairs = ", ".join(f"{r['model']}/{r['batch']}" for r in self.loop_pairs_)
        if self.loop_clamped_:
            return (
                f"stage 1's extra pass: stage 1 - stage 2 ({pairs}) came out at {self.loop_raw_s_ * 1e6:+.1f} us per "
                "parameter, below 0 (noise: stage 1 makes one pass more than stage 2, never fewer), clamped to 0"
            )
        return f"stage 1's extra pass: {self.loop_s_ * 1e6:.1f} us per parameter from stage 1 - stage 2 ({pairs})"
