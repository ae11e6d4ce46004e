"""The link sections of a cluster file: the intra-node fabric (``intra_node``, with an
NVLink ``mesh``), the inter-node network (``inter_node``) and the parameter-server nodes
(``ps_servers``), each declared once (:mod:`.declare`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SimdlError
from ..provenance import Sourced
from .declare import COUNT, NONNEG, POSITIVE, Choice, Custom, Int, Section, Text, dump, knob, parse

#: Intra-node link types. ``nvlink``: direct GPU-GPU NVLink bundles (a mesh);
#: ``nvswitch``: every GPU has one port bundle to a non-blocking switch;
#: ``pcie``: GPUs talk through a PCIe switch; ``shm``: processes on one host.
LINK_TYPES = ("nvlink", "nvswitch", "pcie", "shm")
# Fabrics that are the PCIe link (or host memory) itself: no separate pcie_* keys.
_PCIE_FABRICS = ("pcie", "shm")


def _mesh_links(value: Any, where: str, ctx: Mapping[str, Any]) -> tuple[tuple[int, int, int], ...]:
    gpus_per_node = ctx["gpus_per_node"]
    if not isinstance(value, list) or not value:
        raise SimdlError(f"{where} must be a non-empty list of [gpu_a, gpu_b, n_links], got {value!r}")
    seen: set[tuple[int, int]] = set()
    links: list[tuple[int, int, int]] = []
    for item in value:
        ok = (
            isinstance(item, list)
            and len(item) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        )
        if not ok:
            raise SimdlError(f"{where}: entry {item!r}; accepted: [gpu_a, gpu_b, n_links] integers")
        a, b, n = item
        if not (0 <= a < gpus_per_node and 0 <= b < gpus_per_node) or a == b:
            raise SimdlError(f"{where}: entry {item!r}: GPUs must be distinct and in 0..{gpus_per_node - 1}")
        if n < 1:
            raise SimdlError(f"{where}: entry {item!r}: n_links must be >= 1")
        pair = (min(a, b), max(a, b))
        if pair in seen:
            raise SimdlError(f"{where}: entry {item!r}: pair {pair} listed twice")
        seen.add(pair)
        links.append((pair[0], pair[1], n))
    return tuple(sorted(links))


_LINKS_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": {"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "integer", "minimum": 0}},
}


@dataclass(frozen=True)
class Mesh:
    """Wiring of an NVLink mesh: bonded link counts between local GPU pairs."""

    per_link: Sourced = knob("per_link_GB_per_s", POSITIVE, "bandwidth per direction of one NVLink", required=True)
    links: tuple[tuple[int, int, int], ...] = knob(
        "links",
        Custom(_mesh_links, lambda v, owner: [list(t) for t in v], _LINKS_SCHEMA),
        "[local gpu a, local gpu b, number of links] for each wired pair",
        required=True,
    )
    source: str = knob("source", Text(nonempty=True), "where the wiring comes from", required=True)

    def pair_links(self, a: int, b: int) -> int:
        lo, hi = min(a, b), max(a, b)
        for x, y, n in self.links:
            if (x, y) == (lo, hi):
                return n
        return 0

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


def _needs_pcie(ctx: Mapping[str, Any]) -> bool:
    return ctx.get("link") not in _PCIE_FABRICS


@dataclass(frozen=True)
class Link:
    """The intra-node interconnect. ``bandwidth`` is per GPU per direction: the rate a
    ring step out of one GPU can use (for a mesh: the GPU's total NVLink egress)."""

    link: str = knob(
        "link",
        Choice(LINK_TYPES),
        """nvlink: direct GPU-GPU NVLink bundles (a mesh);
                     nvswitch: one port bundle per GPU to a non-blocking switch; pcie: GPUs talk
                     through a PCIe switch; shm: processes on one host""",
        required=True,
    )
    bandwidth: Sourced = knob("bandwidth_GB_per_s", POSITIVE, "per GPU per direction", required=True)
    latency: Sourced = knob("latency_us", NONNEG, "one GPU-to-GPU transfer inside the node", required=True)
    # Each GPU's PCIe link to host and NICs; for a pcie or shm fabric the fabric's own figures.
    pcie_bandwidth: Sourced = knob(
        "pcie_GB_per_s",
        POSITIVE,
        """each GPU's PCIe link to host and NICs,
                                   per direction (not given with link pcie or shm: the fabric's own)""",
        required=_needs_pcie,
    )
    pcie_latency: Sourced = knob(
        "pcie_latency_us",
        NONNEG,
        """GPU to NIC (or host) across PCIe (not given
                                 with link pcie or shm)""",
        required=_needs_pcie,
    )
    mesh: Mesh | None = knob(
        "mesh",
        Section(Mesh, lambda ctx: {"gpus_per_node": ctx["gpus_per_node"]}),
        """link nvlink only: the wiring; absent = fully connected, equal shares""",
    )

    @staticmethod
    def _finish(values: dict[str, Any], raw: Mapping[str, Any], where: str, ctx: Mapping[str, Any]) -> dict[str, Any]:
        link = values["link"]
        if link in _PCIE_FABRICS:
            for key in ("pcie_GB_per_s", "pcie_latency_us"):
                if key in raw:
                    raise SimdlError(
                        f"{where}: {key} is not accepted with link: {link} (the fabric is the PCIe "
                        "link itself); give bandwidth_GB_per_s and latency_us only"
                    )
            values = {**values, "pcie_bandwidth": values["bandwidth"], "pcie_latency": values["latency"]}
        mesh, bandwidth = values.get("mesh"), values["bandwidth"]
        if mesh is not None and link != "nvlink":
            raise SimdlError(f"{where}: mesh is only accepted with link: nvlink, not {link!r}")
        # The declared per-GPU bandwidth must be what the wiring gives every GPU.
        wiring, per_link = (mesh.links, mesh.per_link.value) if mesh is not None else ((), 0.0)
        for g in range(ctx["gpus_per_node"]) if mesh is not None else ():
            egress = sum(n for a, b, n in wiring if g in (a, b)) * per_link
            if not math.isclose(egress, bandwidth.value, rel_tol=0.01):
                raise SimdlError(
                    f"{where}: mesh gives GPU {g} {egress / 1e9:g} GB/s of NVLink but bandwidth_GB_per_s "
                    f"is {bandwidth.value / 1e9:g}; accepted: every GPU's links x per_link = bandwidth"
                )
        return values

    def _dump_fix(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.link in _PCIE_FABRICS:
            out.pop("pcie_GB_per_s", None)
            out.pop("pcie_latency_us", None)
        return out

    def pair_bandwidth(self, a: int, b: int, gpus_per_node: int) -> float:
        """Direct bandwidth between local GPUs ``a`` and ``b`` (mesh only; else the port rate)."""
        if self.link != "nvlink":
            return self.bandwidth.value
        if self.mesh is None:
            return self.bandwidth.value / max(1, gpus_per_node - 1)
        return self.mesh.pair_links(a, b) * self.mesh.per_link.value

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


@dataclass(frozen=True)
class Network:
    """The inter-node network as seen from one node (the ``inter_node`` section)."""

    nic_bandwidth: Sourced = knob("nic_Gb_per_s", POSITIVE, "per NIC per direction", required=True)
    nics_per_node: Sourced = knob("nics_per_node", COUNT, "NICs of one node", required=True)
    latency: Sourced = knob("latency_us", NONNEG, "NIC to NIC through the network", required=True)

    @property
    def nics(self) -> int:
        return int(self.nics_per_node.value)

    @property
    def node_bandwidth(self) -> float:
        """All NICs of one node together, bytes/s per direction."""
        return self.nic_bandwidth.value * self.nics

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


@dataclass(frozen=True)
class PSServers:
    """CPU parameter-server nodes (one NIC each)."""

    count: int = knob("count", Int(1), "server nodes", required=True)
    nic_bandwidth: Sourced = knob("nic_Gb_per_s", POSITIVE, "per server NIC per direction", required=True)
    latency: Sourced = knob("latency_us", NONNEG, "one-way worker-to-server latency", required=True)
    cpu_cores: Sourced = knob("cpu_cores", COUNT, "cores of one server", required=True)
    update_bandwidth: Sourced = knob(
        "update_bandwidth_GB_per_s",
        POSITIVE,
        """host memory traffic the
                                     optimizer update streams through""",
        required=True,
    )
    # Optional, from simdl calibrate's RPC measurements (simdl.calibrate.ps.PSFit; used by
    # simdl.costs.ps.ps_transfer_times). Absent: the worker side is its node's link and a
    # transfer has no costs besides the link's.
    worker_link: Sourced | None = knob(
        "worker_link_Gb_per_s",
        POSITIVE,
        """what one worker's push or pull
                                       reaches alone (calibrated)""",
    )
    receive_fault: Sourced | None = knob(
        "receive_fault_ns_per_byte",
        NONNEG,
        """per byte of a message received
                                         above the mmap threshold (calibrated)""",
    )
    response_copy: Sourced | None = knob(
        "response_copy_ns_per_byte",
        NONNEG,
        """per byte the server copies a
                                         pull's answer (calibrated)""",
    )

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


def _parse_mesh(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Mesh:
    return parse(Mesh, raw, where, {"gpus_per_node": gpus_per_node})


def _parse_intra(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Link:
    return parse(Link, raw, where, {"gpus_per_node": gpus_per_node})


def _parse_inter(raw: Mapping[str, Any], where: str) -> Network:
    return parse(Network, raw, where)


def _parse_ps(raw: Mapping[str, Any], where: str) -> PSServers:
    return parse(PSServers, raw, where)
