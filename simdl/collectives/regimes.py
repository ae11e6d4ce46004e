"""Collective costs that follow a backend's size regimes: piecewise alpha-beta.

One alpha-beta line per collective cannot follow gloo on a CPU host: its bus bandwidth
changes by 1.5-3x between message sizes (the transport's buffering, the caches the copies
and reductions run through), and the changes come as steps. A *regime curve* keeps the
ring alpha-beta form of :mod:`simdl.collectives.cost` but lets its two parameters change
with size::

    t(collective, m bytes, n ranks) = overhead + ring_time(collective, m, n, B_r, alpha_r)
    r = the regime whose range holds step_bytes(collective, m, n)

``ring_time`` is :func:`simdl.collectives.cost.collective_time` with ``algorithm="ring"``;
``B_r`` is regime r's bus bandwidth and ``alpha_r`` its latency per ring step.

Group size (the scaling assumption). A ring over n ranks runs ``2(n-1)`` (all-reduce) or
``n-1`` (all-gather, reduce-scatter) steps that each move ``m/n`` bytes; a broadcast chain
moves the whole ``m`` at each hop. Assumed: what sets the regime is the bytes *one step*
moves (the size of one transfer between two ranks), so the regime is looked up by
``step_bytes`` = ``m/n`` (``m`` for broadcast, reduce and send/recv), and ``alpha_r`` is paid
per step. A curve measured at 2 ranks therefore predicts n ranks with the ring's ``n-1``
steps: at 4 ranks an all-reduce of m bytes takes 6 steps in the regime of ``m/4``-byte
transfers. Only ``overhead`` -- the fixed cost of one call, measured on a one-rank group
where a call moves nothing -- is not multiplied by the steps. Not checked beyond 2 ranks
on this host (2 cores: 4 ranks would measure CPU oversubscription, not gloo).

Extrapolation: below the smallest measured size the first regime applies (time tends to
``overhead + steps x alpha_1``, latency-bound); above the largest, the last regime
(time grows as ``bytes / B_last``, bandwidth-bound). Between two regimes -- step sizes
larger than the last one a regime was fitted on and smaller than the first of the next --
the two lines are blended log-linearly (:class:`RegimeCurve`), unless the host's allocator
says where the change is (next paragraph).

The allocator's step. gloo's all-gather and reduce-scatter allocate a temporary as large as
the whole message at every call (PyTorch torch/csrc/distributed/c10d/ProcessGroupGloo.cpp:
``allgather`` gathers into ``flatOutputTensor = newLikeFlat(outputs[0])`` and copies it out;
``reduce_scatter_tensor_coalesced`` all-reduces ``inputTensors[i].clone()``). On a host whose
C allocator maps buffers above a threshold fresh at every allocation (glibc: 32 MiB, see
simdl.analytic.costs.GLIBC_MMAP_THRESHOLD_MAX), a call whose message reaches the threshold
pays the page faults of that temporary and one below it reuses heap memory: a step in time
at a known size. The Zen 3 EPYC's curves show it (calibrate-20261126T130810Z, 2 ranks):
all_gather 0.60 GB/s up to 11.9 MB steps (23.7 MB messages), 0.27 GB/s from 16.8 MB
steps (33.5 MB, just above 32 MiB); reduce_scatter the same gap, 0.29 -> 0.25 GB/s and
0.5 -> 7.9 ms per step. Where such a gap holds the threshold (the call's messages at the
gap's two ends straddle it), the curve switches there -- the lower regime below the
threshold, the upper one from it -- instead of blending across the gap
(``temp_threshold`` of :meth:`RegimeCurve.parts`; :class:`simdl.analytic.costs.CommCosts`
passes the host's threshold where the profile prices page faults).

Bandwidths are stored as measured (bus bandwidth at the profile's link rate); the engines
scale them by ``link rate now / link rate at calibration``, so a what-if on the link
(``intra_bandwidth_GB_per_s``) moves every regime with it. The fitter is
:class:`simdl.calibrate.regimes.RegimeFit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import unknown
from .cost import COLLECTIVES, collective_time

#: Collectives whose ring steps move m / n bytes each (the others move all m per hop).
CHUNKED = ("all_reduce", "all_gather", "reduce_scatter")
#: Collectives for which gloo allocates a temporary of the whole message at every call
#: (ProcessGroupGloo.cpp: allgather's flat output, reduce_scatter's input clone; all_reduce
#: and broadcast work in place): their curves step where that temporary reaches the
#: allocator's mmap threshold (module docstring, "The allocator's step").
MESSAGE_TEMPORARY = ("all_gather", "reduce_scatter")


def step_bytes(collective: str, nbytes: float, n: int) -> float:
    """Bytes one ring step moves between two ranks (the quantity regimes are indexed by)."""
    if collective not in COLLECTIVES:
        raise unknown("collective", collective, COLLECTIVES)
    return nbytes / n if collective in CHUNKED else nbytes


def ring_steps(collective: str, n: int) -> int:
    """Latency terms of the ring form (what ``alpha`` is multiplied by)."""
    if collective == "all_reduce":
        return 2 * (n - 1)
    if collective == "send_recv":
        return 1
    return n - 1


def wire_coefficient(collective: str, n: int) -> float:
    """Seconds x (bytes/s) per byte of the ring's bandwidth term: t_bw = coef * m / B."""
    return collective_time(collective, 1.0, n, 1.0, 0.0, "ring")


@dataclass(frozen=True)
class Regime:
    """One alpha-beta line, fitted on transfers of ``lo_step_bytes``..``hi_step_bytes`` per ring step."""

    lo_step_bytes: float
    hi_step_bytes: float
    alpha: float  # s per ring step
    bandwidth: float  # bus bandwidth, bytes/s, at the link rate of calibration

    def time(self, collective: str, nbytes: float, n: int, overhead: float, scale: float) -> float:
        return overhead + collective_time(collective, nbytes, n, self.bandwidth * scale, self.alpha, "ring")


@dataclass(frozen=True)
class RegimeCurve:
    """Piecewise alpha-beta cost of one collective.

    Regimes are sorted by the step sizes they were fitted on. A step size inside a regime's
    range, below the first or above the last uses that regime's line; one in the gap between
    two regimes (where no size used in the fit fell) blends the two lines log-linearly in
    log step size -- the change is known to happen somewhere in the gap, not where, so the
    curve does not jump at an arbitrary point of it. The exception is a gap where the host's
    allocator is known to make the change (``temp_threshold``, module docstring): there the
    curve steps at the threshold."""

    collective: str
    overhead: float  # s per call, not multiplied by the ring steps
    regimes: tuple[Regime, ...]

    def __post_init__(self) -> None:
        if not self.regimes:
            raise ValueError("a regime curve needs at least one regime")
        for a, b in zip(self.regimes, self.regimes[1:]):
            if not (a.lo_step_bytes <= a.hi_step_bytes < b.lo_step_bytes <= b.hi_step_bytes):
                raise ValueError("regime step ranges must be ordered and must not overlap")

    def parts(
        self, nbytes: float, n: int, bandwidth_scale: float = 1.0, temp_threshold: float | None = None
    ) -> tuple[float, float, float]:
        """(overhead s, alpha s per step, bus bandwidth bytes/s) of the ring alpha-beta form
        that gives this call's time (in a gap between regimes: the blend's latency, and the
        bandwidth that makes up the rest of the blended time).

        ``temp_threshold``: the host allocator's mmap threshold in bytes (None: the host maps
        nothing fresh, e.g. GPU memory). For a :data:`MESSAGE_TEMPORARY` collective, a gap
        whose two ends' messages straddle it switches at it instead of blending."""
        s = step_bytes(self.collective, nbytes, n)
        regs = self.regimes
        for k, r in enumerate(regs):
            if s <= r.hi_step_bytes:
                if k == 0 or s >= r.lo_step_bytes:
                    return self.overhead, r.alpha, r.bandwidth * bandwidth_scale
                a = regs[k - 1]
                if temp_threshold is not None and self._allocator_gap(a, r, n, temp_threshold):
                    side = a if nbytes < temp_threshold else r
                    return self.overhead, side.alpha, side.bandwidth * bandwidth_scale
                w = math.log(s / a.hi_step_bytes) / math.log(r.lo_step_bytes / a.hi_step_bytes)
                t = math.exp(
                    (1 - w) * math.log(a.time(self.collective, nbytes, n, self.overhead, bandwidth_scale))
                    + w * math.log(r.time(self.collective, nbytes, n, self.overhead, bandwidth_scale))
                )
                # Weighted geometric means are superadditive, so t - overhead exceeds the blended
                # latency and the bandwidth term left over is positive.
                alpha = (a.alpha ** (1 - w)) * (r.alpha**w)
                wire = t - self.overhead - ring_steps(self.collective, n) * alpha
                return self.overhead, alpha, wire_coefficient(self.collective, n) * nbytes / wire
        r = regs[-1]
        return self.overhead, r.alpha, r.bandwidth * bandwidth_scale

    def _allocator_gap(self, a: Regime, b: Regime, n: int, temp_threshold: float | None) -> bool:
        """Is the gap between regimes ``a`` and ``b`` the allocator's step: does the threshold
        lie between the messages (at ``n`` ranks) of ``a``'s largest and ``b``'s smallest step?
        A message at the threshold itself is mapped (glibc mmaps requests of at least the
        threshold; PyTorch's 64-byte alignment adds to a 32 MiB request)."""
        if temp_threshold is None or self.collective not in MESSAGE_TEMPORARY:
            return False
        # Both MESSAGE_TEMPORARY collectives are CHUNKED: a step moves m / n bytes.
        return a.hi_step_bytes * n < temp_threshold <= b.lo_step_bytes * n

    def time(self, nbytes: float, n: int, bandwidth_scale: float = 1.0, temp_threshold: float | None = None) -> float:
        if n <= 1 or nbytes <= 0:
            return 0.0
        o, alpha, bw = self.parts(nbytes, n, bandwidth_scale, temp_threshold)
        return o + collective_time(self.collective, nbytes, n, bw, alpha, "ring")


@dataclass(frozen=True)
class RegimeModel:
    """The regime curves of one scope of a profile (``efficiency.collective_regimes_intra``)."""

    curves: tuple[RegimeCurve, ...]
    link_bandwidth: float  # raw link rate (bytes/s) the bandwidths were measured over
    kind: str = "calibrated"
    source: str = ""

    def curve(self, collective: str) -> RegimeCurve | None:
        for c in self.curves:
            if c.collective == collective:
                return c
        return None

    @property
    def collectives(self) -> tuple[str, ...]:
        return tuple(c.collective for c in self.curves)
