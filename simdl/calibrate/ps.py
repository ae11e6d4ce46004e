"""Fit the parameter-server link and update rate from the ps stage.

Round trip of a push of ``m`` bytes and a pull of ``m`` bytes: ``t = 2 (latency + m / B)``,
the engine's one-way transfer (:func:`simdl.analytic.engine.ps_transfer_times`) twice with
a single worker. Fitted as a send/recv alpha-beta model on ``t / 2``
(:class:`~simdl.calibrate.collectives.CollectiveFit` with no per-call overhead).

Server update: ``t = o + streamed_bytes / U`` for momentum SGD on a flat tensor, ``U`` the
``ps_servers.update_bandwidth_GB_per_s`` the engine divides the optimizer's passes by.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from .collectives import CollectiveFit
from .compute import MicroFit
from .quality import summary


class PSFit:
    """Estimator: ``fit(roundtrips, updates)`` -> self with ``latency_s_``,
    ``bandwidth_B_per_s_``, ``update_bandwidth_B_per_s_``, ``quality_``."""

    def __init__(self, *, loss: str = "soft_l1"):
        self.loss = loss

    def fit(self, roundtrips: Iterable[Mapping], updates: Iterable[Mapping] = ()) -> "PSFit":
        rt = [{"collective": "send_recv", "bytes": r["bytes"], "group_size": 2, "time_s": r["time_s"] / 2.0}
              for r in roundtrips if r.get("time_s")]
        one_way = CollectiveFit(fit_overhead=False, loss=self.loss).fit(rt)
        self.latency_s_ = one_way.alpha_s_
        self.bandwidth_B_per_s_ = one_way.bus_bandwidth_B_per_s_
        self.residuals_ = one_way.residuals_
        self.quality_ = {"roundtrip": one_way.quality_}
        self.bytes_range_ = one_way.bytes_range_
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
