"""Routes between topology nodes as link indices: one Dijkstra search per route pattern.

``topology.route`` runs a Dijkstra search; at 16,384 GPUs a cross-node search would visit
the whole network. Nodes are built identically, so a route is searched once per pattern
(local GPU indices, same node or not) on a two-node copy of the cluster and carried over
to the actual nodes by their parsed names (``(kind, node, rest)``); a carried route whose
links do not exist falls back to a real search.
"""

from __future__ import annotations

import re

import numpy as np

_NODE_NAME = re.compile(r"^(nvswitch|shm|host|pcie|nic):(\d+)(:\d+)?$")


class Router:
    """Routes between graph nodes as link indices, with the links' capacities and latencies
    from the topology (module docstring: how routes are searched once per pattern)."""

    def __init__(self, graph, cluster) -> None:
        from ..cluster.allocate import Cluster
        from ..cluster.topology import build_topology, route

        self._route = route
        self.graph = graph
        self.cluster = cluster
        # Canonical routes are searched on a copy of the cluster with at most two nodes:
        # the same node structure, but a Dijkstra search that does not visit 1024 GPUs.
        if cluster.nodes > 2:
            small = Cluster(
                spec=cluster.spec, gpus=2 * cluster.gpus_per_node, nodes=2, gpus_per_node=cluster.gpus_per_node
            )
            self._canon_graph = build_topology(small)
        else:
            self._canon_graph = graph
        self.G = cluster.gpus_per_node
        edges = list(graph.edges(data=True))
        self.names = [f"{u}->{v}" for u, v, _ in edges]
        self.kinds = [d.get("kind", "") for _, _, d in edges]
        self.capacity = np.array([d["bandwidth"] for _, _, d in edges], dtype=float)
        self.latency = np.array([d["latency"] for _, _, d in edges], dtype=float)
        self.link_id = {(u, v): i for i, (u, v, _) in enumerate(edges)}
        self._cache: dict[tuple, tuple[int, ...]] = {}
        self._canon: dict[tuple, list[tuple[str, str]]] = {}
        self._parsed: dict[str, tuple] = {}
        self._gpu_cache: dict[tuple[int, int], tuple[int, ...]] = {}
        self._templates: dict[tuple, list] = {}
        self._link_by_parts = {(self._parse(u), self._parse(v)): i for i, (u, v, _) in enumerate(edges)}

    def _node(self, name: str) -> int | None:
        if name.startswith("gpu:"):
            return int(name[4:]) // self.G
        return None

    def _rename(self, name: str, node_map: dict[int, int]) -> str:
        if name.startswith("gpu:"):
            r = int(name[4:])
            return f"gpu:{node_map[r // self.G] * self.G + r % self.G}"
        m = _NODE_NAME.match(name)
        if m:
            return f"{m.group(1)}:{node_map[int(m.group(2))]}{m.group(3) or ''}"
        return name

    def path(self, src: str, dst: str) -> tuple[int, ...]:
        key = (src, dst)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ns, nd = self._node(src), self._node(dst)
        nodes = [n for n in (ns, nd) if n is not None]
        canon_map: dict[int, int] = {}
        for n in nodes:
            if n not in canon_map:
                canon_map[n] = len(canon_map)
        ids = None
        if nodes and max(canon_map.values()) < self.cluster.nodes:
            back = tuple(canon_map)  # canonical node index -> actual node
            ck = (self._rename(src, canon_map), self._rename(dst, canon_map))
            if ck not in self._canon:
                self._canon[ck] = self._route(self._canon_graph, *ck)
            try:
                ids = tuple(self._translate(e, back) for e in self._canon[ck])
            except KeyError:
                ids = None
        if ids is None:
            ids = tuple(self.link_id[e] for e in self._route(self.graph, src, dst))
        self._cache[key] = ids
        return ids

    def gpu_path(self, a: int, b: int) -> tuple[int, ...]:
        """:meth:`path` from ``gpu:a`` to ``gpu:b``: the canonical route of the pair's local
        indices, parsed once per pattern, on the pair's nodes (a ring at 16,384 GPUs asks
        for tens of thousands of these)."""
        key = (a, b)
        hit = self._gpu_cache.get(key)
        if hit is not None:
            return hit
        na, la = divmod(a, self.G)
        nb, lb = divmod(b, self.G)
        same = na == nb
        back = (na,) if same else (na, nb)
        pattern = self._templates.get((la, lb, same))
        if pattern is None:
            ck = (f"gpu:{la}", f"gpu:{lb if same else self.G + lb}")
            if ck not in self._canon:
                self._canon[ck] = self._route(self._canon_graph, *ck)
            pattern = self._templates[(la, lb, same)] = [(self._parse(u), self._parse(v)) for u, v in self._canon[ck]]
        links = self._link_by_parts
        try:
            ids = tuple(
                links[((ku, None if nu is None else back[nu], ru), (kv, None if nv is None else back[nv], rv))]
                for (ku, nu, ru), (kv, nv, rv) in pattern
            )
        except (KeyError, IndexError):
            ids = self.path(f"gpu:{a}", f"gpu:{b}")
        self._gpu_cache[key] = ids
        return ids

    def _parse(self, name: str) -> tuple:
        """``(kind, node, rest)`` of a graph node: ``gpu:R`` -> ('gpu', R // G, R % G),
        ``nic:3:1`` -> ('nic', 3, ':1'); a node of no node (``net``, ``ps:0``) -> (name, None, '')."""
        hit = self._parsed.get(name)
        if hit is None:
            if name.startswith("gpu:"):
                r = int(name[4:])
                hit = ("gpu", r // self.G, r % self.G)
            else:
                m = _NODE_NAME.match(name)
                hit = (m.group(1), int(m.group(2)), m.group(3) or "") if m else (name, None, "")
            self._parsed[name] = hit
        return hit

    def _translate(self, edge: tuple[str, str], back: tuple[int, ...]) -> int:
        """The link of canonical ``edge`` on the actual nodes ``back`` (KeyError: no such link).
        Links are looked up by their parsed endpoints, so no name is formatted per path."""
        (ku, nu, ru), (kv, nv, rv) = self._parse(edge[0]), self._parse(edge[1])
        try:
            key = ((ku, None if nu is None else back[nu], ru), (kv, None if nv is None else back[nv], rv))
        except IndexError:
            raise KeyError(edge) from None
        return self._link_by_parts[key]
