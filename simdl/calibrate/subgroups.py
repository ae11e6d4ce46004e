"""Add the curves of groups smaller than a node to a profile calibrated before they existed.

``python -m simdl.calibrate.subgroups STAGE_DIR --profile PROFILE.yaml [-o OUT.yaml]``

STAGE_DIR is a collectives stage run on the profile's node size with sub-node groups
(``torchrun --nproc-per-node 4 calibration/collectives.py --out STAGE_DIR``: the ``world``
and ``sub<d>`` scopes). A full ``simdl calibrate`` fits the ``sub<d>`` curves as measured
(:func:`simdl.calibrate.profile._subgroup_sections`), beside the node curves of the same
run. Here the node curves are the profile's, measured on another day, and a shared host's
speed drifts between days (one VM's collectives at 4 ranks were 12-39 % slower two days
later, lab/CAMPAIGN.md, "Curves for groups smaller than a node"): pasting the new absolute curves beside the
old ones would price a sub-group call at one day's speed and the node's calls at another's.
So what is carried over is the ratio the stage measured in the same passes: each sub-group
point's time is multiplied by (the profile's node curve / the node curve fitted on the same
stage) at the same message size, and the regime curves are fitted to those points
(:func:`simdl.calibrate.fit.fit_scope`, with its held-out check). The section's source says
so. Recalibrating the whole profile needs no transfer and is the better answer where there
is time for it.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from ..cluster.spec import _parse_regimes
from ..errors import SimdlError
from . import fit as F
from .profile import _Dumper, _regimes_section
from .records import load_stage


def transfer_sections(stage_dir: Path, profile: dict[str, Any]) -> tuple[dict[str, Any], dict, str]:
    """(``collective_regimes_subgroups`` sections, the median ratio per collective, the
    stage's label) for ``profile`` (its raw YAML dict) from the stage in ``stage_dir``."""
    stage_dir = Path(stage_dir)
    st = load_stage(stage_dir.parent, stage_dir.name)
    if not st.measurements:
        raise SimdlError(f"{stage_dir}: no collective measurements (rank*.jsonl of calibration/collectives.py)")
    h0 = next(iter(st.headers.values()), {})
    label = f"collectives stage {stage_dir} ({h0.get('date', '?')}, {h0.get('host', '?')})"
    world = int(h0.get("world") or 0)
    per_node = int(profile.get("gpus_per_node") or 0)
    if world != per_node:
        raise SimdlError(
            f"{stage_dir} ran {world} ranks; the profile's node has {per_node}: "
            "measure the stage at the profile's ranks per node"
        )
    eff = profile.get("efficiency") or {}
    if not eff.get("collective_regimes_intra"):
        raise SimdlError("the profile has no collective_regimes_intra (node curves) to carry the ratios onto")
    node = _parse_regimes(eff["collective_regimes_intra"], "profile: collective_regimes_intra")
    link = float(eff["collective_regimes_intra"]["link_GB_per_s"])
    thr = F.temp_threshold(st)
    overheads = F.call_overheads(st)
    prov = {"backend": h0.get("backend", "gloo"), "ranks_per_node": world}
    world_fit = F.fit_scope(F._collective_points(st, "world"), overheads, thr)
    today = _parse_regimes(_regimes_section(world_fit["per_collective"], label, prov, link), "stage: world")
    out: dict[str, Any] = {}
    ratios: dict[str, list[float]] = {}
    scopes = sorted(
        {
            str(r.get("scope"))
            for m in st.measurements.values()
            for r in m.values()
            if re.fullmatch(r"sub\d+", str(r.get("scope")))
        }
    )
    for scope in scopes:
        d = int(scope[3:])
        pts = []
        for p in F._collective_points(st, scope):
            c = p["collective"]
            mine, base = node.curve(c), today.curve(c)
            if mine is None or base is None:
                continue
            r = mine.time(p["bytes"], world, 1.0, thr) / base.time(p["bytes"], world, 1.0, thr)
            ratios.setdefault(c, []).append(r)
            q = dict(p, time_s=p["time_s"] * r, time_s_passes=[t * r for t in p.get("time_s_passes", [p["time_s"]])])
            q.pop("time_s_ci95", None)
            pts.append(q)
        if len(pts) < 3:
            continue
        section = _regimes_section(F.fit_scope(pts, overheads, thr)["per_collective"], label, prov, link)
        if not section:
            continue
        moved = ", ".join(
            f"{c} x{statistics.median(v):.2f} (x{min(v):.2f}-{max(v):.2f})" for c, v in sorted(ratios.items())
        )
        section["source"] = (
            f"groups of {d} consecutive ranks, the node's {world // d} groups calling at once; "
            f"transferred onto this profile's node curves (simdl.calibrate.subgroups): each size's "
            f"time x (this profile's {world}-rank curve / the {world}-rank curve of the same stage) "
            f"at that size, median and range over the sizes: {moved}; " + section["source"]
        )
        out[str(d)] = section
    if not out:
        raise SimdlError(
            f"{stage_dir}: no sub-node groups measured (scopes sub<d>: run calibration/collectives.py "
            "with 4 or more ranks per node)"
        )
    return out, {c: statistics.median(v) for c, v in ratios.items()}, label


def add_to_profile(stage_dir: Path, profile_path: Path, out_path: Path | None = None) -> tuple[Path, dict]:
    """Write the profile with ``efficiency.collective_regimes_subgroups`` from the stage; its
    header comment lines are kept, and one is added."""
    profile_path = Path(profile_path)
    text = profile_path.read_text()
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict):
        raise SimdlError(f"{profile_path}: not a cluster profile (a YAML mapping)")
    sections, ratios, label = transfer_sections(Path(stage_dir), raw)
    raw.setdefault("efficiency", {})["collective_regimes_subgroups"] = sections
    lines = text.splitlines()
    header = lines[: next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))]
    header.append(f"# efficiency.collective_regimes_subgroups added by simdl.calibrate.subgroups from {label}.")
    out = Path(out_path or profile_path)
    out.write_text(
        "\n".join(header) + "\n" + yaml.dump(raw, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    )
    return out, ratios


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m simdl.calibrate.subgroups", description=__doc__.splitlines()[0])
    p.add_argument("stage_dir", help="a collectives stage with sub<d> scopes (calibration/collectives.py --out)")
    p.add_argument("--profile", required=True, help="the cluster profile YAML to add the curves to")
    p.add_argument("-o", "--output", default=None, help="where to write it (default: in place)")
    a = p.parse_args(argv)
    try:
        out, ratios = add_to_profile(Path(a.stage_dir), Path(a.profile), a.output and Path(a.output))
    except (SimdlError, OSError, yaml.YAMLError) as e:
        print(f"python -m simdl.calibrate.subgroups: error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {out}: sub-group curves carried over at the profile's node speed "
        f"(profile / same-stage node time, median: {', '.join(f'{c} {r:.2f}' for c, r in sorted(ratios.items()))})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
