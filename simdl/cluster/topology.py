"""The allocated cluster as a directed graph of links, for routing flows.

:func:`build_topology` turns a :class:`~simdl.cluster.allocate.Cluster` into a
``networkx.DiGraph`` whose edges are the physical link directions with their full
capacity, so that a discrete-event simulator can route flows over it and share each
edge's bandwidth among the flows crossing it. This is the only simdl module that
imports networkx; the analytic engine uses the closed forms in
:mod:`simdl.cluster.allocate`, and tests hold the two together.

Nodes (attribute ``kind``):

* ``gpu:<rank>`` -- a rank's device (for cpu-local: a rank process);
* ``nvswitch:<n>`` / ``shm:<n>`` -- node ``n``'s intra-node hub when the fabric is a switch
  (one non-blocking switch stands for the NVSwitch chips; shared memory for processes);
  an NVLink mesh has direct ``gpu -> gpu`` edges instead, one per bonded link bundle;
* ``pcie:<n>:<s>`` -- PCIe switch ``s`` of node ``n`` (GPU-attached nodes only). A node has
  ``min(gpus_per_node, nics_per_node)`` switches (at least 1); GPU ``l`` and NIC ``i`` sit on
  switch ``l*S//G`` and ``i*S//nics``, as on DGX boards where each PCIe switch joins GPUs with
  their nearest NIC(s). On a ``pcie`` fabric the switch is also the GPU-GPU path;
* ``host:<n>`` -- node ``n``'s CPU root complex / host memory, joining its PCIe switches;
* ``nic:<n>:<i>`` -- NIC ``i`` of node ``n``; ``net`` -- the network, modelled as one
  non-blocking switch (full bisection);
* ``ps:<s>`` and ``psnic:<s>`` -- parameter server ``s`` and its NIC.

Edges carry ``bandwidth`` (bytes/s, one direction), ``latency`` (s), ``kind`` (``nvlink``,
``shm``, ``pcie``, ``network``, ``host``) and ``fabric`` (True for the intra-node GPU
interconnect). Latencies are split so that a route adds up to the figures in the preset:
a hub fabric puts half of ``intra_node.latency`` on each of its two edges, a mesh puts all
of it on its one edge; every PCIe edge carries half of ``pcie_latency``; NIC<->net edges
carry half of ``inter_node.latency``; the PS NIC edge carries what is left of
``ps_servers.latency`` once the worker side's share is counted.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Iterable, Sequence

import networkx as nx

from ..errors import SimdlError
from .allocate import Cluster

# Node kinds that are endpoints only: devices and servers do not forward traffic.
_ENDPOINT_KINDS = ("gpu", "ps")


def _num_pcie_switches(gpus_per_node: int, nics: int) -> int:
    return max(1, min(gpus_per_node, nics))


def _duplex(
    graph: nx.DiGraph, u: str, v: str, bandwidth: float, latency: float, kind: str, fabric: bool = False
) -> None:
    graph.add_edge(u, v, bandwidth=bandwidth, latency=latency, kind=kind, fabric=fabric)
    graph.add_edge(v, u, bandwidth=bandwidth, latency=latency, kind=kind, fabric=fabric)


def build_topology(cluster: Cluster) -> nx.DiGraph:
    """Build the link graph of ``cluster`` (only the ranks in use; all NICs of used nodes)."""
    spec = cluster.spec
    net = spec.inter_node
    pcie_bw, pcie_lat = spec.intra_node.pcie_bandwidth.value, spec.intra_node.pcie_latency.value
    graph = nx.DiGraph(
        cluster=spec.name,
        link=spec.intra_node.link,
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        world_size=cluster.gpus,
    )
    if net is not None:
        graph.add_node("net", kind="net")
    attach = {n: _add_node(graph, cluster, n) for n in range(cluster.nodes)}  # where each NIC plugs in
    if net is not None:
        for n in range(cluster.nodes):
            for i in range(net.nics):
                nic = f"nic:{n}:{i}"
                graph.add_node(nic, kind="nic", node=n, index=i)
                _duplex(graph, nic, attach[n][i], pcie_bw, pcie_lat / 2, "pcie")
                _duplex(graph, nic, "net", net.nic_bandwidth.value, net.latency.value / 2, "network")
    if spec.ps_servers is not None:
        _add_ps_servers(graph, cluster)
    return graph


def _add_node(graph: nx.DiGraph, cluster: Cluster, n: int) -> list[str]:
    """Node ``n``'s devices, hubs and PCIe tree; returns where its NICs plug in, by NIC index."""
    spec = cluster.spec
    link = spec.intra_node
    g_used, g_full = cluster.gpus_per_node, spec.gpus_per_node
    intra_bw, intra_lat = link.bandwidth.value, link.latency.value
    pcie_bw, pcie_lat = link.pcie_bandwidth.value, link.pcie_latency.value
    nics = spec.inter_node.nics if spec.inter_node else 0
    gpus = [f"gpu:{n * g_used + local}" for local in range(g_used)]
    for local, name in enumerate(gpus):
        graph.add_node(name, kind="gpu", node=n, rank=n * g_used + local, local=local)

    if link.link == "shm":
        hub = f"shm:{n}"
        graph.add_node(hub, kind="shm", node=n)
        for name in gpus:
            _duplex(graph, name, hub, intra_bw, intra_lat / 2, "shm", fabric=True)
        return [hub] * nics

    # PCIe tree: switches joined by the host; GPUs and NICs on their nearest switch.
    switches = _num_pcie_switches(g_full, nics)
    host = f"host:{n}"
    graph.add_node(host, kind="host", node=n)
    pcie = [f"pcie:{n}:{s}" for s in range(switches)]
    for s, name in enumerate(pcie):
        graph.add_node(name, kind="pcie", node=n, switch=s)
        _duplex(graph, name, host, pcie_bw, pcie_lat / 2, "pcie")
    for local, name in enumerate(gpus):
        _duplex(
            graph, name, pcie[local * switches // g_full], pcie_bw, pcie_lat / 2, "pcie", fabric=link.link == "pcie"
        )

    if link.link == "nvswitch":
        hub = f"nvswitch:{n}"
        graph.add_node(hub, kind="nvswitch", node=n)
        for name in gpus:
            _duplex(graph, name, hub, intra_bw, intra_lat / 2, "nvlink", fabric=True)
    elif link.link == "nvlink":
        for a, b in itertools.combinations(range(g_used), 2):
            bw = link.pair_bandwidth(a, b, g_full)
            if bw > 0:
                _duplex(graph, gpus[a], gpus[b], bw, intra_lat, "nvlink", fabric=True)
    return [pcie[i * switches // nics] for i in range(nics)]


def _add_ps_servers(graph: nx.DiGraph, cluster: Cluster) -> None:
    spec = cluster.spec
    ps, net, link = spec.require_ps_servers(), spec.inter_node, spec.intra_node
    if net is not None:
        where, worker_side = "net", link.pcie_latency.value + net.latency.value / 2
    elif link.link == "shm":
        where, worker_side = "shm:0", link.latency.value / 2
    else:
        where, worker_side = "host:0", link.pcie_latency.value
    rest = max(0.0, ps.latency.value - worker_side)
    for s in range(ps.count):
        server, nic = f"ps:{s}", f"psnic:{s}"
        graph.add_node(server, kind="ps", index=s)
        graph.add_node(nic, kind="nic", index=s, ps=True)
        _duplex(graph, server, nic, ps.nic_bandwidth.value, 0.0, "host")
        _duplex(graph, nic, where, ps.nic_bandwidth.value, rest, "network" if net else "host")
        if ps.worker_link is not None and net is None:
            # Calibrated per-worker PS link (simdl.costs.ps.ps_transfer_times): each
            # worker reaches the server's side on a link of its own; same latency as the
            # shared route, one hop fewer, so routing takes it.
            for gpu in [n for n, d in graph.nodes(data=True) if d.get("kind") == "gpu"]:
                _duplex(graph, gpu, nic, ps.worker_link.value, ps.latency.value, "host")


# --------------------------------------------------------------------------- routing


def route(graph: nx.DiGraph, src: str, dst: str) -> list[tuple[str, str]]:
    """Edges of the lowest-latency path from ``src`` to ``dst``.

    Ties break on fewer hops, then on the node names along the path, so the result is
    deterministic. Devices and servers (``gpu:*``, ``ps:*``) are never transit nodes.
    Routes are cached on the graph (``graph.graph['_routes']``): rebuild the graph rather
    than editing it after routing.
    """
    cache = graph.graph.setdefault("_routes", {})
    key = (src, dst)
    if key in cache:
        return list(cache[key])
    for node in (src, dst):
        if node not in graph:
            raise SimdlError(f"no node {node!r} in the topology of {graph.graph.get('cluster', '?')}")
    # Latency in integer picoseconds so that equal sums compare equal.
    best: dict[str, tuple[int, int, tuple[str, ...]]] = {src: (0, 0, (src,))}
    heap: list[tuple[int, int, tuple[str, ...], str]] = [(0, 0, (src,), src)]
    while heap:
        lat, hops, path, node = heapq.heappop(heap)
        if best.get(node, (None,))[0:3] != (lat, hops, path):
            continue
        if node == dst:
            break
        if node != src and graph.nodes[node].get("kind") in _ENDPOINT_KINDS:
            continue
        for nxt, data in graph[node].items():
            if nxt in path:
                continue
            cand = (lat + round(data["latency"] * 1e12), hops + 1, path + (nxt,))
            if nxt not in best or cand < best[nxt]:
                best[nxt] = cand
                heapq.heappush(heap, (*cand, nxt))
    if dst not in best:
        raise SimdlError(f"no route from {src} to {dst} in the topology of {graph.graph.get('cluster', '?')}")
    path = best[dst][2]
    edges: list[tuple[str, str]] = list(zip(path[:-1], path[1:]))
    cache[key] = tuple(edges)
    return edges


def path_bottleneck(graph: nx.DiGraph, src: str, dst: str) -> tuple[float, float]:
    """(bottleneck bandwidth in bytes/s, total latency in s) of ``route(graph, src, dst)``."""
    edges = route(graph, src, dst)
    if not edges:
        return float("inf"), 0.0
    bandwidth = min(graph.edges[e]["bandwidth"] for e in edges)
    latency = sum(graph.edges[e]["latency"] for e in edges)
    return bandwidth, latency


def flow_rates(graph: nx.DiGraph, pairs: Iterable[tuple[str, str]]) -> list[float]:
    """Rate of each of several concurrent flows when every edge splits its capacity equally
    among the flows that cross it and a flow runs at its tightest share. (A one-shot
    approximation of max-min fair sharing; the simulator does the real sharing over time.)"""
    routes = [route(graph, s, d) for s, d in pairs]
    load: dict[tuple[str, str], int] = {}
    for edges in routes:
        for e in edges:
            load[e] = load.get(e, 0) + 1
    return [min((graph.edges[e]["bandwidth"] / load[e] for e in edges), default=float("inf")) for edges in routes]


def ring_bus_bandwidth(graph: nx.DiGraph, rings: Sequence[Sequence[int]]) -> float:
    """Per-rank bus bandwidth of several rings running at once (NCCL channels): every ring
    edge is a flow; a ring runs at its slowest edge's share; the rings' rates add up."""
    flows: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for ring in rings:
        start = len(flows)
        for a, b in zip(ring, list(ring[1:]) + [ring[0]]):
            flows.append((f"gpu:{a}", f"gpu:{b}"))
        spans.append((start, len(flows)))
    rates = flow_rates(graph, flows)
    return sum(min(rates[s:e]) for s, e in spans)


def flat_rings(cluster: Cluster) -> list[list[int]]:
    """Rank orders of the rings a flat NCCL-style ring collective would run over ``cluster``.

    One ring per NIC (capped at the ranks per node) when the ring crosses nodes, else one.
    Inside a node a ring follows a cycle of the intra-node fabric (for an NVLink mesh, a
    Hamiltonian cycle over direct links with the widest narrowest bundle); ring ``c`` starts
    each node at a different position so that the rings leave and enter nodes through
    different GPUs and NICs.
    """
    spec, g = cluster.spec, cluster.gpus_per_node
    channels = 1
    if cluster.nodes > 1 and spec.inter_node is not None:
        channels = max(1, min(spec.inter_node.nics, g))
    order = _local_cycle(cluster)
    rings = []
    for c in range(channels):
        shift = c * g // channels
        local = order[shift:] + order[:shift]
        rings.append([n * g + lr for n in range(cluster.nodes) for lr in local])
    return rings


def _local_cycle(cluster: Cluster) -> list[int]:
    spec, g = cluster.spec, cluster.gpus_per_node
    link = spec.intra_node
    if link.link != "nvlink" or link.mesh is None or g <= 3 or g > 9:
        return list(range(g))
    best, best_key = list(range(g)), None
    for perm in itertools.permutations(range(1, g)):
        cycle = (0, *perm)
        widths = [link.pair_bandwidth(a, b, spec.gpus_per_node) for a, b in zip(cycle, cycle[1:] + (0,))]
        if min(widths) <= 0:
            continue
        key = (min(widths), sum(widths))
        if best_key is None or key > best_key:
            best, best_key = list(cycle), key
    return best


def intra_egress(graph: nx.DiGraph, rank: int) -> float:
    """Bytes/s a GPU can send into its intra-node fabric (sum of its fabric out-edges)."""
    return sum(d["bandwidth"] for _, _, d in graph.out_edges(f"gpu:{rank}", data=True) if d["fabric"])


def node_network_egress(graph: nx.DiGraph, node: int) -> float:
    """Bytes/s all NICs of ``node`` can send into the network."""
    return sum(
        d["bandwidth"]
        for u, v, d in graph.edges(data=True)
        if v == "net" and graph.nodes[u].get("kind") == "nic" and graph.nodes[u].get("node") == node
    )
