"""Collectives decomposed into flows over the topology graph.

A collective over a group of ranks becomes one or more *phases*; a phase is a set of
flows that run together, and the collective ends when its last phase ends.

Ring (all-reduce, all-gather, reduce-scatter; broadcast/reduce as a pipelined chain).
NCCL's ring algorithm (NCCL docs, "Collective Operations"; Thakur, Rabenseifner & Gropp,
IJHPCA 2005) moves the same chunk over every edge of the ring at every step, and the ring
is pipelined, so every edge advances at the pace of the slowest one. One ring (an NCCL
channel) is therefore simulated as ONE flow whose rate is shared by all its edges: the
flow carries the bytes of all steps (``2(n-1)/n * m`` per edge for an all-reduce) and the
latency of all steps (``2(n-1) * alpha``), and on every link it adds one unit of demand per
ring edge that crosses the link (a "flow bundle"). Max-min sharing still applies on every
link, so two collectives on one link, or many ring edges through one NIC, share it.
A ring that crosses nodes runs as ``nics`` channels (``topology.flat_rings``), each with
its share of the bytes, leaving the node through different GPUs and NICs, as NCCL does.

Tree (all-reduce, broadcast, reduce). NCCL's double binary tree (Sanders, Speck & Traeff,
Parallel Computing 2009; NCCL 2.4 release notes): two trees, each carrying half of the
buffer, pipelined; all-reduce is a reduce up both trees then a broadcast down. Inside a
node the tree is a chain, across nodes a binary tree over nodes (NCCL's
"tree up/down" across nodes with intra-node chains). Each tree is one flow per phase.

Inside an NVLink mesh NCCL runs several channels whose rings take different orders through
the node's links, so a GPU's traffic uses all of its NVLink bundles. The simulator models
the union of those channels by spreading each intra-node edge's bytes over the GPU's
direct links to the other group members on its node, in proportion to their bandwidth.

Efficiency and latency come from the same numbers the analytic model uses
(:class:`simdl.analytic.costs.CommCosts`): an edge inside a node reaches
``collective_bandwidth_intra`` of its links' bandwidth, an edge across nodes
``collective_bandwidth_inter`` (modelled as demand ``1/efficiency`` per byte on each link
it crosses), and every step costs the call's ``alpha``. A call the analytic model prices at
another bus bandwidth (a per-collective factor, or a size regime of a calibrated profile,
:meth:`CommCosts.parts`) carries its bytes scaled by base / its bandwidth. Hence, with no
contention, a simulated collective takes exactly the analytic ``CommCosts.time``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SimdlError
from ..strategies.plan import Group
from .router import Router  # noqa: F401  (simdl.sim.collectives.Router, as before)


@dataclass(frozen=True)
class FlowSpec:
    """Links one flow crosses, its demand weight on each (per unit rate) and its payload share."""

    links: np.ndarray
    weights: np.ndarray
    payload: np.ndarray
    share: float  # fraction of the per-edge bytes this flow carries (channels / trees)


@dataclass(frozen=True)
class Phase:
    flows: tuple[FlowSpec, ...]
    edge_bytes: float  # bytes every edge moves in this phase (before the flow's share)
    latency: float


def group_instances(group: Group, cluster) -> list[tuple[str, tuple[int, ...]]]:
    """The concrete rank sets of a plan group: ``[(kind, ranks), ...]``.

    kind ``world`` (every rank), ``node`` (the ranks of one node), ``inter`` (one rank per
    node, same local index) -- the layouts DDP and FSDP (incl. hybrid) use -- or, for hybrid
    sharding with a smaller shard group, ``block`` (a shard group) and ``strided`` (a
    replicate group).
    """
    G, nodes, world = cluster.gpus_per_node, cluster.nodes, cluster.gpus
    if group.size <= 1:
        return [("single", (r,)) for r in range(world)]
    if group.size == world:
        return [("world", tuple(range(world)))]
    if group.scope == "intra" and group.size == G:
        return [("node", tuple(range(n * G, (n + 1) * G))) for n in range(nodes)]
    if group.scope == "inter" and group.size == nodes:
        return [("inter", tuple(n * G + lr for n in range(nodes))) for lr in range(G)]
    # FSDP2's 2-D mesh with shard groups smaller than a node (StrategyConfig.shard_group),
    # row-major as torch.distributed.device_mesh lays it out: a shard group is consecutive
    # ranks of one node, a replicate group one rank of each shard group.
    if group.name == "shard" and G % group.size == 0:
        return [("block", tuple(range(b, b + group.size))) for b in range(0, world, group.size)]
    if group.name == "replicate" and world % group.size == 0:
        stride = world // group.size
        return [("strided", tuple(lr + k * stride for k in range(group.size))) for lr in range(stride)]
    raise SimdlError(
        f"group {group.name!r} of {group.size} ranks (scope {group.scope}) does not match "
        f"{world} GPUs on {nodes} nodes; accepted: the whole world, one node, or one rank per node"
    )


class Collectives:
    """Turns (collective, bytes, group instance) into phases of flows, cached per pattern."""

    def __init__(self, router: Router, cluster, comm_costs, algorithm: str):
        from ..cluster.topology import flat_rings

        self.router = router
        self.cluster = cluster
        self.comm = comm_costs
        self.algorithm = algorithm
        eff = cluster.spec.efficiency
        self.e_intra = eff.collective_bandwidth_intra.value
        self.e_inter = eff.collective_bandwidth_inter.value if eff.collective_bandwidth_inter else self.e_intra
        self.world_rings = flat_rings(cluster)
        G = cluster.gpus_per_node
        self.local_order = [r for r in self.world_rings[0][:G]]
        link = cluster.spec.intra_node
        self.mesh = link.link == "nvlink" and G > 1
        self._edge_cache: dict[tuple, tuple[list, list, list]] = {}
        self._flow_cache: dict[tuple, FlowSpec] = {}
        self._pattern_cache: dict[tuple, list] = {}

    # ------------------------------------------------------------------ edges

    def _edge(self, a: int, b: int, peers: tuple[int, ...]) -> tuple[list, list, list]:
        """(links, weights, payload) of a ring/tree edge a -> b (payload fraction 1)."""
        key = (a, b, peers)
        hit = self._edge_cache.get(key)
        if hit is not None:
            return hit
        G = self.cluster.gpus_per_node
        same = a // G == b // G
        e = self.e_intra if same else self.e_inter
        links: list[int] = []
        weights: list[float] = []
        payload: list[float] = []
        if same and self.mesh:
            spec = self.cluster.spec
            bw = {c: spec.intra_node.pair_bandwidth(a % G, c % G, spec.gpus_per_node) for c in peers if c != a}
            bw = {c: v for c, v in bw.items() if v > 0}
            total = sum(bw.values())
            for c, v in bw.items():
                for link in self.router.gpu_path(a, c):
                    links.append(link)
                    weights.append(v / total / e)
                    payload.append(v / total)
        if not links:
            for link in self.router.gpu_path(a, b):
                links.append(link)
                weights.append(1.0 / e)
                payload.append(1.0)
        out = (links, weights, payload)
        self._edge_cache[key] = out
        return out

    def _flow(self, key: tuple, edges: list[tuple[int, int]], share: float) -> FlowSpec:
        hit = self._flow_cache.get(key)
        if hit is not None:
            return hit
        G = self.cluster.gpus_per_node
        members = sorted({r for e in edges for r in e})
        by_node: dict[int, tuple[int, ...]] = {}
        for r in members:
            by_node.setdefault(r // G, ())
        for r in members:
            by_node[r // G] += (r,)
        links: list[int] = []
        weights: list[float] = []
        payload: list[float] = []
        for a, b in edges:
            la, wa, pa = self._edge(a, b, by_node[a // G])
            links += la
            weights += wa
            payload += pa
        ul, inv = np.unique(np.array(links, dtype=np.int64), return_inverse=True)
        spec = FlowSpec(
            ul,
            np.bincount(inv, weights=weights, minlength=len(ul)),
            np.bincount(inv, weights=payload, minlength=len(ul)),
            share,
        )
        self._flow_cache[key] = spec
        return spec

    # ------------------------------------------------------------------ patterns

    def _rings(self, kind: str, ranks: tuple[int, ...]) -> list[list[int]]:
        G = self.cluster.gpus_per_node
        if kind == "world":
            return self.world_rings
        if kind == "node":
            n = ranks[0] // G
            return [[n * G + lr for lr in self.local_order]]
        return [list(ranks)]

    def _trees(self, kind: str, ranks: tuple[int, ...]) -> list[list[tuple[int, int]]]:
        """Child -> parent edges of the trees: per channel, two trees (intra-node chains along
        the channel's ring order + mirrored binary trees over the nodes' first GPUs)."""
        G = self.cluster.gpus_per_node
        out = []
        for order in self._rings(kind, ranks):
            nodes: dict[int, list[int]] = {}
            for r in order:
                nodes.setdefault(r // G, []).append(r)
            leaders = [v[0] for v in nodes.values()]
            chains = [(v[i + 1], v[i]) for v in nodes.values() for i in range(len(v) - 1)]
            k = len(leaders)
            mirror = leaders[::-1]
            out.append(chains + [(leaders[i], leaders[(i - 1) // 2]) for i in range(1, k)])
            out.append(chains + [(mirror[i], mirror[(i - 1) // 2]) for i in range(1, k)])
        return out

    def algorithm_for(self, op: str, nbytes: float, n: int, scope: str) -> str:
        """The algorithm the analytic model's cost is for ('auto' = the cheaper one, as NCCL's
        tuner; a regime curve is always a ring)."""
        if op in ("all_gather", "reduce_scatter", "send_recv"):
            return "ring"
        return self.comm.parts(op, nbytes, n, scope)[3]

    def overhead(self, op: str, nbytes: float, n: int, scope: str) -> float:
        """The fixed per-call cost of the analytic model (not multiplied by ring steps)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        return self.comm.parts(op, nbytes, n, scope)[0]

    def phases(self, op: str, nbytes: float, kind: str, ranks: tuple[int, ...], scope: str) -> list[Phase]:
        """Phases of one call. The flows run at the group's bus bandwidth when alone
        (``comm.bandwidth(scope)``); a call priced at another bandwidth -- a per-collective
        factor, or the regime its size falls in -- carries ``bytes x base / its bandwidth``, as
        if it moved more (or fewer) bytes, and pays its own alpha per step. With no contention
        a call therefore takes exactly the analytic ``comm.time``; under contention its whole
        bandwidth term, not only the base part, is shared."""
        n = len(ranks)
        if n <= 1 or nbytes <= 0:
            return []
        _, alpha, bw, algo = self.comm.parts(op, nbytes, n, scope)
        if op in ("all_gather", "reduce_scatter", "send_recv"):
            algo = "ring"
        scale = self.comm.bandwidth(scope) / bw
        key = (op, algo, kind, ranks[0], n, scope)
        pattern = self._pattern_cache.get(key)
        if pattern is None:
            pattern = self._pattern_cache[key] = self._pattern(op, algo, kind, ranks, scope)
        return [Phase(flows, nbytes * factor * scale, steps * alpha) for flows, factor, steps in pattern]

    def _pattern(self, op: str, algo: str, kind: str, ranks: tuple[int, ...], scope: str) -> list[tuple]:
        """[(flows, bytes factor, latency steps)] of a collective, independent of its size."""
        n = len(ranks)
        key = (kind, ranks[0], n)
        if algo == "tree":
            depth = math.ceil(math.log2(n))
            trees = self._trees(kind, ranks)
            share = 1.0 / len(trees)
            up = tuple(self._flow(("tree-up", t) + key, edges, share) for t, edges in enumerate(trees))
            down = tuple(
                self._flow(("tree-down", t) + key, [(p, c) for c, p in edges], share) for t, edges in enumerate(trees)
            )
            if op == "all_reduce":
                return [(up, 1.0, depth), (down, 1.0, depth)]
            if op == "reduce":
                return [(up, 1.0, depth)]
            return [(down, 1.0, depth)]  # broadcast
        rings = self._rings(kind, ranks)
        share = 1.0 / len(rings)
        if op in ("broadcast", "reduce", "send_recv"):
            chains = [[(r[i], r[i + 1]) for i in range(len(r) - 1)] for r in rings]
            if op == "send_recv":
                chains = [c[:1] for c in chains]
            flows = tuple(self._flow(("chain", c, op == "send_recv") + key, e, share) for c, e in enumerate(chains))
            steps = 1 if op == "send_recv" else n - 1
            return [(flows, 1.0, steps)]
        cycles = [[(r[i], r[(i + 1) % len(r)]) for i in range(len(r))] for r in rings]
        flows = tuple(self._flow(("ring", c) + key, e, share) for c, e in enumerate(cycles))
        if op == "all_reduce":
            return [(flows, 2.0 * (n - 1) / n, 2 * (n - 1))]
        if op in ("all_gather", "reduce_scatter"):
            return [(flows, (n - 1) / n, n - 1)]
        raise SimdlError(f"unknown collective {op!r}")


def run_collective(env, network, phases: list[Phase], overhead: float, name: str = "", tag=None):
    """SimPy process: the fixed call overhead, then each phase's flows together."""
    if overhead > 0:
        yield env.timeout(overhead)
    group = object()  # this call's flows share links among themselves even without contention
    for ph in phases:
        events = [
            network.transfer(
                f.links, f.weights, ph.edge_bytes * f.share, ph.latency, f.payload, name=name, tag=tag, group=group
            )
            for f in ph.flows
        ]
        yield env.all_of(events)
