"""What a placed cluster is, links left out: the key of work that never reads the links.

A strategy's plan (:mod:`simdl.strategies`: the mesh, units, buckets and tasks read the rank
counts, the device, its host backend and the efficiency factors) and a rank's memory
(:mod:`simdl.memory`: the timeline, the allocator replay, the CUDA context and NCCL
buffers) depend on no link rate or latency. Grid points that differ only in links (the
what-if overrides of :mod:`simdl.explore.whatif` on ``intra_node``, ``inter_node`` and the
parameter servers' NIC, which also rename the preset) share that work through
:func:`link_free_key`: every field of the :class:`~simdl.cluster.Cluster` and of its
:class:`~simdl.cluster.ClusterSpec` that takes part in equality, except the spec's name and description,
``intra_node``, ``inter_node`` and the parameter servers' links (their presence and count
stay in the key). The intra-node PCIe rate stays in the key: the ZeRO plan prices its
optimizer offload copies by it (simdl.strategies.zero_plan).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

#: ClusterSpec fields left out of the key: the links, and the name and description a what-if override changes.
LINK_FIELDS = ("name", "description", "intra_node", "inter_node", "ps_servers")
#: PSServers fields left out (its links); the rest (count, cores, update bandwidth) stay.
PS_LINK_FIELDS = ("nic_bandwidth", "latency")

_KEYS: dict[int, tuple[Any, tuple]] = {}  # id(cluster) -> (cluster, key): the cluster kept alive
_LIMIT = 4096


def _compared(obj: Any, leave_out: tuple[str, ...] = ()) -> tuple:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj) if f.compare and f.name not in leave_out)


def link_free_key(cluster) -> tuple:
    """A hashable key equal for two clusters that differ only in their links (see module doc)."""
    hit = _KEYS.get(id(cluster))
    if hit is not None and hit[0] is cluster:
        return hit[1]
    spec = cluster.spec
    ps = spec.ps_servers
    key = (
        _compared(cluster, ("spec",)),
        _compared(spec, LINK_FIELDS),
        None if ps is None else _compared(ps, PS_LINK_FIELDS),
        spec.intra_node.pcie_bandwidth,
    )
    if len(_KEYS) >= _LIMIT:
        _KEYS.clear()
    _KEYS[id(cluster)] = (cluster, key)
    return key


class LinkFreeMemo:
    """A bounded memo of ``fn(*args)`` keyed on ``key``; the first caller's arguments compute it.

    Only for functions whose answer is the same for every argument set sharing a key
    (the module doc says which); an exception is not stored.
    """

    def __init__(self, fn: Callable, limit: int = _LIMIT) -> None:
        self.fn, self.limit = fn, limit
        self.store: dict[tuple, Any] = {}

    def __call__(self, key: tuple, *args: Any) -> Any:
        try:
            return self.store[key]
        except KeyError:
            pass
        value = self.fn(*args)
        if len(self.store) >= self.limit:
            self.store.clear()
        self.store[key] = value
        return value
