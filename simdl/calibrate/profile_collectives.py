"""The collective sections of a calibrated profile: the intra-node link and collective
efficiencies from the collectives stage's joint alpha-beta fit, the size-regime curves of the
node and of its subgroups, and the inter-node efficiencies from its one-rank-per-node groups."""

from __future__ import annotations

import copy
import re
from typing import Any

from ..cluster.spec import load_cluster
from . import fit as F
from .profile_parts import _val


def _regimes_section(per: dict, tag: str, prov: dict, link_GB_per_s: float) -> dict[str, Any] | None:
    """``efficiency.collective_regimes_intra`` from the per-collective regime fits (the
    collectives DDP and FSDP call), with their fit quality and held-out errors in the source."""
    fits = {c: v["regimes"] for c, v in sorted(per.items()) if c in F.PROFILE_COLLECTIVES and v.get("regimes")}
    if not fits:
        return None
    v0 = next(iter(fits.values()))
    n = next(iter(per.values()))["group_size"]
    lo = min(per[c]["bytes_range"][0] for c in fits)
    hi = max(per[c]["bytes_range"][1] for c in fits)
    quality = "; ".join(
        f"{c}: {r['n_regimes']} regime(s), fit median |err| {r['quality']['median_abs_rel_error']:.3f}"
        + (
            f", held-out sizes {r['held_out']['within_10pct']}/{r['held_out']['n']} within 10 % (median "
            f"{r['held_out']['median_abs_rel_error']:.3f}, max {r['held_out']['max_abs_rel_error']:.3f})"
            if r.get("held_out")
            else ""
        )
        for c, r in fits.items()
    )
    source = (
        f"{tag}: {prov['backend']} {', '.join(fits)} at {n} ranks, {lo}-{hi} B, {v0['passes']} pass(es); "
        "a size's time is the 25th percentile of its chunks; piecewise ring alpha-beta fitted per collective "
        "(simdl.calibrate.regimes: Huber NNLS per regime, regimes by dynamic programming, their number by "
        "cross-validation), regime looked up by bytes per ring step (m/n; m for broadcast), overhead = the "
        "same call on a one-rank group; "
        + (
            "all_gather and reduce_scatter step at the 32 MiB mmap threshold where a gap holds it (gloo's "
            "whole-message temporary, simdl.collectives.regimes); "
            if prov["backend"] == "gloo"
            else ""
        )
        + f"held-out check refits without every third size and the largest: {quality}"
    )
    return {
        "kind": "calibrated",
        "source": source,
        "link_GB_per_s": link_GB_per_s,
        "collectives": {
            c: {"overhead_us": r["params"]["overhead_us"], "regimes": r["params"]["regimes"]} for c, r in fits.items()
        },
    }


def _subgroup_sections(coll: dict, tag: str, prov: dict, link_GB_per_s: float) -> dict[str, Any]:
    """``efficiency.collective_regimes_subgroups``: the regime curves of the calibration's
    ``sub<d>`` scopes (groups of d consecutive ranks of a node, all of the node's groups
    calling at once: calibration/collectives.py), by group size."""
    out: dict[str, Any] = {}
    for scope in sorted(coll, key=lambda sc: (len(sc), sc)):
        m = re.fullmatch(r"sub(\d+)", scope)
        if not m:
            continue
        section = _regimes_section(coll[scope].get("per_collective", {}), tag, prov, link_GB_per_s)
        if section:
            d = int(m.group(1))
            groups = int(prov["ranks_per_node"] or d) // d
            section["source"] = (
                f"groups of {d} consecutive ranks, the node's {groups} groups calling at once; " + section["source"]
            )
            out[str(d)] = section
    return out


def collective_sections(
    coll: dict, base: dict, *, shared: bool, tag: str, prov: dict, ran: set, per_node: int, nodes: int
) -> tuple[dict[str, Any], dict[str, Any], dict | None]:
    """(intra_node, efficiency, joint fit or None): the base preset's sections with what the
    collectives stage fitted written over them."""
    scope = "intra" if "intra" in coll else "world"
    c = coll.get(scope, {})
    joint = c.get("joint")
    intra = copy.deepcopy(base["intra_node"])
    eff = copy.deepcopy(base["efficiency"])
    if joint:
        bus = joint["bus_bandwidth_B_per_s"]
        if shared:
            link_bw = _shared_link(intra, c.get("per_collective", {}).get("send_recv"), bus, tag, prov, ran)
        else:
            link_bw = load_cluster(base["name"]).intra_node.bandwidth.value if "name" in base else bus
        _intra_efficiency(eff, coll, c, joint, link_bw, tag, prov)
    _inter_efficiency(eff, coll, base, tag, per_node, nodes)
    return intra, eff, joint


def _shared_link(intra: dict, p2p: dict | None, bus: float, tag: str, prov: dict, ran: set) -> float:
    """The 'link' of processes on one host, written into ``intra``: what send/recv achieves
    (at least the joint fit's bus bandwidth, so that the collective efficiency stays <= 1)."""
    link_bw = max(p2p["params"]["bus_bandwidth_GB_per_s"] * 1e9 if p2p else bus, bus)
    intra["link"] = "shm"
    for k in ("pcie_GB_per_s", "pcie_latency_us", "mesh"):
        intra.pop(k, None)
    intra["bandwidth_GB_per_s"] = _val(
        link_bw / 1e9,
        f"{tag}: {prov['backend']} send/recv bandwidth "
        f"(ring, every rank sends and receives), alpha-beta fit" + (f" R2 {p2p['quality']['r2']}" if p2p else ""),
    )
    if p2p and "ps" in ran:  # the ps stage's ping-pong replaces it below; without that stage, keep the base's
        intra["latency_us"] = _val(
            p2p["params"]["alpha_us"] + p2p["params"]["overhead_us"],
            f"{tag}: {prov['backend']} send/recv latency (alpha + overhead of the fit)",
        )
    return link_bw


def _intra_efficiency(eff: dict, coll: dict, c: dict, joint: dict, link_bw: float, tag: str, prov: dict) -> None:
    """The intra-node collective efficiencies in ``eff``: the joint fit's bus bandwidth over the
    link, its per-collective factors, latency and overhead, and the size-regime curves."""
    lo, hi = joint["bytes_range"]
    q = joint["quality"]
    ho = joint.get("held_out", {})
    rng = f"{len(joint['collectives'])} collectives, each its own bus bandwidth, ({', '.join(joint['collectives'])}) x {lo}-{hi} B over {joint['group_size']} ranks"
    fitq = f"R2 {q['r2']}, R2(log) {q['r2_log']}, median |rel err| {q['median_abs_rel_error']}" + (
        f"; held-out sizes max |err| {ho['max_abs_rel_error']}" if ho else ""
    )
    bus = joint["bus_bandwidth_B_per_s"]
    e = min(bus / link_bw, 1.0)
    regimes = _regimes_section(c.get("per_collective", {}), tag, prov, float(f"{link_bw / 1e9:.4g}"))
    covered = sorted(regimes["collectives"]) if regimes else []
    note = (
        f"; the collectives with size regimes ({', '.join(covered)}) are priced by "
        "collective_regimes_intra instead, this line remains the simulator's base rate"
        if covered
        else ""
    )
    eff["collective_bandwidth_intra"] = _val(
        e,
        f"{tag}: joint alpha-beta fit of {rng}: all_reduce bus bandwidth "
        f"{bus / 1e9:.4g} GB/s / link {link_bw / 1e9:.4g} GB/s; {fitq}{note}",
    )
    for cname, f in sorted(joint["bandwidth_factors"].items()):
        eff.pop(f"collective_bandwidth_factor_{cname}", None)
        if cname != "all_reduce" and cname not in covered:
            eff[f"collective_bandwidth_factor_{cname}"] = _val(
                f, f"{tag}: {cname} bus bandwidth relative to all_reduce's in the joint fit ({rng}); {fitq}"
            )
    eff.pop("collective_regimes_intra", None)
    if regimes:
        eff["collective_regimes_intra"] = regimes
    eff.pop("collective_regimes_subgroups", None)
    subgroups = _subgroup_sections(coll, tag, prov, float(f"{link_bw / 1e9:.4g}"))
    if subgroups:
        eff["collective_regimes_subgroups"] = subgroups
    eff["collective_latency_intra_us"] = _val(joint["alpha_s"] * 1e6, f"{tag}: joint fit alpha per ring step; {fitq}")
    eff["collective_overhead_us"] = _val(joint["overhead_s"] * 1e6, f"{tag}: joint fit fixed cost per call; {fitq}")


def _inter_efficiency(eff: dict, coll: dict, base: dict, tag: str, per_node: int, nodes: int) -> None:
    """The inter-node collective efficiency and latency in ``eff``, from the one-rank-per-node
    groups' joint fit, where there are several nodes and the base preset has a network."""
    inter_fit = (coll.get("inter") or {}).get("joint")
    if not (inter_fit and base.get("inter_node") and "name" in base):
        return
    # Several nodes: the per-rank raw rate of an 'inter' group on the base preset's network
    # (simdl.cluster.allocate), and the fitted bus bandwidth over it. Not exercised here
    # (a single 2-core machine; calibration/README.md, "Multi-node").
    from ..cluster import allocate

    raw = allocate(load_cluster(base["name"]), per_node * nodes, nodes).group_bandwidth("inter")
    q = inter_fit["quality"]
    src = (
        f"{tag}: alpha-beta fit of one-rank-per-node groups ({', '.join(inter_fit['collectives'])}, "
        f"{inter_fit['bytes_range'][0]}-{inter_fit['bytes_range'][1]} B); R2 {q['r2']}"
    )
    eff["collective_bandwidth_inter"] = _val(
        min(inter_fit["bus_bandwidth_B_per_s"] / raw, 1.0),
        f"{src}; bus / raw {raw / 1e9:.4g} GB/s of the base preset's NICs",
    )
    eff["collective_latency_inter_us"] = _val(inter_fit["alpha_s"] * 1e6, src)
