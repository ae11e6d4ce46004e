"""Fit the parameter-server link and update rate from the ps stage.

Round trip of a push of ``m`` bytes and a pull of ``m`` bytes: ``t = 2 (latency + m / B)``,
the engine's one-way transfer (:func:`simdl.analytic.engine.ps_transfer_times`) twice with
a single worker. Fitted as a send/recv alpha-beta model on ``t / 2``
(:class:`~simdl.calibrate.collectives.CollectiveFit` with no per-call overhead).

Over the parameter server's own transport (``torch.distributed.rpc``, the stage's
``rpc_alone`` and ``rpc_together`` records), the engine's one-way transfer of ``m`` bytes
with ``c`` workers transferring at once is ``latency + max(c m / B_server, m / B_worker)``
(:func:`simdl.analytic.engine.ps_transfer_times`), so:

* ``rpc_alone`` (one worker at a time): every push and every pull, the median over repeats
  and workers, is one sample of ``latency + m / B_worker`` -> ``latency_s_``,
  ``worker_bandwidth_B_per_s_``;
* ``rpc_together`` (all ``c`` workers at once): per repeat, the slowest worker's push (and
  pull) is when the incast ends: ``c m / B_server`` plus a latency -> ``bandwidth_B_per_s_``
  (the server side's, which the profile stores as the server NIC's).

Without RPC records (runs before 2026-11-26) the process-group ping-pong gives both
bandwidths. The ping-pong's own fit (``pingpong_``) always gives the one-way latency
between two processes of a host.

Server update: ``t = o + streamed_bytes / U`` for momentum SGD on a flat tensor, ``U`` the
``ps_servers.update_bandwidth_GB_per_s`` the engine divides the optimizer's passes by.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from .collectives import CollectiveFit
from .compute import MicroFit
from .quality import summary


def _one_way(samples: list[tuple[float, float]]) -> list[dict]:
    return [{"collective": "send_recv", "bytes": b, "group_size": 2, "time_s": t} for b, t in samples if t]


class PSFit:
    """Estimator: ``fit(roundtrips, updates, rpc_alone, rpc_together)`` -> self with
    ``latency_s_``, ``bandwidth_B_per_s_`` (server side), ``worker_bandwidth_B_per_s_``
    (None without RPC records: the engine's worker side is then the node's link),
    ``update_bandwidth_B_per_s_``, ``pingpong_`` (latency, bandwidth of the ping-pong),
    ``transport_`` ("rpc" or "process group"), ``quality_``."""

    def __init__(self, *, loss: str = "soft_l1"):
        self.loss = loss

    def fit(self, roundtrips: Iterable[Mapping], updates: Iterable[Mapping] = (),
            rpc_alone: Iterable[Mapping] = (), rpc_together: Iterable[Mapping] = ()) -> "PSFit":
        rt = _one_way([(r["bytes"], r["time_s"] / 2.0) for r in roundtrips if r.get("time_s")])
        ping = CollectiveFit(fit_overhead=False, loss=self.loss).fit(rt)
        self.pingpong_ = {"latency_s": ping.alpha_s_, "bandwidth_B_per_s": ping.bus_bandwidth_B_per_s_,
                          "quality": ping.quality_, "bytes_range": ping.bytes_range_}
        self.latency_s_ = ping.alpha_s_
        self.bandwidth_B_per_s_ = ping.bus_bandwidth_B_per_s_
        self.worker_bandwidth_B_per_s_ = None
        self.residuals_ = ping.residuals_
        self.quality_ = {"roundtrip": ping.quality_}
        self.bytes_range_ = ping.bytes_range_
        self.transport_ = "process group"
        alone = _one_way([(r["bytes"], r[k]) for r in rpc_alone for k in ("push_time_s", "pull_time_s")])
        together = _one_way([(r["workers"] * r["bytes"], r[k]) for r in rpc_together
                             for k in ("push_time_s", "pull_time_s")])
        if len(alone) >= 2 and len(together) >= 2:
            a = CollectiveFit(fit_overhead=False, loss=self.loss).fit(alone)
            t = CollectiveFit(fit_overhead=False, loss=self.loss).fit(together)
            self.latency_s_ = a.alpha_s_
            self.worker_bandwidth_B_per_s_ = a.bus_bandwidth_B_per_s_
            # The incast cannot beat one worker alone: a server side faster than the worker
            # link would only mean the c flows overlapped completely.
            self.bandwidth_B_per_s_ = max(t.bus_bandwidth_B_per_s_, a.bus_bandwidth_B_per_s_)
            self.residuals_ = a.residuals_
            self.quality_ = {"roundtrip": ping.quality_, "rpc_alone": a.quality_, "rpc_together": t.quality_}
            self.bytes_range_ = a.bytes_range_
            self.workers_ = sorted({int(r["workers"]) for r in rpc_together})
            self.transport_ = "rpc"
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
        return self
