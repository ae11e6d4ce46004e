"""Fit the parameter-server link and update rate from the ps stage.

Round trip of a push of ``m`` bytes and a pull of ``m`` bytes: ``t = 2 (latency + m / B)``,
the engine's one-way transfer (:func:`simdl.analytic.engine.ps_transfer_times`) twice with
a single worker. Fitted as a send/recv alpha-beta model on ``t / 2``
(:class:`~simdl.calibrate.collectives.CollectiveFit` with no per-call overhead).

Over the parameter server's own transport (``torch.distributed.rpc``, the stage's
``rpc_alone`` and ``rpc_together`` records) a message of ``m`` bytes lands in a freshly
allocated buffer, and above the allocator's mmap threshold (glibc: 32 MiB, the largest
its dynamic threshold reaches) that buffer's pages fault in as the message fills them:
``fresh = m`` above the threshold, 0 below. A pull's answer is, besides, copied by the
server before it is sent (into a fresh buffer too). The engine's one-way transfer with
``c`` workers at once (:func:`simdl.analytic.engine.ps_transfer_times`) is

    push = latency + max(c m / B_server, m / B_worker) + fresh phi
    pull = push + m kappa + fresh phi

(each process faults and copies its own buffers, in parallel with the others), so:

* ``rpc_alone`` (one worker at a time): every push and every pull, the median over repeats
  and workers, is a sample with ``c = 1`` -> ``latency_s_``, ``worker_bandwidth_B_per_s_``,
  ``receive_fault_s_per_byte_`` (phi), ``response_copy_s_per_byte_`` (kappa), least
  squares on relative residuals, all four >= 0;
* ``rpc_together`` (all ``c`` workers at once): per repeat, the slowest worker's push (and
  pull) is when the incast ends: with phi and kappa from the alone fit, ``c m / B_server``
  plus a latency -> ``bandwidth_B_per_s_`` (the server side's, stored as its NIC's).

On an Intel Xeon (3 workers) a single line through 1-256 MiB instead fitted
one worker's times with R2 0.73 and a 50 % worst error: 4 to 16 MiB moved at 3.1 GB/s,
16 to 64 MiB at 1.4 GB/s, and a pull of 256 MiB took 211 ms against 114 ms for the push.

Without RPC records (runs of older calibration scripts) the process-group ping-pong gives both
bandwidths. The ping-pong's own fit (``pingpong_``) always gives the one-way latency
between two processes of a host.

Server update: ``t = o + streamed_bytes / U`` for momentum SGD on a flat tensor, ``U`` the
``ps_servers.update_bandwidth_GB_per_s`` the engine divides the optimizer's passes by.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np
from scipy.optimize import least_squares

from ..analytic.costs import GLIBC_MMAP_THRESHOLD_MAX
from .collectives import CollectiveFit
from .micro_fit import MicroFit
from .quality import summary


def _one_way(samples: list[tuple[float, float]]) -> list[dict]:
    return [{"collective": "send_recv", "bytes": b, "group_size": 2, "time_s": t} for b, t in samples if t]


def _nonneg_linear(X: np.ndarray, t: np.ndarray, loss: str) -> np.ndarray:
    """theta >= 0 of ``t = X @ theta``, least squares on relative residuals (the sizes span
    two and a half decades; the small ones pin the latency)."""
    scale = np.array(
        [
            max(float(np.median(t[X[:, j] > 0] / X[X[:, j] > 0, j])) if (X[:, j] > 0).any() else 1.0, 1e-18)
            for j in range(X.shape[1])
        ]
    )
    x0 = np.full(X.shape[1], 1.0 / X.shape[1])
    sol = least_squares(
        lambda z: (X @ (z * scale) - t) / t, x0, bounds=(0.0, np.inf), loss=loss, f_scale=0.1, x_scale="jac"
    )
    return sol.x * scale


class PSFit:
    """Estimator: ``fit(roundtrips, updates, rpc_alone, rpc_together)`` -> self with
    ``latency_s_``, ``bandwidth_B_per_s_`` (server side), ``worker_bandwidth_B_per_s_``
    (None without RPC records: the engine's worker side is then the node's link),
    ``receive_fault_s_per_byte_`` (phi), ``response_copy_s_per_byte_`` (kappa; both None
    without RPC records),
    ``update_bandwidth_B_per_s_``, ``pingpong_`` (latency, bandwidth of the ping-pong),
    ``transport_`` ("rpc" or "process group"), ``quality_``; ``server_side_measured_``: whether
    the RPC records had more than one worker at once (else the server side is the worker's
    link, not a fit)."""

    def __init__(self, *, loss: str = "soft_l1", mmap_threshold: float = GLIBC_MMAP_THRESHOLD_MAX):
        self.loss = loss
        self.mmap_threshold = mmap_threshold

    def fit(
        self,
        roundtrips: Iterable[Mapping],
        updates: Iterable[Mapping] = (),
        rpc_alone: Iterable[Mapping] = (),
        rpc_together: Iterable[Mapping] = (),
    ) -> "PSFit":
        ping = self._fit_pingpong(roundtrips)
        alone = _rpc_samples(rpc_alone, alone=True)
        together = _rpc_samples(rpc_together, alone=False)
        if len({x[0] for x in alone}) >= 3 and len({x[0] for x in together}) >= 2:
            self._fit_rpc(alone, together, ping.quality_)
        self._fit_update(updates)
        return self

    def _fit_pingpong(self, roundtrips: Iterable[Mapping]) -> CollectiveFit:
        """The process-group ping-pong's one-way line: ``pingpong_``, and every fitted value
        the RPC records, where there are any, then replace."""
        rt = _one_way([(r["bytes"], r["time_s"] / 2.0) for r in roundtrips if r.get("time_s")])
        ping = CollectiveFit(fit_overhead=False, loss=self.loss).fit(rt)
        self.pingpong_: dict[str, Any] = {
            "latency_s": ping.alpha_s_,
            "bandwidth_B_per_s": ping.bus_bandwidth_B_per_s_,
            "quality": ping.quality_,
            "bytes_range": ping.bytes_range_,
        }
        self.latency_s_ = ping.alpha_s_
        self.bandwidth_B_per_s_ = ping.bus_bandwidth_B_per_s_
        self.worker_bandwidth_B_per_s_: float | None = None
        self.receive_fault_s_per_byte_: float | None = None
        self.response_copy_s_per_byte_: float | None = None
        self.residuals_ = ping.residuals_
        self.quality_ = {"roundtrip": ping.quality_}
        self.bytes_range_ = ping.bytes_range_
        self.transport_ = "process group"
        self.server_side_measured_ = False
        return ping

    def _fit_rpc(self, alone: list[tuple], together: list[tuple], roundtrip_quality: dict) -> None:
        """The worker side (latency, bandwidth, phi, kappa) from one worker at a time, then the
        server side from all workers at once (see the module's docstring)."""
        m, t, pull, _ = (np.array(v) for v in zip(*alone))
        fresh = np.where(m > self.mmap_threshold, m, 0.0)
        lat, inv_bw, phi, kappa = _nonneg_linear(
            np.column_stack([np.ones_like(m), m, fresh * (1.0 + pull), m * pull]), t, self.loss
        )
        pred = lat + m * inv_bw + fresh * (1.0 + pull) * phi + m * pull * kappa
        self.latency_s_ = float(lat)
        worker_bw = float(1.0 / max(inv_bw, 1e-15))
        self.worker_bandwidth_B_per_s_ = worker_bw
        self.receive_fault_s_per_byte_ = float(phi)
        self.response_copy_s_per_byte_ = float(kappa)
        self.residuals_ = (pred - t) / t
        mt, tt, pt, c = (np.array(v) for v in zip(*together))
        extra = np.where(mt > self.mmap_threshold, mt, 0.0) * (1.0 + pt) * phi + mt * pt * kappa
        self.server_side_measured_ = bool((c > 1).any())
        if self.server_side_measured_:
            lat_t, inv_s = _nonneg_linear(
                np.column_stack([np.ones_like(mt), c * mt]), np.maximum(tt - extra, 1e-9), self.loss
            )
            # The incast cannot beat one worker alone: a server side faster than the worker
            # link would only mean the c flows overlapped completely.
            self.bandwidth_B_per_s_ = max(float(1.0 / max(inv_s, 1e-15)), worker_bw)
        else:
            # One worker "at once" (a 2-rank calibration: one server, one worker) is the
            # alone measurement again: nothing separates a server side from the worker's
            # link, and a free fit runs off to its bound (8,000,000 Gb/s on a 2-rank Zen 5
            # calibration, which prices a 4-worker incast as free). Take the
            # worker's link, as every 4-rank calibration has measured it: their fitted
            # server side sat at that floor (cpu-local-x4 33.4, cpu-epyc-x4 26.5, cpu-xeon-emr-x4
            # 41.4 Gb/s),
            # so c workers at once take c times one worker's transfer.
            self.bandwidth_B_per_s_ = worker_bw
            lat_t = float(np.median(tt - extra - c * mt / self.bandwidth_B_per_s_))
        pred_t = lat_t + c * mt / self.bandwidth_B_per_s_ + extra
        self.quality_ = {
            "roundtrip": roundtrip_quality,
            "rpc_alone": summary(t, pred),
            "rpc_together": summary(tt, pred_t),
        }
        self.bytes_range_ = (int(m.min()), int(m.max()))
        self.workers_ = sorted({int(x) for x in c})
        self.transport_ = "rpc"

    def _fit_update(self, updates: Iterable[Mapping]) -> None:
        """``update_bandwidth_B_per_s_``: the server's momentum-SGD update rate."""
        ups = [{"bytes": u["streamed_bytes"], "time_s": u["time_s"]} for u in updates if u.get("time_s")]
        # Parameters of real models do not fit in cache: fit the DRAM regime (>= 8 MB of
        # parameters, 64 MB streamed) when it was measured.
        big = [u for u in ups if u["bytes"] >= 64e6]
        ups = big if len(big) >= 2 else ups
        self.update_bandwidth_B_per_s_ = None
        if len(ups) >= 2:
            mf = MicroFit(op_class="ps_update").fit(ups)
            self.update_bandwidth_B_per_s_ = mf.bytes_per_s_
            t = np.array([u["time_s"] for u in ups])
            pred = mf.overhead_s_ + np.array([u["bytes"] for u in ups]) / mf.bytes_per_s_
            self.quality_["update"] = summary(t, pred)


def _rpc_samples(records: Iterable[Mapping], *, alone: bool) -> list[tuple[float, float, float, float]]:
    """(bytes, seconds, is_pull, workers at once) of every push and pull in ``records``: one
    worker at once for the ``rpc_alone`` records, the record's ``workers`` for the others."""
    return [
        (float(r["bytes"]), r[k], float(k == "pull_time_s"), 1.0 if alone else float(r["workers"]))
        for r in records
        for k in ("push_time_s", "pull_time_s")
        if r.get(k)
    ]
