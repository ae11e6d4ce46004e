"""Where the parameter servers run: ``dedicated`` CPU nodes or ``colocated`` on worker nodes.

``dedicated``: the cluster file's ``ps_servers`` section, server nodes of their own, each
with its own NIC (study 1's setup). ``colocated``: a server process on a worker node, as
TensorFlow's ps tasks and many PyTorch RPC setups are run when no CPU nodes are booked;
it is priced on that node's host: its NICs (``inter_node``), its CPU cores (``host``), and
for a single-node cluster the GPUs' PCIe links to the host. Both engines read the servers
from ``spec.ps_servers``, so a colocated prediction is the same cluster with that section
derived from the worker node (:func:`colocated_spec`).

What the derived server leaves out is said in the prediction's notes: its node's own
workers reach it without crossing the NIC (counted as crossing: an upper bound), and the
server shares the node's cores with the workers' DataLoader processes.
"""

from __future__ import annotations

import dataclasses

from ..errors import SimdlError, unknown
from ..provenance import Sourced
from .spec import ClusterSpec, PSServers

PLACEMENTS = ("dedicated", "colocated")

# A PyTorch CPU optimizer step over fp32 parameters, gradients and states in host memory,
# where the cluster file has no server of its own to take it from: the a10g-ps preset's
# assumption (15 GB/s on a cloud VM), kept "assumed" so that the prediction lists it.
ASSUMED_UPDATE_BANDWIDTH = Sourced(
    15e9,
    "assumed",
    "assumed host-memory bandwidth a PyTorch CPU optimizer "
    "step streams at on a cloud VM (as a10g-ps assumes); replace by calibration",
)


def resolve_placement(spec: ClusterSpec, placement: str | None) -> tuple[str, str | None]:
    """(placement, why it was assumed or None when given). Dedicated where the cluster has
    server nodes; a cluster without them needs ``--ps-placement colocated`` said explicitly."""
    if placement is not None:
        if placement not in PLACEMENTS:
            raise unknown("PS placement", placement, PLACEMENTS)
        if placement == "dedicated" and spec.ps_servers is None:
            raise SimdlError(
                f"--ps-placement dedicated: cluster {spec.name!r} has no parameter-server nodes; "
                "accepted: --ps-placement colocated (a server on a worker node), or a cluster "
                "with a ps_servers section (e.g. a10g-ps)"
            )
        return placement, None
    if spec.ps_servers is None:
        raise SimdlError(
            f"cluster {spec.name!r} has no parameter-server nodes; accepted: --ps-placement "
            "colocated (a server on a worker node, priced on its NIC and host), or a cluster with "
            "a ps_servers section (e.g. a10g-ps)"
        )
    return "dedicated", f"the cluster's {spec.ps_servers.count} dedicated server node(s) (its ps_servers section)"


def colocated_spec(spec: ClusterSpec, nodes: int) -> ClusterSpec:
    """``spec`` whose servers are processes on its ``nodes`` worker nodes (one per node at most)."""
    link, net, host = spec.intra_node, spec.inter_node, spec.host
    if net is not None and nodes > 1:
        # Across the network: the node's NICs; one-way latency GPU -> PCIe -> NIC ... NIC -> host.
        bw = Sourced(
            net.node_bandwidth,
            net.nic_bandwidth.kind,
            f"the worker node's NICs ({net.nics} x inter_node.nic_Gb_per_s): {net.nic_bandwidth.source}",
        )
        lat = Sourced(
            net.latency.value + 2 * link.pcie_latency.value,
            net.latency.kind,
            "inter_node.latency_us plus the PCIe hop at each end (intra_node.pcie_latency_us)",
        )
    else:
        # On the workers' own host: no NIC; each GPU reaches host memory over its own PCIe link
        # (shared memory for CPU "devices"), so the server side is given their sum.
        per = link.bandwidth if link.link == "shm" else link.pcie_bandwidth
        bw = Sourced(
            per.value * spec.gpus_per_node,
            per.kind,
            f"{spec.gpus_per_node} x the worker's link to host memory: {per.source}",
        )
        lat = link.latency if link.link == "shm" else link.pcie_latency
    own = spec.ps_servers
    ps = PSServers(
        count=nodes,
        nic_bandwidth=bw,
        latency=lat,
        cpu_cores=host.cpu_cores,
        update_bandwidth=own.update_bandwidth if own is not None else ASSUMED_UPDATE_BANDWIDTH,
    )
    return dataclasses.replace(spec, ps_servers=ps)


def check_ps_servers(spec: ClusterSpec, servers: int, placement: str) -> None:
    """One shard per server node: ``--ps-servers`` at most the nodes that can hold a server."""
    if spec.ps_servers is None:
        raise SimdlError(f"--ps-servers {servers!r}: cluster {spec.name!r} has no ps_servers section")
    have = spec.ps_servers.count
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise SimdlError(f"--ps-servers {servers!r}: accepted: an integer from 1 to {have}")
    if servers > have:
        where = (
            f"cluster {spec.name!r} has {have} parameter-server node(s)"
            if placement == "dedicated"
            else f"the run has {have} worker node(s) to hold a colocated server each"
        )
        raise SimdlError(
            f"--ps-servers {servers}: {where}; accepted: 1 to {have} (one shard per server node, each with its own NIC)"
        )


def placement_notes(spec: ClusterSpec, placement: str) -> tuple[str, ...]:
    if placement != "colocated":
        return ()
    ps = spec.ps_servers
    if ps is None:
        return ()
    return (
        f"PS colocated on worker node(s): each server priced as a host with {ps.nic_bandwidth.value * 8 / 1e9:g} "
        f"Gb/s to the workers and {ps.cpu_cores.value:g} cores; its own node's workers are counted as crossing "
        "that link (an upper bound) and it shares the cores with their DataLoader workers",
    )


def place_servers(spec: ClusterSpec, gpus: int, nodes: int | None, placement: str | None, servers: int):
    """For :func:`simdl.predict`, with a strategy whose registry entry takes ``ps_placement``:
    (spec, allocation, placement, why assumed) with the servers placed and ``--ps-servers``
    checked against them, once, before either engine runs. Other strategies are refused a
    placement by the registry and never come here."""
    from .allocate import allocate

    alloc = allocate(spec, gpus, nodes)
    placement, why = resolve_placement(spec, placement)
    if placement == "colocated":
        spec = colocated_spec(spec, alloc.nodes)
        alloc = allocate(spec, gpus, nodes)
    check_ps_servers(spec, servers, placement)
    return spec, alloc, placement, why
