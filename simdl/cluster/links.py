"""The link sections of a cluster file: the intra-node fabric (``intra_node``, with an
NVLink ``mesh``), the inter-node network (``inter_node``) and the parameter-server nodes
(``ps_servers``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SimdlError
from ..provenance import Sourced, read
from .readers import _check_keys, _count, _put, _section, _sourced_count

#: Intra-node link types. ``nvlink``: direct GPU-GPU NVLink bundles (a mesh);
#: ``nvswitch``: every GPU has one port bundle to a non-blocking switch;
#: ``pcie``: GPUs talk through a PCIe switch; ``shm``: processes on one host.
LINK_TYPES = ("nvlink", "nvswitch", "pcie", "shm")


_INTRA_KEYS = ("link", "bandwidth_GB_per_s", "latency_us", "pcie_GB_per_s", "pcie_latency_us", "mesh")
_MESH_KEYS = ("per_link_GB_per_s", "links", "source")


@dataclass(frozen=True)
class Mesh:
    """Wiring of an NVLink mesh: bonded link counts between local GPU pairs."""

    per_link: Sourced  # bytes/s per direction of one NVLink
    links: tuple[tuple[int, int, int], ...]  # (local gpu a, local gpu b, number of links), a < b
    source: str

    def pair_links(self, a: int, b: int) -> int:
        lo, hi = min(a, b), max(a, b)
        for x, y, n in self.links:
            if (x, y) == (lo, hi):
                return n
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_link_GB_per_s": self.per_link.to_dict("per_link_GB_per_s"),
            "links": [list(t) for t in self.links],
            "source": self.source,
        }


@dataclass(frozen=True)
class Link:
    """The intra-node interconnect. ``bandwidth`` is per GPU per direction: the rate a
    ring step out of one GPU can use (for a mesh: the GPU's total NVLink egress)."""

    link: str
    bandwidth: Sourced  # bytes/s
    latency: Sourced  # s, one GPU-to-GPU transfer inside the node
    pcie_bandwidth: Sourced  # bytes/s per direction of each GPU's PCIe link (to host and NICs)
    pcie_latency: Sourced  # s, GPU to NIC (or host) across PCIe
    mesh: Mesh | None = None  # only for link == 'nvlink'; None = fully connected, equal shares

    def pair_bandwidth(self, a: int, b: int, gpus_per_node: int) -> float:
        """Direct bandwidth between local GPUs ``a`` and ``b`` (mesh only; else the port rate)."""
        if self.link != "nvlink":
            return self.bandwidth.value
        if self.mesh is None:
            return self.bandwidth.value / max(1, gpus_per_node - 1)
        return self.mesh.pair_links(a, b) * self.mesh.per_link.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"link": self.link}
        _put(out, "bandwidth_GB_per_s", self.bandwidth)
        _put(out, "latency_us", self.latency)
        if self.link not in ("pcie", "shm"):
            _put(out, "pcie_GB_per_s", self.pcie_bandwidth)
            _put(out, "pcie_latency_us", self.pcie_latency)
        if self.mesh is not None:
            out["mesh"] = self.mesh.to_dict()
        return out


_INTER_KEYS = ("nic_Gb_per_s", "nics_per_node", "latency_us")


@dataclass(frozen=True)
class Network:
    """The inter-node network as seen from one node (the ``inter_node`` section)."""

    nic_bandwidth: Sourced  # bytes/s per NIC per direction
    nics_per_node: Sourced  # count
    latency: Sourced  # s, NIC to NIC through the network

    @property
    def nics(self) -> int:
        return int(self.nics_per_node.value)

    @property
    def node_bandwidth(self) -> float:
        """All NICs of one node together, bytes/s per direction."""
        return self.nic_bandwidth.value * self.nics

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "nic_Gb_per_s", self.nic_bandwidth)
        _put(out, "nics_per_node", self.nics_per_node)
        _put(out, "latency_us", self.latency)
        return out


_PS_KEYS = ("count", "nic_Gb_per_s", "latency_us", "cpu_cores", "update_bandwidth_GB_per_s",
            "worker_link_Gb_per_s", "receive_fault_ns_per_byte", "response_copy_ns_per_byte")


@dataclass(frozen=True)
class PSServers:
    """CPU parameter-server nodes (one NIC each)."""

    count: int
    nic_bandwidth: Sourced  # bytes/s per direction
    latency: Sourced  # s, one-way worker-to-server latency
    cpu_cores: Sourced
    update_bandwidth: Sourced  # bytes/s of host memory traffic the optimizer update streams through
    # Optional, from simdl calibrate's RPC measurements (calibration/ps.py, fitted by
    # simdl.calibrate.ps.PSFit; used by simdl.analytic.engine.ps_transfer_times). None: the
    # worker side is its node's link and a transfer has no costs besides the link's.
    worker_link: Sourced | None = None  # bytes/s one worker's push or pull reaches alone
    receive_fault: Sourced | None = None  # s per byte of a message received above the mmap threshold
    response_copy: Sourced | None = None  # s per byte the server copies a pull's answer

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        _put(out, "nic_Gb_per_s", self.nic_bandwidth)
        _put(out, "latency_us", self.latency)
        _put(out, "cpu_cores", self.cpu_cores)
        _put(out, "update_bandwidth_GB_per_s", self.update_bandwidth)
        for key, v in (("worker_link_Gb_per_s", self.worker_link), ("receive_fault_ns_per_byte", self.receive_fault),
                       ("response_copy_ns_per_byte", self.response_copy)):
            if v is not None:
                _put(out, key, v)
        return out


def _parse_mesh(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Mesh:
    _check_keys(raw, _MESH_KEYS, where)
    per_link = read(raw, "per_link_GB_per_s", where=where, strictly_positive=True)
    links_raw = raw.get("links")
    if not isinstance(links_raw, list) or not links_raw:
        raise SimdlError(f"{where}: links must be a non-empty list of [gpu_a, gpu_b, n_links], got {links_raw!r}")
    seen: set[tuple[int, int]] = set()
    links: list[tuple[int, int, int]] = []
    for item in links_raw:
        ok = (isinstance(item, list) and len(item) == 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in item))
        if not ok:
            raise SimdlError(f"{where}: links entry {item!r}; accepted: [gpu_a, gpu_b, n_links] integers")
        a, b, n = item
        if not (0 <= a < gpus_per_node and 0 <= b < gpus_per_node) or a == b:
            raise SimdlError(f"{where}: links entry {item!r}: GPUs must be distinct and in 0..{gpus_per_node - 1}")
        if n < 1:
            raise SimdlError(f"{where}: links entry {item!r}: n_links must be >= 1")
        pair = (min(a, b), max(a, b))
        if pair in seen:
            raise SimdlError(f"{where}: links entry {item!r}: pair {pair} listed twice")
        seen.add(pair)
        links.append((pair[0], pair[1], n))
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SimdlError(f"{where}: source must say where the wiring comes from")
    return Mesh(per_link, tuple(sorted(links)), source.strip())


def _parse_intra(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Link:
    _check_keys(raw, _INTRA_KEYS, where)
    link = raw.get("link")
    if link not in LINK_TYPES:
        raise SimdlError(f"{where}: link = {link!r}; accepted: {', '.join(LINK_TYPES)}")
    bandwidth = read(raw, "bandwidth_GB_per_s", where=where, strictly_positive=True)
    latency = read(raw, "latency_us", where=where, minimum=0.0)
    if link in ("pcie", "shm"):
        # The fabric is PCIe (or host memory) itself: its bandwidth and latency are the PCIe figures.
        for key in ("pcie_GB_per_s", "pcie_latency_us"):
            if key in raw:
                raise SimdlError(f"{where}: {key} is not accepted with link: {link} (the fabric is the PCIe "
                                 "link itself); give bandwidth_GB_per_s and latency_us only")
        pcie, pcie_latency = bandwidth, latency
    else:
        for key in ("pcie_GB_per_s", "pcie_latency_us"):
            if key not in raw:
                raise SimdlError(f"{where}: missing key {key!r} (each GPU's PCIe link to host and NICs; "
                                 f"required for link {link})")
        pcie = read(raw, "pcie_GB_per_s", where=where, strictly_positive=True)
        pcie_latency = read(raw, "pcie_latency_us", where=where, minimum=0.0)
    mesh = None
    if "mesh" in raw:
        if link != "nvlink":
            raise SimdlError(f"{where}: mesh is only accepted with link: nvlink, not {link!r}")
        mesh = _parse_mesh(_section(raw, "mesh", where), f"{where}: mesh", gpus_per_node)
        # The declared per-GPU bandwidth must be what the wiring gives every GPU.
        for g in range(gpus_per_node):
            egress = sum(n for a, b, n in mesh.links if g in (a, b)) * mesh.per_link.value
            if not math.isclose(egress, bandwidth.value, rel_tol=0.01):
                raise SimdlError(
                    f"{where}: mesh gives GPU {g} {egress / 1e9:g} GB/s of NVLink but bandwidth_GB_per_s "
                    f"is {bandwidth.value / 1e9:g}; accepted: every GPU's links x per_link = bandwidth")
    return Link(link, bandwidth, latency, pcie, pcie_latency, mesh)


def _parse_inter(raw: Mapping[str, Any], where: str) -> Network:
    _check_keys(raw, _INTER_KEYS, where)
    return Network(
        nic_bandwidth=read(raw, "nic_Gb_per_s", where=where, strictly_positive=True),
        nics_per_node=_sourced_count(raw, "nics_per_node", where),
        latency=read(raw, "latency_us", where=where, minimum=0.0),
    )


def _parse_ps(raw: Mapping[str, Any], where: str) -> PSServers:
    _check_keys(raw, _PS_KEYS, where)
    return PSServers(
        count=_count(raw, "count", where),
        nic_bandwidth=read(raw, "nic_Gb_per_s", where=where, strictly_positive=True),
        latency=read(raw, "latency_us", where=where, minimum=0.0),
        cpu_cores=_sourced_count(raw, "cpu_cores", where),
        update_bandwidth=read(raw, "update_bandwidth_GB_per_s", where=where, strictly_positive=True),
        worker_link=(read(raw, "worker_link_Gb_per_s", where=where, strictly_positive=True)
                     if "worker_link_Gb_per_s" in raw else None),
        receive_fault=read(raw, "receive_fault_ns_per_byte", where=where) if "receive_fault_ns_per_byte" in raw else None,
        response_copy=read(raw, "response_copy_ns_per_byte", where=where) if "response_copy_ns_per_byte" in raw else None,
    )
