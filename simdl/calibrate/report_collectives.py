"""The collectives part of the calibration summary: per scope each collective's alpha-beta
fit, the joint fit, and the size regimes with their held-out checks."""

from __future__ import annotations

import numpy as np

from .report_numbers import abs_pct, size


def format_regimes(per_collective: dict) -> list[str]:
    """The size-regime fits of one scope: per collective the regimes, the fit quality, and the
    held-out check beside the one-line (single alpha-beta) fit's."""
    lines: list[str] = []
    regs = {k: v["regimes"] for k, v in per_collective.items() if v.get("regimes")}
    if regs:
        lines.append(
            "  size regimes (piecewise ring alpha-beta; held-out = refit without every third size "
            "and the largest, then predict them)"
        )
        lines.append(
            f"    {'collective':<15} {'regimes':>7} {'overhead':>9}  {'fit med|err|':>12} {'max':>6}  "
            f"{'held-out <=10%':>14} {'median':>7} {'max':>7}   (one line: {'held-out <=10%':>14} {'max':>7})"
        )
        for coll, r in regs.items():
            ho = r.get("held_out") or {}
            ab = per_collective[coll].get("held_out") or {}
            q = r["quality"]
            lines.append(
                f"    {coll:<15} {r['n_regimes']:>7} {r['params']['overhead_us']:>6.1f} us  "
                f"{abs_pct(q['median_abs_rel_error']):>12} {abs_pct(q['max_abs_rel_error']):>6}  "
                f"{(str(ho.get('within_10pct')) + '/' + str(ho.get('n'))) if ho else 'n/a':>14} "
                f"{abs_pct(ho.get('median_abs_rel_error')):>7} {abs_pct(ho.get('max_abs_rel_error')):>7}   "
                f"(one line: {(str(ab.get('within_10pct')) + '/' + str(ab.get('n'))) if ab else 'n/a':>14} "
                f"{abs_pct(ab.get('max_abs_rel_error')):>7})"
            )
            for g, rq in zip(r["params"]["regimes"], r["regime_quality"]):
                lo, hi = g["step_bytes"]
                lines.append(
                    f"      step {size(lo):>9} .. {size(hi):<9} alpha {g['alpha_us']:8.1f} us  "
                    f"bus {g['bus_GB_per_s']:8.3f} GB/s  fit med|err| {abs_pct(rq['median_abs_rel_error'])} "
                    f"max {abs_pct(rq['max_abs_rel_error'])} (n={rq['n']})"
                )
        from .fit import PROFILE_COLLECTIVES

        for label, names in (("profile's collectives", PROFILE_COLLECTIVES), ("all", tuple(regs))):
            tot = [regs[c]["held_out"] for c in names if c in regs and regs[c].get("held_out")]
            one = [per_collective[c]["held_out"] for c in names if c in regs and per_collective[c].get("held_out")]
            if tot:
                lines.append(
                    f"    {label}: held-out {sum(h['within_10pct'] for h in tot)}/{sum(h['n'] for h in tot)} "
                    f"within 10 %, max {abs_pct(max(h['max_abs_rel_error'] for h in tot))}"
                    + (
                        f" (one line per collective: {sum(h['within_10pct'] for h in one)}/{sum(h['n'] for h in one)})"
                        if one
                        else ""
                    )
                )
                if all("within_10pct_or_ci95" in h for h in tot):
                    lines.append(
                        f"      within 10 % or inside the held-out point's own 95 % measurement interval: "
                        f"{sum(h['within_10pct_or_ci95'] for h in tot)}/{sum(h['n'] for h in tot)}; "
                        f"median interval half-width {abs_pct(float(np.median([h['median_ci95_halfwidth'] for h in tot])))}"
                    )
            if set(names) == set(regs):
                break
    return lines


def _fit_line(label: str, fit: dict, residual: str) -> str:
    """One alpha-beta fit: its parameters, its residual (``max`` or ``median``) and the held-out error."""
    p, q, ho = fit["params"], fit["quality"], fit.get("held_out", {})
    return (
        f"  {label:<15} bus {p['bus_bandwidth_GB_per_s']:8.3f} GB/s  alpha {p['alpha_us']:8.1f} us  "
        f"overhead {p['overhead_us']:8.1f} us  R2 {q['r2']:.3f} R2(log) {q['r2_log']:.3f}  "
        f"{residual}|res| {abs_pct(q[residual + '_abs_rel_error'])}  held-out max|err| {abs_pct(ho.get('max_abs_rel_error'))}"
    )


def collectives_lines(report: dict) -> list[str]:
    """Per scope the alpha-beta fit of each collective, the joint fit and its size regimes."""
    lines: list[str] = []
    for scope, c in report.get("collectives", {}).items():
        j = c.get("joint")
        lines.append(f"collectives [{scope}]")
        for coll, v in c.get("per_collective", {}).items():
            lines.append(_fit_line(coll, v, "max"))
        if j:
            p, ho = j["params"], j.get("held_out", {})
            lines.append(
                _fit_line("joint (profile)", j, "median")
                + (f" ({ho['within_10pct']}/{ho['n']} within 10%)" if ho else "")
            )
            if p.get("bandwidth_factors"):
                lines.append(
                    "    bandwidth relative to all_reduce: "
                    + ", ".join(f"{k} {v:.3f}" for k, v in p["bandwidth_factors"].items())
                )
        lines += format_regimes(c.get("per_collective", {}))
    return lines
