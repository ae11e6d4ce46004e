"""Collective durations for a cluster allocation (:class:`CommCosts`): the communication side
of the costs both engines share.

Communication uses the alpha-beta costs of :mod:`simdl.collectives.cost` with the
bottleneck bandwidth of the group's ring, scaled by the profile's collective efficiency.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..collectives import collective_time
from .rates import host_rates


class CommCosts:
    """Collective durations for a cluster allocation, memoised per (op, bytes, group).

    Bandwidth is the group's bus bandwidth (raw ring bottleneck x the profile's collective
    efficiency, :meth:`Cluster.group_bus_bandwidth`), alpha the per-step latency, plus a
    fixed cost per call (:attr:`Cluster.collective_overhead`). A profile with regime curves
    (``efficiency.collective_regimes_intra``, :mod:`simdl.collectives.regimes`) replaces all
    three, per call, for the collectives it covers inside a node: that collective's
    overhead, and the alpha and bandwidth of the regime its message size falls in, always
    with the ring form (the scaling assumption the curves are fitted with). A group smaller
    than a node is priced by the profile's curve of that group size where it has one
    (``efficiency.collective_regimes_subgroups``, measured with the node's groups calling at
    once), else by the node's curve scaled by the ring's factors.

    ``blocking``: the plan's collectives hold the training thread (FSDP2 on CPU,
    ``plan.facts.blocking_collectives``). A collective the profile has a
    ``collective_blocking_factor_<collective>`` for is then priced by it instead of the load
    factors.
    """

    def __init__(self, cluster: Cluster, algorithm: str = "auto", blocking: bool = False):
        self.cluster = cluster
        self.algorithm = algorithm
        self._overhead = cluster.collective_overhead
        eff = cluster.spec.efficiency
        # Optional per-collective bandwidth factors of the profile (calibrated gloo: its
        # all_gather/reduce_scatter are slower than its all_reduce); 1 when absent.
        self._factor = {c: f.value for c, f in eff.collective_bandwidth_factors.items()}
        self._regimes = eff.collective_regimes_intra
        self._subgroups = eff.collective_regimes_subgroups
        # Where the host maps large buffers fresh (its page-fault cost is priced), the regime
        # curves step at its mmap threshold for collectives with a whole-message temporary
        # (simdl.collectives.regimes, "The allocator's step"); None on GPU memory.
        self._temp_threshold = host_rates(cluster).get("mmap_threshold")
        self._load_factor = eff.collective_load_factor.value if eff.collective_load_factor else 1.0
        ar = eff.collective_load_factor_all_reduce
        self._load_factor_all_reduce = ar.value if ar else self._load_factor
        half = eff.collective_load_half_size
        self._load_half_size = half.value if half else float("inf")
        self._load_overhead = eff.collective_load_overhead.value if eff.collective_load_overhead else 0.0
        self._blocking = {c: f.value for c, f in eff.collective_blocking_factors.items()} if blocking else {}
        self._cache: dict[tuple, float] = {}
        self._parts: dict[tuple, tuple] = {}

    @classmethod
    def for_plan(cls, cluster: Cluster, plan, algorithm: str = "auto") -> "CommCosts":
        """The costs a plan's collectives run at: blocking where the plan says they hold the
        training thread."""
        return cls(cluster, algorithm, blocking=plan.facts.blocking_collectives)

    def bandwidth(self, scope: str) -> float:
        return self.cluster.group_bus_bandwidth(scope)

    def alpha(self, scope: str) -> float:
        return self.cluster.group_latency(scope)

    def curve(self, collective: str, scope: str, size: int | None = None):
        """(the regime model, its curve) that prices ``collective`` over ``size`` ranks of
        ``scope``, or None. Curves are measured between the ranks of one node: they apply to
        'intra', and to 'world' on a single node. A group smaller than a node takes the curve
        measured at its size, if the profile has one."""
        if not (scope == "intra" or (scope == "world" and self.cluster.nodes == 1)):
            return None
        if size is not None and size < self.cluster.gpus_per_node:
            model = self._subgroups.get(size)
            c = model.curve(collective) if model is not None else None
            if c is not None:
                return model, c
        if self._regimes is None:
            return None
        c = self._regimes.curve(collective)
        return (self._regimes, c) if c is not None else None

    def parts(self, collective: str, nbytes: float, size: int, scope: str) -> tuple[float, float, float, str]:
        """(overhead s, alpha s per step, bus bandwidth bytes/s, algorithm 'ring'|'tree') of one
        call: what :meth:`time` evaluates, and what the simulator's flows are built from."""
        key = (collective, nbytes, size, scope)
        p = self._parts.get(key)
        if p is None:
            found = self.curve(collective, scope, size)
            if found is not None:
                model, curve = found
                scale = self.cluster.group_bandwidth(scope) / model.link_bandwidth
                o, alpha, bw = curve.parts(nbytes, size, scale, self._temp_threshold)
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
            g = self._blocking.get(collective)
            if g is not None:
                # A call that holds the training thread, priced as measured in steps
                # (simdl.calibrate.in_step): its transfer at g x the idle time, plus the fitted
                # delay per call. The wait for peers is the engines' (blocking_wait_time).
                o, alpha, bw, algo = p
                p = (o + self._load_overhead, alpha * g, bw / g, algo)
                self._parts[key] = p
                return p
            f = self._load_factor_all_reduce if collective == "all_reduce" else self._load_factor
            f = 1.0 + (f - 1.0) / (1.0 + nbytes / self._load_half_size)
            if f != 1.0 or self._load_overhead:
                # Host ranks (CPU, gloo): a collective of a training step runs while the same
                # cores compute and waits for the peers' threads to be scheduled, so it takes
                # longer than on the idle machine the curves were measured on: the profile's
                # fitted factor on its latency and bandwidth terms (all_reduce's own, if the
                # profile has one; smaller for large messages, if it has a half size), plus a
                # delay per call.
                o, alpha, bw, algo = p
                p = (o + self._load_overhead, alpha * f, bw / f, algo)
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


def blocking_wait_time(cluster: Cluster, plan, compute: float) -> float:
    """Seconds a step's blocking collectives spend waiting for peers still computing: the
    profile's ``collective_blocking_wait`` (per second of compute) x the step's compute, for
    a plan whose collectives hold the training thread; 0 otherwise."""
    w = cluster.spec.efficiency.collective_blocking_wait
    if w is None or not plan.facts.blocking_collectives:
        return 0.0
    return w.value * compute
