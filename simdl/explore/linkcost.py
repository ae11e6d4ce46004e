"""The clusters and collective prices of a link group (simdl.explore.vector), over its points at once.

:func:`point_clusters` places each point's cluster as ``simdl.predict`` does
(:func:`simdl.explore.whatif.derive_cluster`, then :func:`simdl.cluster.allocate`), memoised
on what that reads: the cluster, the GPU and node counts and the cluster overrides. A grid
asks for the same few link variants in every group.

:func:`comm_durations` prices every collective task of a plan on every point's cluster:
:meth:`simdl.costs.comm.CommCosts.time` evaluated on arrays of the points' bus bandwidths,
latencies and per-call overheads. The clusters of a group share everything but their links
(:func:`shared_key`), so the profile's factors (per
collective bandwidth, load, blocking) are one set of scalars and the alpha-beta forms of
:func:`simdl.collectives.cost.collective_time` are the same float operations in the same
order on each point's values. A collective that a profile's regime curves price
(:meth:`CommCosts.curve`) is not in closed form: then the group is priced point by point.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..collectives.cost import collective_time
from ..errors import SimdlError

_CLUSTERS: dict[tuple, Any] = {}  # (cluster, gpus, nodes, overrides) -> Cluster or the SimdlError
_LIMIT = 4096


def _base_key(params: Mapping[str, Any]) -> tuple | None:
    """What a point's cluster reads besides its links: the cluster, the GPU and node counts
    and the other cluster overrides (None: not hashable)."""
    from .vector import LINK_KEYS
    from .whatif import CLUSTER_KEYS

    over = tuple(
        (k, type(v).__name__, v)
        for k, v in params.items()
        if k in CLUSTER_KEYS and k not in LINK_KEYS and v is not None
    )
    key = (params.get("cluster"), params.get("gpus"), params.get("nodes"), over)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def place(params: Mapping[str, Any]):
    """The placed cluster ``simdl.predict`` builds for this point (SPMD strategies: no
    parameter-server placement); raises the point's SimdlError."""
    from ..cluster import allocate
    from ..predict import _DEFAULTS, DEFAULT_CLUSTER
    from .grid import to_call
    from .whatif import derive_cluster

    kwargs, over = to_call(params)
    spec = derive_cluster(kwargs.get("cluster") or DEFAULT_CLUSTER, **over)
    return allocate(spec, kwargs.get("gpus", _DEFAULTS["gpus"]), kwargs.get("nodes"))


def point_clusters(points: Sequence[Mapping[str, Any]]) -> list:
    """Each point's placed cluster, or the SimdlError placing it raised. The points share
    everything but their links (a link group of simdl.explore.vector)."""
    from .vector import LINK_KEYS

    base = _base_key(points[0])
    out = []
    for p in points:
        key = hit = None
        if base is not None:
            key = (base, tuple((v.__class__, v) for v in map(p.get, LINK_KEYS)))
            try:
                hit = _CLUSTERS.get(key)
            except TypeError:  # an unhashable link value
                key = hit = None
        if hit is None:
            try:
                hit = place(p)
            except SimdlError as e:
                hit = e
            if key is not None:
                if len(_CLUSTERS) >= _LIMIT:
                    _CLUSTERS.clear()
                _CLUSTERS[key] = hit
        out.append(hit)
    return out


def shared_key(cluster) -> tuple:
    """What the clusters of a group must share for one set of profile scalars: the
    :func:`~simdl.cluster.linkfree.link_free_key` without its PCIe rate (an intra-node
    override sets it on PCIe presets), which the prices read only through the cluster's
    bandwidths."""
    from ..cluster.linkfree import link_free_key

    return link_free_key(cluster)[:-1]


def comm_durations(plan, clusters: Sequence, algorithm: str, rows: Sequence[int]) -> np.ndarray | None:
    """Seconds of the collective tasks ``rows`` of ``plan`` (rows x clusters), as
    ``CommCosts.for_plan(cluster, plan, algorithm).time`` gives them, for clusters that share
    their :func:`shared_key`; None where a task is priced by regime curves."""
    from ..costs.comm import CommCosts

    first = clusters[0]
    unique: dict[int, int] = {}
    which = np.empty(len(clusters), dtype=np.intp)
    distinct: list = []
    for j, c in enumerate(clusters):
        u = unique.get(id(c))
        if u is None:
            u = unique[id(c)] = len(distinct)
            distinct.append(c)
        which[j] = u
    costs = CommCosts.for_plan(first, plan, algorithm)
    overhead = np.array([c.collective_overhead for c in distinct])
    links: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    priced: dict[tuple, np.ndarray] = {}
    out = np.empty((len(rows), len(distinct)))
    for r, i in enumerate(rows):
        t = plan.tasks[i]
        g = plan.groups[t.group]
        key = (t.collective, t.comm_bytes, g.size, g.scope)
        d = priced.get(key)
        if d is None:
            if costs.curve(t.collective, g.scope, g.size) is not None:
                return None
            if g.scope not in links:
                links[g.scope] = (
                    np.array([c.group_bus_bandwidth(g.scope) for c in distinct]),
                    np.array([c.group_latency(g.scope) for c in distinct]),
                )
            d = priced[key] = _price(costs, *key, overhead, *links[g.scope])
            if d is None:
                return None
        out[r] = d
    return out[:, which]


def _price(costs, collective: str, nbytes: float, size: int, scope: str, overhead, bus, latency):
    """:meth:`CommCosts.time` (its non-curve branch) over arrays of the clusters' values."""
    from ..collectives.cost import COLLECTIVES

    if collective not in COLLECTIVES:
        return None
    bw = bus * costs._factor.get(collective, 1.0)
    alpha = latency
    o = overhead
    g = costs._blocking.get(collective)
    if g is not None:
        o, alpha, bw = o + costs._load_overhead, alpha * g, bw / g
    else:
        f = costs._load_factor_all_reduce if collective == "all_reduce" else costs._load_factor
        f = 1.0 + (f - 1.0) / (1.0 + nbytes / costs._load_half_size)
        if f != 1.0 or costs._load_overhead:
            o, alpha, bw = o + costs._load_overhead, alpha * f, bw / f
    algo = costs.algorithm
    if algo == "auto":
        ring = _time(collective, nbytes, size, bw, alpha, "ring")
        tree = _time(collective, nbytes, size, bw, alpha, "tree")
        t = np.where(tree < ring, tree, ring)
    else:
        t = _time(collective, nbytes, size, bw, alpha, algo)
    return np.where(t > 0, t + o, t)


def _time(collective: str, nbytes: float, n: int, bw: np.ndarray, alpha: np.ndarray, algorithm: str) -> np.ndarray:
    """:func:`simdl.collectives.cost.collective_time` over arrays of bandwidth and latency (its
    arithmetic applies element-wise, in the same order); zeros where it is 0."""
    # collective_time is written for floats; its arithmetic is the same on arrays.
    t = collective_time(collective, nbytes, n, bw, alpha, algorithm)  # type: ignore[arg-type]
    if isinstance(t, np.ndarray) and t.dtype == float and t.shape == bw.shape:
        return t  # already one float per cluster
    return np.broadcast_to(np.asarray(t, dtype=float), bw.shape)
