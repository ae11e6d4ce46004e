"""What-if clusters: a preset with a few numbers changed, built in memory (no file written).

``derive_cluster("dgx-a100", nic_Gb_per_s=100, nics_per_node=1)`` answers "what if each
DGX had one 100 Gb/s NIC instead of eight 200 Gb/s ones?". The result is an ordinary
:class:`~simdl.cluster.ClusterSpec` (``dataclasses.replace`` on the loaded preset), named
``dgx-a100[nic_Gb_per_s=100,nics_per_node=1]``, that :func:`simdl.predict` accepts as its
``cluster``. Every replaced number is marked ``kind: assumed`` with the override as its
source, so a result says where its numbers came from.

Keys are in the units of the preset files (the unit is in the key, as everywhere in simdl);
:data:`CLUSTER_KEYS` lists them with what each one changes.
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache
from typing import Any, Mapping

from ..cluster.spec import ClusterSpec, Network, load_cluster, load_gpu
from ..errors import SimdlError, unknown
from ..provenance import Sourced
from ..units import to_si

#: Cluster overrides a sweep accepts (``--set key=v1,v2``), with what each replaces.
CLUSTER_KEYS: dict[str, str] = {
    "intra_bandwidth_GB_per_s": "intra-node link rate per GPU per direction (NVLink/NVSwitch/PCIe port)",
    "intra_latency_us": "intra-node GPU-to-GPU latency",
    "pcie_GB_per_s": "each GPU's PCIe link to host and NICs (for PCIe presets: the intra-node link)",
    "nic_Gb_per_s": "line rate of each inter-node NIC (multi-node presets only)",
    "nics_per_node": "number of inter-node NICs per node (multi-node presets only)",
    "inter_latency_us": "NIC-to-NIC network latency (multi-node presets only)",
    "ps_nic_Gb_per_s": "line rate of each parameter-server node's NIC (presets with PS nodes only)",
    "gpu": "the GPU type (a shipped GPU name, `simdl clusters` lists the presets' GPUs)",
}


def _what(key: str, value: Any) -> str:
    return f"what-if override {key}={value:g}" if isinstance(value, (int, float)) else f"what-if override {key}={value}"


def _sourced(key: str, value: Any, unit: str | None, *, minimum_exclusive: bool = True) -> Sourced:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SimdlError(f"cluster override {key}={value!r}: accepted: a number")
    if not (value > 0 if minimum_exclusive else value >= 0):
        raise SimdlError(f"cluster override {key}={value!r}: accepted: a number {'>' if minimum_exclusive else '>='} 0")
    si = to_si(value, unit) if unit else float(value)
    return Sourced(si, "assumed", _what(key, value))


def _needs_network(spec: ClusterSpec, key: str) -> Network:
    """The cluster's inter-node network; a one-line error on a single-node cluster."""
    if spec.inter_node is None:
        raise SimdlError(
            f"cluster override {key}: cluster {spec.name!r} is single-node (no inter_node network); "
            "accepted on multi-node presets only"
        )
    return spec.inter_node


def _apply(spec: ClusterSpec, key: str, value: Any) -> ClusterSpec:
    rep = dataclasses.replace
    intra = spec.intra_node
    if key == "intra_bandwidth_GB_per_s":
        new = _sourced(key, value, "GB_per_s")
        changes: dict[str, Any] = {"bandwidth": new}
        if intra.link in ("pcie", "shm"):
            changes["pcie_bandwidth"] = new  # the fabric is the PCIe link itself (see spec._parse_intra)
        if intra.mesh is not None:
            # Keep the wiring, scale every NVLink so that each GPU's egress is the new rate.
            scale = new.value / intra.bandwidth.value
            per_link = Sourced(intra.mesh.per_link.value * scale, "assumed", _what(key, value))
            changes["mesh"] = rep(intra.mesh, per_link=per_link)
        return rep(spec, intra_node=rep(intra, **changes))
    if key == "intra_latency_us":
        new = _sourced(key, value, "us", minimum_exclusive=False)
        changes = {"latency": new}
        if intra.link in ("pcie", "shm"):
            changes["pcie_latency"] = new
        return rep(spec, intra_node=rep(intra, **changes))
    if key == "pcie_GB_per_s":
        new = _sourced(key, value, "GB_per_s")
        changes = {"pcie_bandwidth": new}
        if intra.link in ("pcie", "shm"):
            changes["bandwidth"] = new
        return rep(spec, intra_node=rep(intra, **changes))
    if key == "nic_Gb_per_s":
        net = _needs_network(spec, key)
        return rep(spec, inter_node=rep(net, nic_bandwidth=_sourced(key, value, "Gb_per_s")))
    if key == "nics_per_node":
        net = _needs_network(spec, key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            and not (isinstance(value, float) and value.is_integer())
        ):
            raise SimdlError(f"cluster override nics_per_node={value!r}: accepted: an integer >= 1")
        return rep(spec, inter_node=rep(net, nics_per_node=_sourced(key, int(value), None)))
    if key == "inter_latency_us":
        net = _needs_network(spec, key)
        return rep(spec, inter_node=rep(net, latency=_sourced(key, value, "us", minimum_exclusive=False)))
    if key == "ps_nic_Gb_per_s":
        if spec.ps_servers is None:
            raise SimdlError(
                f"cluster override {key}: cluster {spec.name!r} has no parameter-server nodes; "
                "accepted on presets with ps_servers only (e.g. a10g-ps)"
            )
        return rep(spec, ps_servers=rep(spec.ps_servers, nic_bandwidth=_sourced(key, value, "Gb_per_s")))
    if key == "gpu":
        return rep(spec, gpu=load_gpu(str(value)), gpu_ref=str(value))
    raise unknown("cluster override", key, CLUSTER_KEYS)


def _label(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def derive_cluster(cluster: str | os.PathLike | ClusterSpec, /, **overrides: Any) -> ClusterSpec:
    """``cluster`` (a preset name, a YAML path or a spec) with the numbers in ``overrides`` replaced.

    >>> derive_cluster("dgx-a100", nic_Gb_per_s=100).inter_node.nic_bandwidth.value
    12500000000.0
    """
    base = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    if not overrides:
        return base
    return _derive(base, tuple(sorted(overrides.items())))


@lru_cache(maxsize=1024)
def _derive(base: ClusterSpec, items: tuple[tuple[str, Any], ...]) -> ClusterSpec:
    # Memoised: a sweep asks for the same few variants thousands of times, and the engines'
    # own caches are keyed by the (hashable, frozen) spec, so the same object keeps them warm.
    spec = base
    for key, value in items:
        spec = _apply(spec, key, value)
    name = f"{base.name}[{','.join(f'{k}={_label(v)}' for k, v in items)}]"
    return dataclasses.replace(spec, name=name, description=f"{base.description} (what-if: {name})")


def split_cluster_overrides(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a flat parameter dict into (predict kwargs, cluster overrides)."""
    kwargs = {k: v for k, v in params.items() if k not in CLUSTER_KEYS}
    over = {k: v for k, v in params.items() if k in CLUSTER_KEYS and v is not None}
    return kwargs, over
