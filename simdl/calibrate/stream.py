"""Fit the cost of large streaming ops and of fresh host buffers.

Streaming ops move whole parameter-sized tensors: the optimizer step (PyTorch's CPU
optimizers loop over the tensors one at a time: torch/optim/optimizer.py,
_default_to_fused_or_foreach), FSDP's copy-in/copy-out and DDP's bucket copies. The
engines price them as ``bytes / B + calls * c`` (simdl.analytic.costs.memory_bound_time);
:class:`StreamFit` finds ``B`` and ``c`` from the compute stage's optimizer-step and copy
microbenchmarks, and checks them on the sizes it left out.

A buffer above the C allocator's mmap threshold is mapped at each allocation and its
pages fault in on first touch; :func:`page_fault_cost` is the time a fresh buffer's fill
takes beyond the same fill of a reused buffer, per byte.
"""

from __future__ import annotations

import statistics
from typing import Iterable

import numpy as np
from scipy.optimize import least_squares

from .quality import summary


class StreamFit:
    """Estimator: ``fit(points)`` -> self with ``bandwidth_B_per_s_``, ``call_s_``,
    ``residuals_`` (relative) and ``quality_``. Points: dicts with ``bytes``, ``calls``,
    ``time_s``."""

    def __init__(self, *, loss: str = "linear"):
        self.loss = loss

    @staticmethod
    def _model(z, nbytes, calls):
        return nbytes / (z[0] * 1e9) + calls * z[1] * 1e-6

    def fit(self, points: Iterable[dict]) -> "StreamFit":
        pts = list(points)
        if len(pts) < 2:
            raise ValueError("StreamFit needs at least two measurements")
        b = np.array([p["bytes"] for p in pts], float)
        c = np.array([p["calls"] for p in pts], float)
        t = np.array([p["time_s"] for p in pts], float)
        sol = least_squares(
            lambda z: (self._model(z, b, c) - t) / t,
            np.array([10.0, 5.0]),
            bounds=([1e-3, 0.0], [1e4, 1e4]),
            loss=self.loss,
        )
        self.bandwidth_B_per_s_ = float(sol.x[0] * 1e9)
        self.call_s_ = float(sol.x[1] * 1e-6)
        self.residuals_ = (self._model(sol.x, b, c) - t) / t
        self.quality_ = summary(t, self._model(sol.x, b, c))
        return self

    def predict(self, nbytes, calls):
        return np.asarray(nbytes, float) / self.bandwidth_B_per_s_ + np.asarray(calls, float) * self.call_s_


def fit_stream(points: list[dict], kind: str = "sgd_momentum") -> dict | None:
    """Fit the ``kind`` points (``sgd_momentum``: in-place updates; ``copy``: buffer to
    buffer) on every other point, check on the rest, then refit on all."""
    pts = sorted((p for p in points if p["name"].split("/")[1] == kind), key=lambda p: (p["bytes"], p["calls"]))
    if len(pts) < 2:
        return None
    held_out = None
    if len(pts) >= 4:  # enough to leave half out
        fit_pts, held = pts[0::2], pts[1::2]
        part = StreamFit().fit(fit_pts)
        pred = part.predict([p["bytes"] for p in held], [p["calls"] for p in held])
        errs = [float(pp / p["time_s"] - 1.0) for pp, p in zip(pred, held)]
        held_out = {
            "points": [p["name"] for p in held],
            "rel_errors": [round(e, 4) for e in errs],
            "max_abs_rel_error": round(max(abs(e) for e in errs), 4),
            "fitted_on": [p["name"] for p in fit_pts],
        }
    est = StreamFit().fit(pts)
    return {
        "estimator": est,
        "bandwidth_GB_per_s": est.bandwidth_B_per_s_ / 1e9,
        "call_us": est.call_s_ * 1e6,
        "quality": est.quality_,
        "n": len(pts),
        "held_out": held_out,
    }


def page_fault_cost(fresh: list[dict], reuse: list[dict]) -> dict | None:
    """Median over sizes of (fresh fill - reused fill) / bytes, in s per byte."""
    by_size = {p["bytes"]: p["time_s"] for p in reuse}
    per = [(p["bytes"], (p["time_s"] - by_size[p["bytes"]]) / p["bytes"]) for p in fresh if p["bytes"] in by_size]
    if not per:
        return None
    return {
        "s_per_byte": max(statistics.median(v for _, v in per), 0.0),
        "per_size": {str(int(b)): round(v * 1e9, 4) for b, v in per},
        "sizes_bytes": [int(b) for b, _ in per],
    }
