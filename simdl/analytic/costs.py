"""Cost of compute and communication on a cluster: the numbers both engines share.

Compute is a per-row roofline (Williams, Waterman & Patterson, CACM 2009): a row takes
the longer of its FLOPs over the achievable FLOP/s and its bytes over the achievable
memory bandwidth, plus a fixed overhead per kernel launched. Achievable = peak times an
efficiency, both from the cluster profile (datasheet peaks, efficiencies from
measurements or calibration; the profile says which).

Communication uses the alpha-beta costs of :mod:`simdl.collectives.cost` with the
bottleneck bandwidth of the group's ring, scaled by the profile's collective efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cluster import Cluster
from ..collectives import collective_time
from ..workload.table import WorkloadTable

# Which peak a precision uses for matmul/convolution rows.
PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16-amp": "fp16"}

# Assumed: under autocast (bf16 / fp16-amp) activations are stored in 16 bits, so
# activation traffic and saved activations are about half of the fp32 table's. A few
# ops autocast keeps in fp32 (softmax, losses, norms' statistics) make this a lower bound.
MIXED_PRECISION_ACTIVATION_FACTOR = 0.5

# Assumed: a backward kernel reads the saved input and the output gradient and writes
# the input gradient (and the weight gradient), about twice the forward's traffic.
# Calibration fits the memory-bandwidth efficiency that absorbs the error of this factor.
BACKWARD_BYTES_FACTOR = 2.0


@dataclass(frozen=True)
class Rates:
    """Achievable rates of one device for one precision, in SI units."""

    flops: float  # FLOP/s for matmul/convolution/attention
    memory_bandwidth: float  # bytes/s
    kernel_overhead: float  # s per kernel launch
    activation_factor: float  # bytes scale for activations under mixed precision
    # s of fixed setup per matmul/convolution call (a row's forward call, and each of its
    # backward input- and weight-gradient calls), on top of kernel_overhead: oneDNN on CPU
    # pays ~0.1 ms per convolution call (issue 5 calibration); 0 unless the profile says.
    matmul_call_overhead: float = 0.0


@lru_cache(maxsize=1024)
def device_rates(cluster: Cluster, precision: str) -> Rates:
    # per_rank_*: ranks sharing one device (the cpu-local preset) each get their share.
    eff = cluster.spec.efficiency
    peak = PEAK_KEY[precision]
    # A profile may give the matmul efficiency per peak (matmul_tf32, matmul_fp16, ...): the
    # fraction of peak reached differs by precision (issue 5 fits: A100 TF32 0.24, AMP 0.43).
    matmul = eff.matmul_by_precision.get(peak, eff.matmul)
    return Rates(
        flops=cluster.per_rank_peak_flops(peak) * matmul.value,
        memory_bandwidth=cluster.per_rank_memory_bandwidth * eff.memory_bandwidth.value,
        kernel_overhead=eff.kernel_launch.value,
        activation_factor=MIXED_PRECISION_ACTIVATION_FACTOR if precision in ("bf16", "fp16-amp") else 1.0,
        matmul_call_overhead=eff.matmul_call_overhead.value if eff.matmul_call_overhead else 0.0,
    )


@dataclass(frozen=True, eq=False)
class RowTimes:
    """Per-row forward and backward seconds and their prefix sums (for O(1) segment sums)."""

    fwd: np.ndarray
    bwd: np.ndarray
    fwd_cum: np.ndarray
    bwd_cum: np.ndarray

    def segment(self, start: int, stop: int, direction: str) -> float:
        cum = self.fwd_cum if direction == "fwd" else self.bwd_cum
        return float(cum[stop] - cum[start])


@lru_cache(maxsize=4096)
def row_times(table: WorkloadTable, batch: int, rates: Rates) -> RowTimes:
    a = rates.activation_factor
    fwd_flops = table.column("fwd_flops", batch)
    bwd_flops = table.column("bwd_input_flops", batch) + table.column("bwd_weight_flops", batch)
    # Activation traffic scales with precision; weight traffic (the fixed part) does not.
    fwd_bytes = (table.per_sample["read_bytes"] + table.per_sample["write_bytes"]) * batch * a + (
        table.fixed["read_bytes"] + table.fixed["write_bytes"]
    )
    fwd = np.maximum(fwd_flops / rates.flops, fwd_bytes / rates.memory_bandwidth)
    fwd += table.fixed["fwd_kernels"] * rates.kernel_overhead
    bwd = np.maximum(bwd_flops / rates.flops, BACKWARD_BYTES_FACTOR * fwd_bytes / rates.memory_bandwidth)
    bwd += table.fixed["bwd_kernels"] * rates.kernel_overhead
    if rates.matmul_call_overhead:
        # One call per row with forward FLOPs; one per backward gradient (input, weight) computed.
        fwd += (fwd_flops > 0) * rates.matmul_call_overhead
        bwd += ((table.column("bwd_input_flops", batch) > 0).astype(float)
                + (table.column("bwd_weight_flops", batch) > 0)) * rates.matmul_call_overhead
    zero = np.zeros(1)
    return RowTimes(fwd, bwd, np.concatenate([zero, np.cumsum(fwd)]), np.concatenate([zero, np.cumsum(bwd)]))


def memory_bound_time(nbytes: float, kernels: int, rates: Rates) -> float:
    """A task given only by bytes streamed and kernels launched (optimizer, copies)."""
    return nbytes / rates.memory_bandwidth + kernels * rates.kernel_overhead


class CommCosts:
    """Collective durations for a cluster allocation, memoised per (op, bytes, group).

    Bandwidth is the group's bus bandwidth (raw ring bottleneck x the profile's collective
    efficiency, :meth:`Cluster.group_bus_bandwidth`), alpha the per-step latency, plus a
    fixed cost per call (:attr:`Cluster.collective_overhead`). A profile with regime curves
    (``efficiency.collective_regimes_intra``, :mod:`simdl.collectives.regimes`) replaces all
    three, per call, for the collectives it covers inside a node: that collective's
    overhead, and the alpha and bandwidth of the regime its message size falls in, always
    with the ring form (the scaling assumption the curves are fitted with).
    """

    def __init__(self, cluster: Cluster, algorithm: str = "auto"):
        self.cluster = cluster
        self.algorithm = algorithm
        self._overhead = cluster.collective_overhead
        eff = cluster.spec.efficiency
        # Optional per-collective bandwidth factors of the profile (calibrated gloo: its
        # all_gather/reduce_scatter are slower than its all_reduce); 1 when absent.
        self._factor = {c: f.value for c, f in eff.collective_bandwidth_factors.items()}
        self._regimes = eff.collective_regimes_intra
        self._cache: dict[tuple, float] = {}
        self._parts: dict[tuple, tuple] = {}

    def bandwidth(self, scope: str) -> float:
        return self.cluster.group_bus_bandwidth(scope)

    def alpha(self, scope: str) -> float:
        return self.cluster.group_latency(scope)

    def curve(self, collective: str, scope: str):
        """The regime curve that prices ``collective`` over ``scope``, or None. Curves are
        measured between the ranks of one node: they apply to 'intra', and to 'world' on a
        single node."""
        if self._regimes is None or not (scope == "intra" or (scope == "world" and self.cluster.nodes == 1)):
            return None
        return self._regimes.curve(collective)

    def parts(self, collective: str, nbytes: float, size: int, scope: str) -> tuple[float, float, float, str]:
        """(overhead s, alpha s per step, bus bandwidth bytes/s, algorithm 'ring'|'tree') of one
        call: what :meth:`time` evaluates, and what the simulator's flows are built from."""
        key = (collective, nbytes, size, scope)
        p = self._parts.get(key)
        if p is None:
            curve = self.curve(collective, scope)
            if curve is not None:
                scale = self.cluster.group_bandwidth(scope) / self._regimes.link_bandwidth
                o, alpha, bw = curve.parts(nbytes, size, scale)
                p = (o, alpha, bw, "ring")
            else:
                bw = self.bandwidth(scope) * self._factor.get(collective, 1.0)
                alpha = self.alpha(scope)
                algo = self.algorithm
                if algo == "auto":
                    ring = collective_time(collective, nbytes, size, bw, alpha, "ring")
                    tree = collective_time(collective, nbytes, size, bw, alpha, "tree")
                    algo = "tree" if tree < ring else "ring"
                p = (self._overhead, alpha, bw, algo)
            self._parts[key] = p
        return p

    def time(self, collective: str, nbytes: float, size: int, scope: str) -> float:
        key = (collective, nbytes, size, scope)
        t = self._cache.get(key)
        if t is None:
            o, alpha, bw, algo = self.parts(collective, nbytes, size, scope)
            t = collective_time(collective, nbytes, size, bw, alpha, algo)
            if t > 0:
                t += o
            self._cache[key] = t
        return t
