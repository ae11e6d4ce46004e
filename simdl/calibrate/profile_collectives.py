"""The collective sections of a calibrated profile: the intra-node link and collective
efficiencies from the collectives stage's joint alpha-beta fit, and the inter-node ones from
its one-rank-per-node groups."""

from __future__ import annotations

import copy
from typing import Any

from ..cluster.spec import load_cluster
from .profile_parts import _regimes_section, _subgroup_sections, _val


def collective_sections(
    coll: dict, base: dict, *, shared: bool, tag: str, prov: dict, ran: set, per_node: int, nodes: int
) -> tuple[dict[str, Any], dict[str, Any], dict | None]:
    """(intra_node, efficiency, joint fit or None): the base preset's sections with what the
    collectives stage fitted written over them."""
    scope = "intra" if "intra" in coll else "world"
    c = coll.get(scope, {})
    joint = c.get("joint")
    p2p = c.get("per_collective", {}).get("send_recv")
    intra = copy.deepcopy(base["intra_node"])
    eff = copy.deepcopy(base["efficiency"])
    if joint:
        lo, hi = joint["bytes_range"]
        q = joint["quality"]
        ho = joint.get("held_out", {})
        rng = f"{len(joint['collectives'])} collectives, each its own bus bandwidth, ({', '.join(joint['collectives'])}) x {lo}-{hi} B over {joint['group_size']} ranks"
        fitq = f"R2 {q['r2']}, R2(log) {q['r2_log']}, median |rel err| {q['median_abs_rel_error']}" + (
            f"; held-out sizes max |err| {ho['max_abs_rel_error']}" if ho else ""
        )
        bus = joint["bus_bandwidth_B_per_s"]
        if shared:
            # The 'link' of processes on one host is what send/recv achieves; the collective
            # efficiency is the joint fit's bus bandwidth relative to it (<= 1).
            link_bw = max(p2p["params"]["bus_bandwidth_GB_per_s"] * 1e9 if p2p else bus, bus)
            intra["link"] = "shm"
            for k in ("pcie_GB_per_s", "pcie_latency_us", "mesh"):
                intra.pop(k, None)
            intra["bandwidth_GB_per_s"] = _val(
                link_bw / 1e9,
                f"{tag}: {prov['backend']} send/recv bandwidth "
                f"(ring, every rank sends and receives), alpha-beta fit"
                + (f" R2 {p2p['quality']['r2']}" if p2p else ""),
            )
            if p2p and "ps" in ran:  # the ps stage's ping-pong replaces it below; without that stage, keep the base's
                intra["latency_us"] = _val(
                    p2p["params"]["alpha_us"] + p2p["params"]["overhead_us"],
                    f"{tag}: {prov['backend']} send/recv latency (alpha + overhead of the fit)",
                )
        else:
            link_bw = load_cluster(base["name"]).intra_node.bandwidth.value if "name" in base else bus
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
        eff["collective_latency_intra_us"] = _val(
            joint["alpha_s"] * 1e6, f"{tag}: joint fit alpha per ring step; {fitq}"
        )
        eff["collective_overhead_us"] = _val(joint["overhead_s"] * 1e6, f"{tag}: joint fit fixed cost per call; {fitq}")

    inter_fit = (coll.get("inter") or {}).get("joint")
    if inter_fit and base.get("inter_node") and "name" in base:
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
    return intra, eff, joint
