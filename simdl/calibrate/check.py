"""Redo a profile's collective fits from the points it ships, and print the held-out check.

``python -m simdl.calibrate.check [PROFILE]`` (default ``cpu-local``) reads
``calibration.collectives.<scope>.points_us`` (the measured time of every message size, as
``simdl calibrate`` wrote it) and the one-rank call overheads, refits per collective the
size-regime curve and, for comparison, one alpha-beta line -- each first without every
third size and the largest, to predict those -- and prints the table of
:func:`simdl.calibrate.report.format_regimes`. No torch, no measurement: the figures of the
report from the data the profile carries.
"""

from __future__ import annotations

import argparse
import sys

from ..cluster import load_cluster
from ..errors import SimdlError
from .fit import fit_scope
from .report import format_regimes


def check(profile: str) -> str:
    spec = load_cluster(profile)
    colls = (spec.calibration or {}).get("collectives") or {}
    lines = []
    for scope, c in colls.items():
        pts = c.get("points_us")
        if not pts:
            continue
        n = int(c.get("group_size") or 2)
        points = [
            {"collective": coll, "bytes": int(b), "group_size": n, "time_s": t * 1e-6}
            for coll, rows in pts.items()
            for b, t in rows
        ]
        overheads = {k: v * 1e-6 for k, v in (c.get("call_overhead_us") or {}).items()}
        res = fit_scope(points, overheads)
        lines.append(f"{spec.name} [{scope}]: {len(points)} points at {n} ranks from the profile's calibration record")
        lines += format_regimes(res["per_collective"])
        j = res.get("joint") or {}
        if j.get("held_out"):
            h = j["held_out"]
            lines.append(
                f"    joint alpha-beta line of the base keys: held-out {h['within_10pct']}/{h['n']} within 10 %, "
                f"median {h['median_abs_rel_error']:.1%}, max {h['max_abs_rel_error']:.1%}"
            )
    if not lines:
        raise SimdlError(
            f"{profile}: no measured collective points in its calibration section "
            "(profiles written by simdl calibrate before size regimes do not carry them)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simdl.calibrate.check", description=__doc__.splitlines()[0])
    p.add_argument("profile", nargs="?", default="cpu-local", help="preset name or profile YAML")
    a = p.parse_args(argv)
    try:
        print(check(a.profile))
    except SimdlError as e:
        print(f"simdl: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
