"""Fit the per-row roofline of :mod:`simdl.analytic.costs` to measured row times.

The analytic engine predicts each workload-table row as::

    fwd = max(fwd_flops / (P * e_matmul), fwd_bytes / (BW * e_mem)) + fwd_kernels * L
    bwd = max(bwd_flops / (P * e_matmul), BACKWARD_BYTES_FACTOR * fwd_bytes / (BW * e_mem)) + bwd_kernels * L

plus, optionally, ``M`` per matmul/convolution call (one per row with forward FLOPs, one per
backward gradient it computes), with ``P`` and ``BW`` the per-rank peak FLOP/s and memory
bandwidth (the GPU file's datasheet peaks, divided among ranks that share one device).
:class:`RooflineFit` finds ``e_matmul`` (``efficiency.matmul``), ``e_mem``
(``efficiency.memory_bandwidth``), ``L`` (``efficiency.kernel_launch_us``) and ``M``
(``efficiency.matmul_call_overhead_us``) by least squares with bounds (efficiencies in
[0.005, 1], L and M in [0, 1 ms]), calling the engine's own
:func:`~simdl.analytic.costs.row_times` so that a fitted profile reproduces what was fitted.

Why ``M``: on CPU a oneDNN convolution costs ~0.1 ms per call whatever its size (DenseNet's
120 small convolutions take 150 us each forward, 300 us backward, at a few MFLOP); without
it the fit must choose between VGG's large, efficient convolutions and DenseNet's small ones
(held-out DenseNet121 -33 %, see the issue-5 report). On GPUs it stays near 0.

What is fitted: per run (model, batch), the measured times summed per op class and
direction (forward/backward), as residuals ``(pred - meas) / step_time``. Sums per class
rather than single rows, because a row of a few microseconds is dominated by timer and hook
overhead; dividing by the step time makes every run count the same and makes the
residuals the error each class adds to the whole step -- the number a prediction gets
wrong. Per-row R2 is reported as well.

The hooked per-row times are rescaled per run so that they add up to the step timed
without hooks (hooks add a few microseconds per module call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import least_squares

from ..analytic.costs import Rates, row_times
from ..workload.table import WorkloadTable
from .quality import summary

# Row types -> op class, for the per-class sums (and reports). Anything else is "other"
# (the root row with the loss, containers that own concatenations/adds, flatten...).
OP_CLASSES = {
    "conv": ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"),
    "linear": ("Linear", "NonDynamicallyQuantizableLinear", "Bilinear"),
    "attention": ("MultiheadAttention",),
    "norm": ("BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "LayerNorm2d"),
    "activation": ("ReLU", "ReLU6", "GELU", "SiLU", "Hardswish", "Hardsigmoid", "Sigmoid", "Tanh"),
    "pool": ("MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"),
    "dropout": ("Dropout", "Dropout2d", "StochasticDepth"),
}
_CLASS_OF = {t: c for c, ts in OP_CLASSES.items() for t in ts}
CLASSES = tuple(OP_CLASSES) + ("other",)


def op_class(row_type: str) -> str:
    return _CLASS_OF.get(row_type, "other")


_row_times = getattr(row_times, "__wrapped__", row_times)  # the engine's formula, uncached


@dataclass
class Run:
    """One measured (model, batch) step matched to its workload table."""

    label: str
    table: WorkloadTable
    batch: int
    fwd: np.ndarray  # measured seconds per row, rescaled to the unhooked step
    bwd: np.ndarray
    step_fwd: float  # unhooked step, seconds
    step_bwd: float

    @property
    def step(self) -> float:
        return self.step_fwd + self.step_bwd


def make_run(table: WorkloadTable, rec: dict) -> Run:
    """Match a compute-stage record to ``table`` (row names and types must agree)."""
    rows = rec["rows"]
    names, types = tuple(rows["name"]), tuple(rows["type"])
    if names != table.names or types != table.types:
        n = next((i for i, (a, b) in enumerate(zip(names, table.names)) if a != b), min(len(names), len(table.names)))
        raise ValueError(f"{rec['model']}: measured rows do not match the workload table "
                         f"({len(names)} vs {table.n_rows} rows; first difference at row {n})")
    fwd = np.asarray(rows["fwd_s"], dtype=float).clip(min=0.0)
    bwd = np.asarray(rows["bwd_s"], dtype=float).clip(min=0.0)
    sf, sb = float(rec["step_fwd_s"]), float(rec["step_bwd_s"])
    if fwd.sum() > 0:
        fwd = fwd * (sf / fwd.sum())
    if bwd.sum() > 0:
        bwd = bwd * (sb / bwd.sum())
    return Run(f"{rec['model']}/{rec['dataset']}/b{rec['batch']}", table, int(rec["batch"]), fwd, bwd, sf, sb)


class RooflineFit:
    """Estimator: ``fit(runs)`` -> self with ``matmul_efficiency_``,
    ``memory_bandwidth_efficiency_``, ``kernel_launch_s_``, ``residuals_``, ``quality_``.

    ``peak_flops`` and ``memory_bandwidth`` are the per-rank peaks (FLOP/s, bytes/s) the
    engine will multiply the efficiencies with.
    """

    def __init__(self, *, peak_flops: float, memory_bandwidth: float, loss: str = "linear",
                 efficiency_bounds: tuple[float, float] = (0.005, 1.0), max_kernel_launch_s: float = 1e-3,
                 fit_matmul_call_overhead: bool = True, kernel_launch_s: float | None = None):
        self.peak_flops = peak_flops
        self.memory_bandwidth = memory_bandwidth
        self.loss = loss
        self.efficiency_bounds = efficiency_bounds
        self.max_kernel_launch_s = max_kernel_launch_s
        self.fit_matmul_call_overhead = fit_matmul_call_overhead
        self.kernel_launch_s = kernel_launch_s  # fixed (e.g. from the tiny-op microbenchmark) if given

    def _rates(self, theta) -> Rates:
        e_m, e_b, launch, call = theta
        return Rates(flops=self.peak_flops * e_m, memory_bandwidth=self.memory_bandwidth * e_b,
                     kernel_overhead=launch, activation_factor=1.0, matmul_call_overhead=call)

    def predict_rows(self, table: WorkloadTable, batch: int, theta=None) -> tuple[np.ndarray, np.ndarray]:
        theta = self._theta() if theta is None else theta
        rt = _row_times(table, batch, self._rates(theta))
        return rt.fwd, rt.bwd

    def _theta(self):
        return (self.matmul_efficiency_, self.memory_bandwidth_efficiency_, self.kernel_launch_s_,
                self.matmul_call_overhead_s_)

    @staticmethod
    def _class_masks(run: Run) -> list[np.ndarray]:
        classes = np.array([op_class(t) for t in run.table.types])
        return [classes == c for c in CLASSES]

    def _residuals(self, theta, runs: Sequence[Run], masks) -> np.ndarray:
        out = []
        for run, ms in zip(runs, masks):
            pf, pb = self.predict_rows(run.table, run.batch, theta)
            for m in ms:
                if not m.any():
                    continue
                out.append((pf[m].sum() - run.fwd[m].sum()) / run.step)
                out.append((pb[m].sum() - run.bwd[m].sum()) / run.step)
        return np.array(out)

    def fit(self, runs: Iterable[Run]) -> "RooflineFit":
        runs = list(runs)
        if not runs:
            raise ValueError("RooflineFit needs at least one measured run")
        masks = [self._class_masks(r) for r in runs]
        lo_e, hi_e = self.efficiency_bounds
        call_hi = self.max_kernel_launch_s if self.fit_matmul_call_overhead else 1e-15
        lo = np.array([lo_e, lo_e, 0.0, 0.0])
        hi = np.array([hi_e, hi_e, self.max_kernel_launch_s, call_hi])
        if self.kernel_launch_s is not None:
            lo[2], hi[2] = self.kernel_launch_s, self.kernel_launch_s + 1e-12
        scale = np.array([1.0, 1.0, 1e-5, 1e-4])
        best = None
        # The max() makes the problem piecewise smooth: start from a few points, keep the best.
        for x0 in ((0.5, 0.5, 1e-5, 0.0), (0.2, 0.1, 5e-6, 5e-5), (0.8, 0.9, 2e-5, 1e-4), (0.3, 0.9, 1e-6, 1e-5),
                   (0.9, 0.2, 2e-6, 1e-4)):
            x0 = np.clip(np.array(x0), lo, hi)
            sol = least_squares(lambda z: self._residuals(z * scale, runs, masks), x0 / scale,
                                bounds=(lo / scale, hi / scale), loss=self.loss)
            if best is None or sol.cost < best.cost:
                best = sol
        theta = best.x * scale
        (self.matmul_efficiency_, self.memory_bandwidth_efficiency_, self.kernel_launch_s_,
         self.matmul_call_overhead_s_) = (float(v) for v in theta)
        self.residuals_ = self._residuals(theta, runs, masks)
        self.runs_ = [r.label for r in runs]
        self.quality_ = self.evaluate(runs)
        return self

    def evaluate(self, runs: Iterable[Run]) -> dict:
        """Whole-step, per-class and per-row errors of the fitted model on ``runs``."""
        runs = list(runs)
        steps_m, steps_p, rows_m, rows_p = [], [], [], []
        per_run = []
        cls: dict[str, list[float]] = {c: [0.0, 0.0] for c in CLASSES}
        for run in runs:
            pf, pb = self.predict_rows(run.table, run.batch)
            steps_m.append(run.step)
            steps_p.append(float(pf.sum() + pb.sum()))
            rows_m.extend(run.fwd.tolist() + run.bwd.tolist())
            rows_p.extend(pf.tolist() + pb.tolist())
            classes = np.array([op_class(t) for t in run.table.types])
            by_class = {}
            for c in CLASSES:
                m = classes == c
                if not m.any():
                    continue
                meas = float(run.fwd[m].sum() + run.bwd[m].sum())
                pred = float(pf[m].sum() + pb[m].sum())
                cls[c][0] += meas
                cls[c][1] += pred
                by_class[c] = {"measured_ms": round(meas * 1e3, 4), "predicted_ms": round(pred * 1e3, 4),
                               "rel_error": round(pred / meas - 1.0, 4) if meas > 0 else None}
            per_run.append({
                "run": run.label,
                "measured_step_ms": round(run.step * 1e3, 4),
                "predicted_step_ms": round(steps_p[-1] * 1e3, 4),
                "step_rel_error": round(steps_p[-1] / run.step - 1.0, 4),
                "fwd_rel_error": round(float(pf.sum()) / run.step_fwd - 1.0, 4),
                "bwd_rel_error": round(float(pb.sum()) / run.step_bwd - 1.0, 4),
                "by_class": by_class,
            })
        rows_m_a, rows_p_a = np.array(rows_m), np.array(rows_p)
        keep = rows_m_a > 0
        return {
            "steps": summary(steps_m, steps_p),
            "rows": {"n": int(keep.sum()), "r2": summary(rows_m_a[keep], rows_p_a[keep])["r2"]},
            "by_class": {c: {"measured_ms": round(v[0] * 1e3, 4), "predicted_ms": round(v[1] * 1e3, 4),
                             "rel_error": round(v[1] / v[0] - 1.0, 4)} for c, v in cls.items() if v[0] > 0},
            "runs": per_run,
        }

    def params(self) -> dict:
        return {"matmul": self.matmul_efficiency_, "memory_bandwidth": self.memory_bandwidth_efficiency_,
                "kernel_launch_us": self.kernel_launch_s_ * 1e6,
                "matmul_call_overhead_us": self.matmul_call_overhead_s_ * 1e6}


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
