"""A built profile's summary, what it keeps from its base preset, and its YAML file."""

from __future__ import annotations

import copy
import datetime
import os
from pathlib import Path
from typing import Any

import yaml


def _kept_from_base(base: dict, kept: list[str]) -> dict | None:
    """Where the values of the stages not run here come from: the base profile's run, or, when
    the base itself kept those stages from an earlier run, that run."""
    base_cal = base.get("calibration") or {}
    if not kept or not base_cal:
        return None
    prior = base_cal.get("kept_from_base") or {}
    if prior and set(kept) <= set(prior.get("stages", [])):
        return dict(copy.deepcopy(prior), stages=kept)
    return {"profile": base.get("name"), "stages": kept, "provenance": copy.deepcopy(base_cal.get("provenance", {}))}


def _summary(report: dict) -> dict:
    """The compact part of the report that goes into the profile's calibration section."""
    out: dict[str, Any] = {"provenance": report["provenance"]}
    out["collectives"] = {scope: _scope_summary(c) for scope, c in report.get("collectives", {}).items()}
    out.update(_compute_summary(report.get("compute") or {}))
    if report.get("ps"):
        out["ps"] = _ps_summary(report["ps"])
    if report.get("strategies", {}).get("fit"):
        o = report["strategies"]["fit"]
        out["strategy_fit"] = {
            "params": o["params"],
            "points": o["points"],
            "held_out": o["held_out"],
            "held_out_max_abs_rel_error": o["held_out_max_abs_rel_error"],
        }
    if report.get("strategies", {}).get("copies"):
        out["copy_fit"] = report["strategies"]["copies"]
    if report.get("strategies", {}).get("zero"):
        out["zero_fit"] = report["strategies"]["zero"]
    out["strategy_steps_measured"] = report.get("strategies", {}).get("measured", {})
    return _plain(out)


def _scope_summary(c: dict) -> dict:
    """One collective scope's fits: the joint line, each collective's line and size regimes,
    and the measured points they were made on."""
    j = c.get("joint") or {}
    return {
        "joint": {k: j.get(k) for k in ("params", "quality", "collectives", "bytes_range")}
        | (
            {
                "held_out": {
                    k: j["held_out"][k]
                    for k in ("sizes_bytes", "max_abs_rel_error", "median_abs_rel_error", "within_10pct", "n")
                }
            }
            if j.get("held_out")
            else {}
        ),
        "per_collective": {
            k: {
                "params": v["params"],
                "r2": v["quality"]["r2"],
                "r2_log": v["quality"]["r2_log"],
                "max_abs_rel_residual": v["quality"]["max_abs_rel_error"],
                "held_out_max_abs_rel_error": v.get("held_out", {}).get("max_abs_rel_error"),
            }
            for k, v in c.get("per_collective", {}).items()
        },
        # The piecewise (size-regime) fits: what efficiency.collective_regimes_intra holds.
        "regimes": {
            k: _regime_summary(v["regimes"]) for k, v in c.get("per_collective", {}).items() if v.get("regimes")
        },
        "call_overhead_us": c.get("call_overhead_us", {}),
        # The measured points the fits were made on, [bytes, us] per size (the 25th percentile
        # of its chunks), so that `python -m simdl.calibrate.check` can redo the held-out
        # check from the shipped profile alone.
        "group_size": (c.get("points") or [{}])[0].get("group_size") or j.get("group_size"),
        "points_us": {
            coll: [
                [p["bytes"], float(f"{p['time_s'] * 1e6:.5g}")] for p in c.get("points", []) if p["collective"] == coll
            ]
            for coll in sorted({p["collective"] for p in c.get("points", [])})
        },
    }


def _compute_summary(comp: dict) -> dict[str, Any]:
    """The compute stage's keys of the summary: the roofline fit with its held-out check, the
    stream fit, the page-fault cost and the compute profiles' measured steps."""
    out: dict[str, Any] = {}
    if comp.get("params"):
        out["compute"] = {
            "params": comp["params"],
            "fit_models": comp["fit_models"],
            "batches": comp["batches"],
            "fit_steps": comp["quality"]["steps"],
            "fit_rows_r2": comp["quality"]["rows"]["r2"],
            "fit_by_class": comp["quality"]["by_class"],
        }
        if comp.get("held_out"):
            ho = comp["held_out"]
            out["compute"]["held_out"] = {
                "models": ho["models"],
                "steps": ho["steps"],
                "by_class": ho["by_class"],
                "runs": [
                    {k: r[k] for k in ("run", "measured_step_ms", "predicted_step_ms", "step_rel_error")}
                    for r in ho["runs"]
                ],
                "configs": ho.get("configs", []),
            }
        out["compute"]["micro"] = comp.get("micro", {})
    if comp.get("stream"):
        st = comp["stream"]
        out["stream"] = {
            "bandwidth_GB_per_s": st["bandwidth_GB_per_s"],
            "call_us": st["call_us"],
            "quality": st["quality"],
            "held_out": st["held_out"],
        }
    if comp.get("page_fault"):
        out["page_fault"] = comp["page_fault"]
    if comp.get("measured_rows"):
        out["compute_profiles"] = [
            {"model": r["model"], "dataset": r["dataset"], "batches": r["batches"], "measured_step_s": r["step_s"]}
            for r in comp["measured_rows"]
        ]
    return out


def _ps_summary(ps: dict) -> dict:
    out = {
        k: ps.get(k)
        for k in (
            "latency_us",
            "bandwidth_GB_per_s",
            "worker_bandwidth_GB_per_s",
            "transport",
            "update_bandwidth_GB_per_s",
            "quality",
        )
    }
    if ps.get("transport") == "rpc":
        # Whether the server side was fitted or is the worker's link (one worker at once,
        # simdl.calibrate.ps.PSFit), as data a reader or a check can test, not only as prose.
        out["rpc_workers"] = ps["rpc_workers"]
        out["server_side_measured"] = ps["server_side_measured"]
    return out


def _regime_summary(r: dict) -> dict:
    ho = r.get("held_out") or {}
    return {
        "params": r["params"],
        "n_regimes": r["n_regimes"],
        "cv_error_by_n_regimes": r["cv_error"],
        "fit": {k: r["quality"][k] for k in ("n", "r2_log", "median_abs_rel_error", "max_abs_rel_error")},
        "fit_by_regime": [
            {
                "step_bytes": q["step_bytes"],
                "n": q["n"],
                "median_abs_rel_error": q["median_abs_rel_error"],
                "max_abs_rel_error": q["max_abs_rel_error"],
            }
            for q in r["regime_quality"]
        ],
        "held_out": {
            k: ho[k] for k in ("sizes_bytes", "within_10pct", "n", "median_abs_rel_error", "max_abs_rel_error")
        }
        | {"errors": {e["bytes"]: e["rel_error"] for e in ho.get("errors", [])}}
        if ho
        else {},
        "overhead_source": r["overhead_source"],
        "passes": r["passes"],
    }


def _plain(x):
    """Plain YAML types (numpy scalars and tuples out), floats to 5 significant digits."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float):
        return float(f"{x:.5g}") if x == x else None
    return x


class _Dumper(yaml.SafeDumper):
    """safe_dump, but a short list of numbers on one line (``step_bytes: [2048, 11863296]``)."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    flow = len(data) <= 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def write_profile(profile: dict, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Cluster profile written by `simdl calibrate` on {datetime.date.today().isoformat()}.\n"
        "# Fitted values have kind 'calibrated'; `calibration` holds provenance and fit quality.\n"
        f"# Use it with: simdl predict --cluster {path}\n"
    )
    cp = profile.get("compute_profile")
    if isinstance(cp, dict) and "data" in cp:
        # The measured rows go to a JSON file beside the YAML (thousands of numbers), which
        # the YAML names (simdl.analytic.measured).
        from ..analytic.measured import write_compute_profile

        side = path.with_name(f"{path.stem}.compute.json")
        write_compute_profile(cp["data"], side)
        profile = {**profile, "compute_profile": {"file": side.name, "kind": cp["kind"], "source": cp["source"]}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(header + yaml.dump(profile, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True))
    os.replace(tmp, path)
    return path
