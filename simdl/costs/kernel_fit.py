"""Fit the GPU kernel model (:mod:`simdl.costs.gpu_kernels`) to measured kernel latencies.

Estimator contract (scikit-learn style): ``KernelFit(kind).fit(shapes, seconds, hw)``
returns self with ``params_`` (a :class:`GemmParams` or :class:`StreamParams`) and
``residuals_`` (log of predicted over measured). The loss is least squares on the log ratio,
so a 10 us call and a 10 ms call weigh the same (the error a user sees is relative).
"""

from __future__ import annotations

import numpy as np

from .gpu_kernels import GemmParams, Hardware, StreamParams, conv_time, gemm_time, stream_time

# Starting points and bounds of the fitted values (log-space search).
# tile_setup_s is held at or below 2 us: the measured calls identify it only weakly (an upper
# bound of 2 us costs 1-4 points of in-sample MAPE against a free fit, whose 5-20 us per wave
# would put that much on every small kernel of a real model, where no launch gap hides it).
_GEMM_START = dict(
    compute_efficiency=0.7,
    memory_efficiency=0.7,
    operand_bandwidth=3.0,
    tile_setup_s=1e-6,
    floor_s=2e-5,
    floor_power=2.0,
)
_GEMM_BOUNDS = dict(
    compute_efficiency=(0.05, 3.0),
    memory_efficiency=(0.05, 1.5),
    operand_bandwidth=(0.1, 100.0),
    tile_setup_s=(1e-9, 2e-6),
    floor_s=(1e-7, 1e-3),
    floor_power=(1.0, 50.0),
)
_STREAM_START = dict(memory_efficiency=0.7, fill_latency_s=2e-6, floor_s=2e-5, floor_power=2.0)
_STREAM_BOUNDS = dict(
    memory_efficiency=(0.05, 3.0), fill_latency_s=(1e-10, 1e-2), floor_s=(1e-7, 1e-3), floor_power=(1.0, 50.0)
)


class KernelFit:
    """Fit one op class's parameters on one GPU. ``kind``: 'gemm' (shapes B, M, N, K, bytes),
    'conv' (the same and ``images``, priced by :func:`conv_time`; B = 1) or 'stream' (shapes: bytes). ``batched_tiles``: the tiles (as :data:`TILES`) that this
    GPU's batched GEMMs (B > 1: cuBLAS's strided-batched sgemm, which torch.bmm calls) choose
    among; a single product (B = 1) chooses among all of :data:`TILES`. None: all, for both."""

    def __init__(self, kind: str, batched_tiles: tuple | None = None):
        if kind not in ("gemm", "conv", "stream"):
            raise ValueError(f"kind {kind!r}: accepted 'gemm', 'conv', 'stream'")
        self.kind = kind
        self.batched_tiles = batched_tiles

    def _spec(self):
        if self.kind in ("gemm", "conv"):
            return GemmParams, _GEMM_START, _GEMM_BOUNDS
        return StreamParams, _STREAM_START, _STREAM_BOUNDS

    def predict_with(self, params, shapes: dict, hw: Hardware) -> np.ndarray:
        if self.kind == "conv":
            s = shapes
            return conv_time(hw, params, s["M"], s["N"], s["K"], s["bytes"], images=s.get("images", 1.0))
        if self.kind == "gemm":
            s = shapes
            t = gemm_time(hw, params, s["B"], s["M"], s["N"], s["K"], s["bytes"])
            if self.batched_tiles is not None:
                tb = gemm_time(hw, params, s["B"], s["M"], s["N"], s["K"], s["bytes"], tiles=self.batched_tiles)
                t = np.where(np.asarray(s["B"]) > 1, tb, t)
            return t
        return stream_time(hw, params, shapes["bytes"])

    def fit(self, shapes: dict, seconds: np.ndarray, hw: Hardware) -> "KernelFit":
        from scipy.optimize import least_squares

        cls, start, bounds = self._spec()
        names = list(start)
        x0 = np.log([start[n] for n in names])
        lo = np.log([bounds[n][0] for n in names])
        hi = np.log([bounds[n][1] for n in names])
        logt = np.log(np.asarray(seconds, dtype=float))

        def resid(x):
            p = cls(**dict(zip(names, np.exp(x))))
            return np.log(self.predict_with(p, shapes, hw)) - logt

        # soft_l1: a few odd rows (a cuDNN algorithm switch) do not pull the whole curve.
        sol = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, x_scale=1.0)
        self.params_ = cls(**dict(zip(names, np.exp(sol.x))))
        self.residuals_ = resid(sol.x)
        return self

    def predict(self, shapes: dict, hw: Hardware) -> np.ndarray:
        return self.predict_with(self.params_, shapes, hw)


def mean_params(fits: list) -> object:
    """Geometric mean of several GPUs' fitted values (fractions of each GPU's own peaks):
    the rule that prices a GPU with no measured rows from the datasheet ratios."""
    first = fits[0]
    names = list(first.__dataclass_fields__)
    vals = {n: float(np.exp(np.mean([np.log(getattr(f, n)) for f in fits]))) for n in names}
    return type(first)(**vals)
