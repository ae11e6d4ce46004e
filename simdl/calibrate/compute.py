"""Fit the per-row roofline of :mod:`simdl.analytic.costs` to measured row times.

The analytic engine predicts each workload-table row as::

    fwd = R(fwd_flops / (P * e_matmul), fwd_bytes / (BW * e_c)) + fwd_kernels * L
    bwd = R(bwd_flops / (P * e_matmul), BACKWARD_BYTES_FACTOR * fwd_bytes / (BW * e_c)) + bwd_kernels * L
    R(a, b) = max(a, b) + (1 - o) * min(a, b)

plus, optionally, ``M`` per matmul/convolution call (one per row with forward FLOPs, one per
backward gradient it computes; held at the tiny-conv microbenchmark's value when given, as
``L`` is), ``batch x weight bytes / (BW * e_w)`` on a convolution's backward
(``efficiency.conv_weight_grad_bandwidth``: a CPU accumulates the weight gradient image by
image, which dominates at small spatial sizes; see ``simdl.calibrate.fit.CONV_WEIGHT_GRAD``)
and a fixed cost per call of the memory-bound classes named in ``call_overhead_classes``,
with ``P`` and ``BW`` the per-rank peak FLOP/s and memory
bandwidth (the GPU file's datasheet peaks, divided among ranks that share one device).
:class:`RooflineFit` finds ``e_matmul`` (``efficiency.matmul``), ``e_c`` = ``e_mem``
(``efficiency.memory_bandwidth``) for matmul-class rows and ``e_<class>``
(``efficiency.memory_bandwidth_<class>``) for each memory-bound class the fit runs have rows
of, ``o`` (``efficiency.compute_memory_overlap``), ``L`` (``efficiency.kernel_launch_us``; held
at ``kernel_launch_s`` when given, as calibration does with its tiny-op microbenchmark) and
``M`` (``efficiency.matmul_call_overhead_us``) by least squares with bounds (efficiencies in
[0.005, 1], class bandwidths in [0.005, 5], o in [0, 1], L and M in [0, 1 ms]), calling the
engine's own :func:`~simdl.analytic.costs.row_times` so that a fitted profile reproduces
what was fitted.

Why a bandwidth per class (the issue asks for efficiency per op class): on this CPU a
BatchNorm streams its bytes at ~0.21 of the datasheet bandwidth (statistics pass, then
normalise), an in-place ReLU at ~0.98 (its tensor is still in cache), pooling at ~0.25
(cpu-local fit, 2 ranks); one
shared efficiency made DenseNet121's 120 ReLUs 4x too slow and its 121 norms 25 % too fast.
Why ``o``: a GPU hides a kernel's memory traffic under its arithmetic (o = 1, the plain
roofline); one CPU core running a small op does not, and the fit finds o = 0 on this host.
Together (with L measured), against one shared efficiency and o = 1: fit median |step err| 5.9 %
against 9.6 % on mnist_cnn, resnet18, vgg16, held-out DenseNet121 max +13 % against +69 %
(cpu-local's calibration, 2 ranks).

Why ``M``: on CPU a oneDNN convolution costs ~0.1 ms per call whatever its size (DenseNet's
120 small convolutions take 150 us each forward, 300 us backward, at a few MFLOP); without
it the fit must choose between VGG's large, efficient convolutions and DenseNet's small ones
(held-out DenseNet121 -33 % without it, cpu-local's calibration). On GPUs it stays near 0.

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

from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import least_squares

from ..analytic.costs import Rates, row_times
from ..workload.op_classes import CLASSES, MEMORY_CLASSES
from ..workload.table import WorkloadTable
from .compute_runs import STEP_ANCHOR, STEP_ANCHORS, Run, anchored_step, make_run  # noqa: F401  (re-exported)
from .micro_fit import MicroFit  # noqa: F401  (re-exported: callers and tests import it from here)
from .quality import summary

_row_times = getattr(row_times, "__wrapped__", row_times)  # the engine's formula, uncached


class RooflineFit:
    """Estimator: ``fit(runs)`` -> self with ``matmul_efficiency_``,
    ``memory_bandwidth_efficiency_``, ``kernel_launch_s_``, ``residuals_``, ``quality_``.

    ``peak_flops`` and ``memory_bandwidth`` are the per-rank peaks (FLOP/s, bytes/s) the
    engine will multiply the efficiencies with.
    """

    def __init__(
        self,
        *,
        peak_flops: float,
        memory_bandwidth: float,
        loss: str = "linear",
        efficiency_bounds: tuple[float, float] = (0.005, 1.0),
        max_kernel_launch_s: float = 1e-3,
        fit_matmul_call_overhead: bool = True,
        kernel_launch_s: float | None = None,
        per_class_bandwidth: bool = True,
        fit_overlap: bool = True,
        class_bandwidth_bounds: tuple[float, float] = (0.005, 5.0),
        conv_weight_grad: bool = False,
        call_overhead_classes: tuple[str, ...] = (),
        min_conv_weight_fraction: float = 0.005,
        matmul_call_s: float | None = None,
    ):
        self.peak_flops = peak_flops
        self.memory_bandwidth = memory_bandwidth
        self.loss = loss
        self.efficiency_bounds = efficiency_bounds
        self.max_kernel_launch_s = max_kernel_launch_s
        self.fit_matmul_call_overhead = fit_matmul_call_overhead
        self.kernel_launch_s = kernel_launch_s  # fixed (e.g. from the tiny-op microbenchmark) if given
        self.per_class_bandwidth = per_class_bandwidth
        self.fit_overlap = fit_overlap
        self.class_bandwidth_bounds = class_bandwidth_bounds
        self.conv_weight_grad = conv_weight_grad
        self.call_overhead_classes = tuple(call_overhead_classes)
        self.min_conv_weight_fraction = min_conv_weight_fraction
        self.matmul_call_s = matmul_call_s  # fixed (e.g. from the tiny-conv microbenchmark) if given
        self.classes_: tuple[str, ...] = ()  # memory-bound classes with their own bandwidth (set by fit)
        self.call_classes_: tuple[str, ...] = ()  # memory-bound classes with their own call overhead (set by fit)
        self.conv_weights_ = False  # whether the conv weight-gradient term is fitted (set by fit)

    # theta = (e_matmul, e_mem, launch s, call s, overlap, e_<class> for class in classes_,
    #          [conv weight-gradient cost if conv_weights_], s per call for call_classes_)
    # The conv weight-gradient term is fitted as its inverse (memory bandwidth / its rate, >= 0)
    # so that 0 turns it off: as a rate it could only be made small, not absent.
    def _rates(self, theta) -> Rates:
        e_m, e_b, launch, call, overlap = theta[:5]
        k = 5 + len(self.classes_)
        per_class = tuple((c, self.memory_bandwidth * e) for c, e in zip(self.classes_, theta[5:k]))
        conv: dict[str, float] = {}
        if self.conv_weights_:
            conv = {"conv_weight_grad_bandwidth": self.memory_bandwidth / theta[k] if theta[k] > 0 else 0.0}
            k += 1
        calls = tuple(zip(self.call_classes_, theta[k:]))
        return Rates(
            flops=self.peak_flops * e_m,
            memory_bandwidth=self.memory_bandwidth * e_b,
            kernel_overhead=launch,
            activation_factor=1.0,
            matmul_call_overhead=call,
            class_memory_bandwidth=per_class,
            compute_memory_overlap=overlap,
            class_call_overhead=calls,
            **conv,
        )

    def predict_rows(self, table: WorkloadTable, batch: int, theta=None) -> tuple[np.ndarray, np.ndarray]:
        theta = self._theta() if theta is None else theta
        rt = _row_times(table, batch, self._rates(theta))
        return rt.fwd, rt.bwd

    def _theta(self):
        return (
            self.matmul_efficiency_,
            self.memory_bandwidth_efficiency_,
            self.kernel_launch_s_,
            self.matmul_call_overhead_s_,
            self.compute_memory_overlap_,
            *(self.class_bandwidth_efficiency_[c] for c in self.classes_),
            *(
                (1.0 / self.conv_weight_grad_efficiency_ if self.conv_weight_grad_efficiency_ else 0.0,)
                if self.conv_weights_
                else ()
            ),
            *(self.class_call_overhead_s_[c] for c in self.call_classes_),
        )

    @staticmethod
    def _class_masks(run: Run) -> list[np.ndarray]:
        return [run.table.op_classes == c for c in CLASSES]

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
        # A class gets its own bandwidth only if the fit runs have rows of it with bytes to time.
        self.classes_ = tuple(
            c
            for c in MEMORY_CLASSES
            if self.per_class_bandwidth and any(r.fwd[r.table.op_classes == c].sum() > 0 for r in runs)
        )
        k = len(self.classes_)
        self.conv_weights_ = self.conv_weight_grad and any((r.table.op_classes == "conv").any() for r in runs)
        self.call_classes_ = tuple(
            c
            for c in self.call_overhead_classes
            if c in MEMORY_CLASSES and any((r.table.op_classes == c).any() for r in runs)
        )
        n_w, n_c = int(self.conv_weights_), len(self.call_classes_)
        lo_e, hi_e = self.efficiency_bounds
        lo_c, hi_c = self.class_bandwidth_bounds
        call_hi = self.max_kernel_launch_s if self.fit_matmul_call_overhead else 1e-15
        lo = np.array([lo_e, lo_e, 0.0, 0.0, 0.0] + [lo_c] * k + [0.0] * n_w + [0.0] * n_c)
        hi = np.array(
            [hi_e, hi_e, self.max_kernel_launch_s, call_hi, 1.0 if self.fit_overlap else 1.0 + 1e-12]
            + [hi_c] * k
            + [1.0 / self.min_conv_weight_fraction] * n_w
            + [self.max_kernel_launch_s] * n_c
        )
        if not self.fit_overlap:
            lo[4] = 1.0
        if self.kernel_launch_s is not None:
            lo[2], hi[2] = self.kernel_launch_s, self.kernel_launch_s + 1e-12
        if self.matmul_call_s is not None:
            lo[3], hi[3] = self.matmul_call_s, self.matmul_call_s + 1e-12
        scale = np.array([1.0, 1.0, 1e-5, 1e-4, 1.0] + [1.0] * k + [1.0] * n_w + [1e-4] * n_c)
        best = None
        # The max() makes the problem piecewise smooth: start from a few points (with the
        # overlap at both ends), keep the best.
        for x0 in (
            (0.5, 0.5, 1e-5, 0.0),
            (0.2, 0.1, 5e-6, 5e-5),
            (0.8, 0.9, 2e-5, 1e-4),
            (0.3, 0.9, 1e-6, 1e-5),
            (0.9, 0.2, 2e-6, 1e-4),
        ):
            for overlap in (1.0, 0.0) if self.fit_overlap else (1.0,):
                x = np.clip(np.array([*x0, overlap] + [x0[1]] * k + [1.0] * n_w + [x0[3]] * n_c), lo, hi)
                sol = least_squares(
                    lambda z: self._residuals(z * scale, runs, masks),
                    x / scale,
                    bounds=(lo / scale, hi / scale),
                    loss=self.loss,
                )
                if best is None or sol.cost < best.cost:
                    best = sol
        assert best is not None  # at least one start was solved
        theta = best.x * scale
        if not self.fit_overlap:
            theta[4] = 1.0  # held at the plain roofline (the bounds leave it 1 + 1e-12 of room)
        (
            self.matmul_efficiency_,
            self.memory_bandwidth_efficiency_,
            self.kernel_launch_s_,
            self.matmul_call_overhead_s_,
            self.compute_memory_overlap_,
        ) = (float(v) for v in theta[:5])
        self.class_bandwidth_efficiency_ = {c: float(v) for c, v in zip(self.classes_, theta[5 : 5 + k])}
        w = theta[5 + k : 5 + k + n_w]
        # None when fitted absent (cost 0): the profile then has no such key.
        self.conv_weight_grad_efficiency_ = 1.0 / float(w[0]) if self.conv_weights_ and w[0] > 1e-9 else None
        self.class_call_overhead_s_ = {c: float(v) for c, v in zip(self.call_classes_, theta[5 + k + n_w :])}
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
            classes = run.table.op_classes
            by_class = {}
            for c in CLASSES:
                m = classes == c
                if not m.any():
                    continue
                meas = float(run.fwd[m].sum() + run.bwd[m].sum())
                pred = float(pf[m].sum() + pb[m].sum())
                cls[c][0] += meas
                cls[c][1] += pred
                by_class[c] = {
                    "measured_ms": round(meas * 1e3, 4),
                    "predicted_ms": round(pred * 1e3, 4),
                    "rel_error": round(pred / meas - 1.0, 4) if meas > 0 else None,
                }
            per_run.append(
                {
                    "run": run.label,
                    "measured_step_ms": round(run.step * 1e3, 4),
                    "predicted_step_ms": round(steps_p[-1] * 1e3, 4),
                    "step_rel_error": round(steps_p[-1] / run.step - 1.0, 4),
                    "fwd_rel_error": round(float(pf.sum()) / run.step_fwd - 1.0, 4),
                    "bwd_rel_error": round(float(pb.sum()) / run.step_bwd - 1.0, 4),
                    "by_class": by_class,
                }
            )
        rows_m_a, rows_p_a = np.array(rows_m), np.array(rows_p)
        keep = rows_m_a > 0
        # Per configuration (model, dataset, batch): the mean over the ranks that measured it
        # at once -- the figure a compute profile keeps (fit.measured_rows), where one rank's
        # time alone also carries how the OS shared the cores among them.
        by_config: dict[str, list[float]] = {}
        for run, meas, pred in zip(runs, steps_m, steps_p):
            by_config.setdefault(run.label, [0.0, pred, 0])
            by_config[run.label][0] += meas
            by_config[run.label][2] += 1
        configs = [
            {
                "config": k,
                "ranks_or_repeats": n,
                "measured_step_ms": round(m / n * 1e3, 4),
                "predicted_step_ms": round(p * 1e3, 4),
                "step_rel_error": round(p / (m / n) - 1.0, 4),
            }
            for k, (m, p, n) in by_config.items()
        ]
        return {
            "steps": summary(steps_m, steps_p),
            "configs": configs,
            "rows": {"n": int(keep.sum()), "r2": summary(rows_m_a[keep], rows_p_a[keep])["r2"]},
            "by_class": {
                c: {
                    "measured_ms": round(v[0] * 1e3, 4),
                    "predicted_ms": round(v[1] * 1e3, 4),
                    "rel_error": round(v[1] / v[0] - 1.0, 4),
                }
                for c, v in cls.items()
                if v[0] > 0
            },
            "runs": per_run,
        }

    def params(self) -> dict:
        return {
            "matmul": self.matmul_efficiency_,
            "memory_bandwidth": self.memory_bandwidth_efficiency_,
            "kernel_launch_us": self.kernel_launch_s_ * 1e6,
            "matmul_call_overhead_us": self.matmul_call_overhead_s_ * 1e6,
            "compute_memory_overlap": self.compute_memory_overlap_,
            **{f"memory_bandwidth_{c}": v for c, v in self.class_bandwidth_efficiency_.items()},
            **(
                {"conv_weight_grad_bandwidth": self.conv_weight_grad_efficiency_}
                if self.conv_weight_grad_efficiency_
                else {}
            ),
            **{f"call_overhead_{c}_us": v * 1e6 for c, v in self.class_call_overhead_s_.items()},
        }
