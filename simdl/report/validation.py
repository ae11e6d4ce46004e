"""The validation report: simdl's predictions against real runs, as Markdown and PNG figures.

``simdl report RESULTS.jsonl -o report/ [--paper]`` reads the JSON lines written by
``python -m validate.run`` and writes ``report/README.md`` with tables shaped like the
source studies' (measured, predicted and error side by side), MAPE and max error per
metric, the accuracy goals (:data:`GOALS`), strategy-ordering checks, and figures (parity, error by
strategy, memory over time, staleness histograms). ``--paper`` appends simdl's
predictions of the studies' experiments at their own scale (:mod:`.paper`).
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from ..band import LEVEL
from ..strategies import registry
from .metrics import METRIC_BY_KEY, METRICS, engines_present, pairs, read_result_files, summary
from .validation_common import GOALS, ORDER_TOLERANCE, _ok, _pct, ordering
from .validation_history import drift_table, relative_steps, relative_table, repeats_table, runs_table, split_table
from .validation_setup import _calibration_section, _setup_section, calibration_configs
from .validation_tables import exp1_table, exp2_table, ordering_table, ssp_bound_table, strategy_table, vit_table

__all__ = [
    "GOALS",
    "band_coverage",
    "band_line",
    "build_report",
    "calibration_configs",
    "drift_table",
    "engines_present",
    "exp1_table",
    "exp2_table",
    "goals",
    "mape_table",
    "ORDER_TOLERANCE",
    "ordering",
    "ordering_table",
    "relative_steps",
    "relative_table",
    "repeats_table",
    "runs_table",
    "split_table",
    "ssp_bound_table",
    "strategy_table",
    "vit_table",
    "_pct",
]


def mape_table(records: list[dict], engine: str) -> list[str]:
    s = summary(records, engine)
    lines = [
        f"| metric | runs | MAPE | max abs error | mean signed error | measured (origin) | predicted ({engine}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric in METRICS:
        v = s[metric.key]
        lines.append(
            f"| {metric.title} | {v['n']} | {_pct(v['mape'])} | {_pct(v['max'])} | "
            f"{_pct(v['bias'], True)} | {metric.measured_origin} | {metric.predicted_origin} |"
        )
    return lines


def band_coverage(records: list[dict], engine: str = "analytic") -> dict:
    """How many measured steps fell inside their prediction's band (Result.iteration_time_band_s,
    simdl.band): ``{"inside", "runs", "without"}``, ``without`` the finished runs whose record
    has no band (predicted by a simdl without bands, or with a profile that has no calibration)."""
    metric = METRIC_BY_KEY["step_time"]
    inside = runs = without = 0
    for r, m, _, _ in pairs(records, metric, engine):
        b = ((r.get("predicted") or {}).get(engine) or {}).get("iteration_time_band_s")
        if not b:
            without += 1
            continue
        runs += 1
        inside += b[0] <= m <= b[1]
    return {"inside": inside, "runs": runs, "without": without}


def band_line(records: list[dict], engine: str) -> list[str]:
    c = band_coverage(records, engine)
    if not c["runs"]:
        return []
    return [
        f"Measured step inside the predicted {100 * LEVEL:.0f} % band: {c['inside']} of {c['runs']} runs "
        f"({100 * c['inside'] / c['runs']:.0f} %). The band comes from the profile's calibration (its held-out "
        f"step errors and step jitter, simdl.band), not from these runs."
        + (f" {c['without']} runs have no band (predicted before it existed)." if c["without"] else ""),
        "",
    ]


def goals(records: list[dict], engine: str = "analytic") -> list[tuple[str, str, str, str]]:
    s = summary(records, engine)
    st, mem = s["step_time"], s["peak_memory"]
    rows = []

    def verdict(v, limit):
        return "-" if v is None else ("met" if v <= limit else "not met")

    rows.append(
        (
            "step-time MAPE",
            "<= 5% (stretch 3%)",
            _pct(st["mape"]),
            verdict(st["mape"], GOALS["step_mape"])
            + (" (stretch met)" if st["mape"] is not None and st["mape"] <= GOALS["step_mape_stretch"] else ""),
        )
    )
    rows.append(("step-time max error", "<= 15%", _pct(st["max"]), verdict(st["max"], GOALS["step_max"])))
    rows.append(("peak-memory mean abs error", "<= 3%", _pct(mem["mape"]), verdict(mem["mape"], GOALS["memory_mean"])))
    # The goal names the asynchronous PS; stale-synchronous runs are judged the same way on a
    # row of their own (the same staleness mechanism, bounded), so neither hides the other.
    stale_pairs = pairs(records, METRIC_BY_KEY["staleness"], engine)
    for mode in (n for n in registry.names() if registry.is_stale(n)):
        what = f"{mode} staleness mean, worst run"
        errs = [abs(e) for r, *_, e in stale_pairs if r["spec"]["strategy"] == mode]
        worst = max(errs) if errs else None
        rows.append(
            (
                what,
                "within 10% of measured",
                _pct(worst) + (f" ({len(errs)} runs)" if errs else ""),
                verdict(worst, GOALS["staleness"]),
            )
        )
    for key, what in (("step_time", "time"), ("peak_memory", "memory")):
        o = ordering(records, key, engine)
        n_ok = sum(x["match"] for x in o)
        rows.append(
            (
                f"strategy order by {what}",
                "matches in every model",
                f"{n_ok}/{len(o)} groups",
                "-" if not o else ("met" if n_ok == len(o) else "not met"),
            )
        )
    return rows


# What the report says of the measurements behind it (validate/measure.py, validate/train.py).
MEASUREMENT_NOTES = (
    "- gloo has no reduce-scatter of its own: FSDP's reduce-scatter runs as an all-reduce of the full "
    "gradient buffer (seen in the profiler as `gloo:all_reduce`), so measured bytes for FSDP count "
    "all-reduce traffic where simdl plans a reduce-scatter.",
    "- Bytes sent per rank are derived from the measured collective payloads with ring factors "
    "(2(n-1)/n for all-reduce, (n-1)/n for all-gather); gloo's own algorithms may move more.",
    "- The profiled step (one per run, after warm-up) is excluded from the step-time statistics; "
    "its profiler overhead is in the training time.",
    "- The fixed warm-up does not always reach the steady state: a run whose first steady steps are "
    "still slow (ViT under FSDP, whose step settles over several steps) has a median above its "
    "settled step. The row 'step time, initial transient removed' cuts that start by the MSER rule "
    "(no parameter) to show how much of an error it is; the goals are judged on the fixed rule.",
    "- The training time holds the harness's profiled steps and the profiler's stop, which a user's "
    "training does not have and simdl does not predict. Runs that record every step's time record what they added, "
    "and the row 'training time without the harness's profiling' takes it out. The warm-up steps stay "
    "in that row, and simdl does not predict them either (the prediction is iterations x step).",
    "- Process RSS (`peak_rss_bytes` in the JSONL) includes the profiler's own buffers and is not compared.",
)


def _preamble(
    paths,
    records: list[dict],
    replaced,
    repeats: bool,
    command: str | None,
    engines: list[str],
    ok: list[dict],
    profiles: list[str],
) -> list[str]:
    """The report's title and what it was made from: files, repeats, sweeps, re-predictions."""
    lines = [
        f"# simdl validation report ({', '.join(profiles)} profile)",
        "",
        f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from "
        f"{', '.join(f'`{p}`' for p in paths)} ({len(ok)} runs finished, {len(records) - len(ok)} failed).",
    ]
    if repeats:
        lines += [
            "",
            "A run found in more than one file is a repeat: its steady steps, training times and "
            "staleness are pooled over the repeats, and the table of repeats lists each one.",
        ]
    if replaced:
        lines += [
            "",
            f"Runs in more than one file, each counted once with its record from the later file "
            f"(its own measurement, prediction and profile): {', '.join(f'`{r}`' for r in sorted(replaced))}.",
        ]
    sweeps = sorted({str(r["sweep_command"]) for r in records if r.get("sweep_command")})
    if sweeps:
        lines += ["", "Runs made with: " + "; ".join(f"`{c}`" for c in sweeps)]
    repred = sorted({str(r["repredicted_from"]) for r in records if r.get("repredicted_from")})
    if repred:
        lines += [
            "",
            f"Predictions remade (`python -m validate.repredict`) with the profile below; the runs were "
            f"first predicted with {', '.join(f'`{p}`' for p in repred)}.",
        ]
    if command:
        lines += ["", f"Report made with: `{command}`"]
    lines += [
        "",
        "Error = (predicted - measured) / measured. Every prediction was made from the run's "
        "configuration alone, before the run started (`validate/run.py`), with the cluster profile named below.",
        "",
    ]
    sim_missing = [r for r in records if "error" in ((r.get("predicted") or {}).get("sim") or {"error": 1})]
    if sim_missing and "sim" not in engines:
        err = ((sim_missing[0].get("predicted") or {}).get("sim") or {}).get("error", "not run")
        lines += [f"The SimPy engine gave no prediction ({err}); only the analytic engine is compared.", ""]
    return lines


def build_report(
    results: str | Path | list,
    out_dir: str | Path,
    paper: bool = False,
    command: str | None = None,
    repeats: bool = False,
) -> Path:
    """Write ``out_dir/README.md`` and its PNG figures; return the Markdown path. ``results``:
    one results file, or several read as one sweep (:func:`read_result_files`; ``repeats``:
    a run in several files is a repeat, pooled)."""
    from . import figures

    paths = [results] if isinstance(results, (str, Path)) else list(results)
    records, replaced = read_result_files(paths, repeats=repeats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    engines = engines_present(records) or ["analytic"]
    ok = _ok(records)
    profiles = sorted({r.get("profile", "?") for r in records})
    lines = _preamble(paths, records, replaced, repeats, command, engines, ok, profiles)
    lines += _setup_section(records) + _calibration_section(records)
    for eng in engines:
        lines += (
            [f"## Accuracy per metric ({eng} engine)", ""] + mape_table(records, eng) + [""] + band_line(records, eng)
        )
    lines += ["## Goals (on the local profile, configurations not used in calibration)", ""]
    if "local" not in profiles:
        lines += [
            f"This report is of the {', '.join(profiles)} profile: the goals are judged on `local`; "
            "they are shown here only to exercise the check.",
            "",
        ]
    lines += ["| goal | target | achieved (analytic) | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in goals(records)] + [""]
    lines += exp1_table(records, "analytic") + exp2_table(records, "analytic") + ssp_bound_table(records)
    lines += vit_table(records, "analytic")
    lines += strategy_table(records, "analytic") + ordering_table(records, "analytic") + relative_table(records)
    lines += split_table(records)
    lines += repeats_table(records) + drift_table(records)
    from .gpu import gpu_section

    lines += gpu_section(records)
    names = figures.write_all(records, out, engines)
    if names:
        lines += ["## Figures", ""] + [f"![{n}]({n})" for n in names] + [""]
    lines += ["## Notes on the measurements", "", *MEASUREMENT_NOTES, ""]
    lines += runs_table(records)
    if paper:
        from .paper import paper_tables

        lines += [paper_tables()]
    md = out / "README.md"
    md.write_text("\n".join(lines) + "\n")
    return md
