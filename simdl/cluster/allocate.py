"""Placing ranks on a preset's nodes, and the bandwidths the analytic engine asks for.

:func:`allocate` turns a :class:`~simdl.cluster.spec.ClusterSpec` and a GPU count into a
:class:`Cluster`: which node every rank is on and how many ranks share a node. Ranks fill
nodes in order (rank ``r`` is on node ``r // gpus_per_node`` and uses local GPU
``r % gpus_per_node``), as ``torchrun --nnodes N --nproc-per-node G`` places them.

The methods here are on the hot path of the analytic engine: plain Python arithmetic on
numbers computed once in ``__post_init__``, no graph. :mod:`simdl.cluster.topology` builds
the same cluster as a networkx graph; tests check that the two agree.

Bandwidth model for a ring over a group of ranks (all rates per direction, bytes/s)
----------------------------------------------------------------------------------
A ring collective moves the same number of bytes over every edge of the ring at every
step, so its speed is set by the slowest edge, and the *bus bandwidth* nccl-tests
reports is that per-rank edge rate. NCCL runs several rings ("channels") at once and
spreads them over the links, so what one rank can push is the sum over its channels.

* ``intra`` (the ranks of one node): the GPU's intra-node port rate -- the NVSwitch
  port, the PCIe link, or for an NVLink mesh the NVLink bundles that go to the *other
  ranks in use* (on a 4-GPU HGX board with 2 GPUs in use, only the one 4-link bundle,
  100 GB/s, not all 300 GB/s). For an irregular mesh (DGX-1) this is an upper bound that
  assumes NCCL's channels can use all of a GPU's links.
* ``world`` (a flat ring over K nodes with G ranks each): the ring visits the G ranks of a
  node, then crosses to the next node. Per ring, only ONE edge leaves each node and one
  enters it -- not G. NCCL gives each channel its own NIC, so with ``nics_per_node`` NICs
  the channels together use all of them, and the ring's bus bandwidth is
  ``min(intra, nics_per_node x nic)`` (each GPU's PCIe link also caps what it can feed a
  NIC: at most ``G x pcie`` leaves a node). This matches the nccl-tests figures in
  published_hardware.md: 4 x HDR (4 x 25 GB/s) per 8-GPU node -> "theoretical 100 GB/s",
  86 measured (nccl-tests #119/#175); DGX-1 with 4 EDR -> 48 GB/s, with one EDR -> 12.2
  (nccl-tests #29). Dividing the NIC rate by G would be wrong for a flat ring.
* ``inter`` (one rank per node, same local index: the cross-node step of a hierarchical
  all-reduce or of FSDP HYBRID_SHARD): all G such groups run at the same time and share
  the node's NICs, so each rank gets ``min(nics x nic, G x pcie) / G``. With one NIC per
  GPU (DGX) that is one NIC per rank; with one 200 Gb/s NIC for 4 GPUs it is 6.25 GB/s.
  A group with a single node never moves bytes; for single-node-only presets (no NICs)
  the intra rate is returned so that formulas stay finite.

These are raw link rates. ``group_bus_bandwidth`` multiplies by the preset's measured
``collective_bandwidth_intra`` / ``_inter`` efficiency; ``group_latency`` is the per-ring-step
alpha (``collective_latency_*``); ``link_latency`` is the physical path latency that the
topology graph's routes add up to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import SimdlError, unknown
from .spec import ClusterSpec, load_cluster

GROUPS = ("world", "intra", "inter")


def _check_group(group: str) -> None:
    if group not in GROUPS:
        raise unknown("communication group", group, GROUPS)


@dataclass(frozen=True)
class Cluster:
    """A preset with ranks placed on it. ``gpus`` is the world size; ``gpus_per_node`` is the
    number of ranks actually used on every node (<= the preset's node size)."""

    spec: ClusterSpec
    gpus: int
    nodes: int
    gpus_per_node: int
    # Derived once, in __post_init__ (bytes/s and seconds).
    _intra: float = field(init=False, repr=False, compare=False)
    _node_net: float = field(init=False, repr=False, compare=False)
    _bw: dict = field(init=False, repr=False, compare=False, hash=False)
    _bus: dict = field(init=False, repr=False, compare=False, hash=False)
    _alpha: dict = field(init=False, repr=False, compare=False, hash=False)
    _link_lat: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        spec, g = self.spec, self.gpus_per_node
        link = spec.intra_node
        if link.link == "nvlink" and g > 1:
            # A mesh: a GPU can only use the bundles that reach other GPUs in use.
            intra = min(
                sum(link.pair_bandwidth(a, b, spec.gpus_per_node) for b in range(g) if b != a) for a in range(g)
            )
        else:
            intra = link.bandwidth.value
        net = spec.inter_node
        # Everything that can leave one node: all NICs, but no more than the used GPUs'
        # PCIe links can feed them (GPUDirect RDMA goes GPU -> PCIe -> NIC).
        node_net = min(net.node_bandwidth, g * link.pcie_bandwidth.value) if net else math.inf
        inter = node_net / g if net else intra
        world = intra if self.nodes == 1 else min(intra, node_net)

        eff = spec.efficiency
        e_intra = eff.collective_bandwidth_intra.value
        e_inter = eff.collective_bandwidth_inter.value if eff.collective_bandwidth_inter else e_intra
        a_intra = eff.collective_latency_intra.value
        a_inter = eff.collective_latency_inter.value if eff.collective_latency_inter else a_intra
        bus_world = intra * e_intra if self.nodes == 1 else min(intra * e_intra, node_net * e_inter)

        lat_intra = link.latency.value
        # Across nodes a transfer crosses PCIe to the NIC, the network, and PCIe again
        # (topology.build_topology puts half of each on each edge of the route).
        lat_inter = net.latency.value + 2 * link.pcie_latency.value if net else lat_intra

        put = object.__setattr__
        put(self, "_intra", intra)
        put(self, "_node_net", node_net)
        put(self, "_bw", {"intra": intra, "inter": inter, "world": world})
        put(
            self,
            "_bus",
            {"intra": intra * e_intra, "inter": inter * e_inter if net else intra * e_intra, "world": bus_world},
        )
        put(
            self,
            "_alpha",
            {"intra": a_intra, "inter": a_inter, "world": a_intra if self.nodes == 1 else max(a_intra, a_inter)},
        )
        put(
            self,
            "_link_lat",
            {
                "intra": lat_intra,
                "inter": lat_inter,
                "world": lat_intra if self.nodes == 1 else max(lat_intra, lat_inter),
            },
        )

    # ------------------------------------------------------------------ placement

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def world_size(self) -> int:
        return self.gpus

    @property
    def ranks_per_node(self) -> int:
        return self.gpus_per_node

    def _check_rank(self, rank: int) -> None:
        if not (isinstance(rank, int) and 0 <= rank < self.gpus):
            raise SimdlError(f"rank {rank!r} out of range; accepted: 0..{self.gpus - 1}")

    def node_of(self, rank: int) -> int:
        self._check_rank(rank)
        return rank // self.gpus_per_node

    def local_rank(self, rank: int) -> int:
        self._check_rank(rank)
        return rank % self.gpus_per_node

    def ranks_on_node(self, node: int) -> range:
        if not (isinstance(node, int) and 0 <= node < self.nodes):
            raise SimdlError(f"node {node!r} out of range; accepted: 0..{self.nodes - 1}")
        return range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)

    def group_size(self, group: str) -> int:
        _check_group(group)
        return {"world": self.gpus, "intra": self.gpus_per_node, "inter": self.nodes}[group]

    def group_ranks(self, group: str, rank: int = 0) -> tuple[int, ...]:
        """The ranks in ``rank``'s group: all, its node's, or its peers with the same local rank."""
        _check_group(group)
        self._check_rank(rank)
        if group == "world":
            return tuple(range(self.gpus))
        if group == "intra":
            return tuple(self.ranks_on_node(self.node_of(rank)))
        local = self.local_rank(rank)
        return tuple(n * self.gpus_per_node + local for n in range(self.nodes))

    # ------------------------------------------------------------------ communication

    def group_bandwidth(self, group: str) -> float:
        """Raw bottleneck per-rank rate (bytes/s per direction) of a ring over ``group``
        (see the module docstring for the model)."""
        _check_group(group)
        return self._bw[group]

    def group_bus_bandwidth(self, group: str) -> float:
        """``group_bandwidth`` times the preset's collective efficiency: the bus bandwidth an
        nccl-tests run would report for large messages."""
        _check_group(group)
        return self._bus[group]

    def group_latency(self, group: str) -> float:
        """Per-ring-step latency alpha (s) of a collective over ``group``; a ring crossing nodes
        is paced by its slowest hop."""
        _check_group(group)
        return self._alpha[group]

    def link_latency(self, group: str) -> float:
        """Physical one-way latency (s) of a transfer between two ranks of ``group`` (the sum
        of edge latencies on the topology graph's route)."""
        _check_group(group)
        return self._link_lat[group]

    @property
    def collective_overhead(self) -> float:
        """Fixed seconds per collective call (a 0-byte collective); falls back to the kernel
        launch overhead when the preset gives none."""
        eff = self.spec.efficiency
        return (eff.collective_overhead or eff.kernel_launch).value

    @property
    def node_network_bandwidth(self) -> float:
        """Bytes/s per direction that can leave one node (inf for a single-node-only preset)."""
        return self._node_net

    # ------------------------------------------------------------------ parameter servers

    def _ps(self):
        ps = self.spec.ps_servers
        if ps is None:
            raise SimdlError(
                f"cluster preset {self.spec.name!r} has no ps_servers section; "
                f"presets with parameter servers: {', '.join(_ps_presets())}"
            )
        return ps

    def ps_bandwidth(self) -> float:
        """Per-worker bytes/s to (or from) the parameter servers when all workers transfer at
        once, parameters sharded evenly over the servers: the worker side shares its node's
        NICs (or, for a PS on the same host, the local fabric), the server side shares the
        servers' NICs among all workers."""
        ps = self._ps()
        if self.spec.inter_node is not None:
            worker = self._node_net / self.gpus_per_node
        else:
            link = self.spec.intra_node
            worker = link.bandwidth.value if link.link in ("pcie", "shm") else link.pcie_bandwidth.value
        server = ps.count * ps.nic_bandwidth.value / self.gpus
        return min(worker, server)

    def ps_latency(self) -> float:
        """One-way worker-to-server latency (s)."""
        return self._ps().latency.value

    def ps_update_bandwidth(self) -> float:
        """Host-memory bytes/s one server streams its optimizer update at."""
        return self._ps().update_bandwidth.value

    # ------------------------------------------------------------------ per-rank device

    @property
    def device_share(self) -> float:
        """Fraction of the device one rank gets: 1, or 1/ranks_per_node when the ranks of a
        node share one device (``shared_device: true``, the cpu-local preset)."""
        return 1.0 / self.gpus_per_node if self.spec.shared_device else 1.0

    def per_rank_peak_flops(self, precision: str) -> float:
        return self.spec.gpu.peak(precision) * self.device_share

    @property
    def per_rank_memory_bandwidth(self) -> float:
        return self.spec.gpu.memory_bandwidth.value * self.device_share

    @property
    def per_rank_memory_bytes(self) -> float:
        return self.spec.gpu.memory_bytes.value * self.device_share

    def describe(self) -> str:
        return (
            f"{self.spec.name}: {self.gpus} x {self.spec.gpu.name} on {self.nodes} node"
            f"{'s' if self.nodes > 1 else ''} ({self.gpus_per_node} per node)"
        )


def _ps_presets() -> list[str]:
    from .shapes import preset_shapes  # the presets' shapes without parsing every preset

    return [s.name for s in preset_shapes() if s.ps_servers]


def _multi_node_presets(spec: ClusterSpec, nodes_needed: int) -> list[str]:
    """Presets that can hold ``nodes_needed`` nodes: same GPU type first, then the same family
    (the part of the name before the first '-', e.g. 'A100'), then the rest."""
    from .shapes import preset_shapes

    family = spec.gpu.name.split("-")[0]
    found = []
    for s in preset_shapes():
        if not s.inter_node or (s.max_nodes is not None and s.max_nodes < nodes_needed):
            continue
        found.append((s.gpu_name != spec.gpu.name, s.gpu_name.split("-")[0] != family, s.max_nodes is not None, s.name))
    return [n for *_, n in sorted(found)]


def allocate(spec: ClusterSpec | str, gpus: int | None = None, nodes: int | None = None) -> Cluster:
    """Place ``gpus`` ranks on ``spec``: ``nodes = ceil(gpus / gpus_per_node)`` unless given.

    ``gpus=None`` means the preset's default size (``nodes x gpus_per_node``). Every node runs
    the same number of ranks. Errors are one-line :class:`SimdlError` messages.
    """
    if isinstance(spec, str):
        spec = load_cluster(spec)
    per = spec.gpus_per_node
    if gpus is None:
        gpus = spec.default_gpus if nodes is None else nodes * per
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise SimdlError(f"--gpus {gpus!r}: must be an integer >= 1")
    if gpus < 1:
        raise SimdlError(f"--gpus {gpus}: must be >= 1")
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int)):
        raise SimdlError(f"--nodes {nodes!r}: must be an integer >= 1")
    if nodes is not None and nodes < 1:
        raise SimdlError(f"--nodes {nodes}: must be >= 1")
    given = nodes is not None
    if nodes is None:
        nodes = -(-gpus // per)
    asked = f"--gpus {gpus} --nodes {nodes}" if given else f"--gpus {gpus}"
    if nodes > 1 and spec.inter_node is None:
        others = _multi_node_presets(spec, nodes)
        raise SimdlError(
            f"{asked}: needs {nodes} nodes but preset {spec.name!r} is single-node "
            f"({per} GPUs, no inter_node network); use a multi-node preset such as "
            f"{', '.join(repr(o) for o in others[:3]) or 'one with an inter_node section'}"
        )
    if spec.max_nodes is not None and nodes > spec.max_nodes:
        others = _multi_node_presets(spec, nodes)
        raise SimdlError(
            f"{asked}: needs {nodes} nodes of {per} GPUs but preset {spec.name!r} "
            f"allows at most {spec.max_nodes} node{'s' if spec.max_nodes > 1 else ''} "
            f"({spec.max_nodes * per} GPUs); use a multi-node preset such as "
            f"{', '.join(repr(o) for o in others[:3]) or 'one with max_nodes: null'}"
        )
    if gpus % nodes:
        if given:
            raise SimdlError(
                f"--gpus {gpus} --nodes {nodes}: gpus must be a multiple of nodes "
                "(every node runs the same number of ranks)"
            )
        down, up = gpus - gpus % nodes, gpus - gpus % nodes + nodes
        raise SimdlError(
            f"--gpus {gpus} on preset {spec.name!r} ({per} GPUs per node) needs {nodes} nodes "
            f"but does not split evenly over them; accepted: --gpus {down} or {up}, or give --nodes"
        )
    per_used = gpus // nodes
    if per_used > per:
        raise SimdlError(
            f"--gpus {gpus} --nodes {nodes}: {per_used} GPUs per node but preset {spec.name!r} "
            f"has {per} per node; accepted: --nodes >= {-(-gpus // per)}"
        )
    return Cluster(spec=spec, gpus=gpus, nodes=nodes, gpus_per_node=per_used)
