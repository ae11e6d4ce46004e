"""The validation report's comparisons across runs: relative steps, repeats, drift, the step split and the run list."""

from __future__ import annotations

import datetime as _dt
import statistics

from ..calibrate import host_load
from ..strategies import registry
from .metrics import METRIC_BY_KEY, pairs, rel_error, repeat_floor
from .validation_common import _model, _num, _ok, _pct, _rel
from .validation_tables import _flag

RELATIVE_REFERENCE = tuple(next(iter(s.labels)) for s in registry.specs() if s.labels)


def relative_steps(records: list[dict], engine: str = "analytic") -> list[dict]:
    """Each run's step time over its group's reference run (:data:`RELATIVE_REFERENCE`: the same
    experiment, model, ranks and batch), measured and predicted, and the error of the predicted
    ratio.

    A sweep runs a model's strategies one after the other, minutes apart. A profile whose compute
    times went stale over hours (cpu-xeon-emr-b: the same run 11 % apart at the median two hours
    later, lab/CAMPAIGN.md) errs alike on both runs of a pair, and the ratio keeps what the
    prediction says about the strategies themselves: how much more one costs than the other.
    The noise of one run against the next stays in it. A check beside the goals, not one of them.
    """
    metric = METRIC_BY_KEY["step_time"]
    groups: dict[tuple, dict[str, tuple]] = {}
    for r, m, p, _ in pairs(records, metric, engine):
        sp = r["spec"]
        groups.setdefault((sp["experiment"], _model(r), sp["ranks"], sp["batch_size"]), {})[r["label"]] = (r, m, p)
    out = []
    for k, runs in sorted(groups.items()):
        ref = next((lab for lab in RELATIVE_REFERENCE if lab in runs), None)
        if ref is None:
            continue
        r0, m0, p0 = runs[ref]
        for lab, (r, m, p) in sorted(runs.items()):
            if lab == ref:
                continue
            measured, predicted = m / m0, p / p0
            out.append(
                {
                    "group": k,
                    "label": lab,
                    "reference": ref,
                    "measured": measured,
                    "predicted": predicted,
                    "error": predicted / measured - 1.0,
                    "apart_s": _apart_s(r, r0),
                }
            )
    return out


def _apart_s(a: dict, b: dict) -> float | None:
    """Seconds between two runs' starts (None when either is pooled from repeats or undated)."""
    if any((x.get("measured") or {}).get("repeats") for x in (a, b)):
        return None
    try:
        ta, tb = (_dt.datetime.fromisoformat(x["started"]) for x in (a, b))
    except (KeyError, TypeError, ValueError):
        return None
    return abs((ta - tb).total_seconds())


def relative_table(records: list[dict], engine: str = "analytic") -> list[str]:
    rows = relative_steps(records, engine)
    if not rows:
        return []
    errs = [abs(x["error"]) for x in rows]
    lines = [
        "## Strategy against strategy: step time relative to the model's reference run",
        "",
        f"Each run's step time over that of its group's reference run ({', '.join(RELATIVE_REFERENCE)}: the "
        "first the group has), measured and predicted. The two runs of a pair ran minutes apart, so a profile "
        "whose compute times went stale over hours errs alike on both and cancels out of the ratio; the "
        "noise of one run against the next does not. A bias that keeps its sign over sweeps is the model's "
        "(`python -m validate.relative` pools them). A check beside the goals, not one of them.",
        "",
        f"Ratio error over {len(rows)} pairs: MAPE {_pct(sum(errs) / len(errs))}, max {_pct(max(errs))}.",
        "",
        "| experiment, model, ranks, batch | strategy / reference | measured | predicted | error | runs apart |",
        "|---|---|---|---|---|---|",
    ]
    for x in rows:
        g = x["group"]
        apart = "-" if x["apart_s"] is None else f"{x['apart_s'] / 60:.0f} min"
        lines.append(
            f"| {g[0]}, {g[1]}, {g[2]}, {g[3]} | {x['label']} / {x['reference']} | {x['measured']:.3f} | "
            f"{x['predicted']:.3f} | {_pct(x['error'], True)} | {apart} |"
        )
    lines.append("")
    return lines


def repeats_table(records: list[dict]) -> list[str]:
    """Runs made more than once the same way: each repeat's step median and the pooled one
    (simdl.report.metrics.pool_repeats), the run-to-run spread the errors above sit in."""
    reps = [r for r in _ok(records) if (r.get("measured") or {}).get("repeats")]
    if not reps:
        return []
    lines = [
        "## Repeated runs",
        "",
        "Runs made more than once with the same harness are pooled: their steady steps together give the "
        "median compared above, training time is the mean, steady-state staleness the pooled histogram "
        "(of the attempts that logged it). Memory, bytes, busy fraction and test accuracy are the latest "
        "attempt's; each repeat's accuracy is shown here (256 test images after one short epoch: mostly "
        "noise). Spread = slowest / fastest repeat median - 1. A repeat measured while other processes kept "
        f"more than {host_load.BUSY_CORES:g} of a core busy is left out of the pool when a quiet repeat of the "
        "run exists (listed as left out).",
        "",
        "| run | repeats (start: step median, test accuracy) | spread | pooled median | predicted |",
        "|---|---|---|---|---|",
    ]
    by_repeat: dict[int, list[float]] = {}
    spreads, pooled_err = [], []
    for r in reps:
        m = r["measured"]
        meds = [x["step_median_s"] for x in m["repeats"] if x.get("step_median_s")]
        each = ", ".join(
            f"{(x.get('started') or '?')[11:16]}: {_num(x['step_median_s'], 's')}"
            + (f" (acc. {_pct(x['test_accuracy'])})" if x.get("test_accuracy") is not None else "")
            for x in m["repeats"]
        )
        each += "".join(
            f"; left out {(x.get('started') or '?')[11:16]}: {_num(x.get('step_median_s'), 's')} ({x.get('why')})"
            for x in m.get("repeats_excluded") or []
        )
        pred = ((r.get("predicted") or {}).get("analytic") or {}).get("iteration_time_s")
        if meds:
            spreads.append(max(meds) / min(meds) - 1)
        for k, x in enumerate(m["repeats"]):
            e = rel_error(pred, x.get("step_median_s"))
            if e is not None:
                by_repeat.setdefault(k, []).append(abs(e))
        e = rel_error(pred, m["step_time_s"].get("median"))
        if e is not None:
            pooled_err.append(abs(e))
        lines.append(
            f"| `{r['run_id']}` | {each} | {_pct(spreads[-1]) if meds else '-'} | "
            f"{_num(m['step_time_s']['median'], 's')} | {_num(pred, 's')} |"
        )
    lines.append("")
    if spreads:
        # How far the machine moves a measurement against how far the prediction is from it:
        # an error below the run-to-run spread cannot be told from noise.
        lines.append(
            f"Spread between repeats, over the {len(spreads)} runs: median "
            f"{_pct(statistics.median(spreads))}, max {_pct(max(spreads))}."
        )
    floor = repeat_floor(reps)
    if floor:
        # What a prediction that matched one repeat exactly would score against the others:
        # the step-time error this machine lets one sweep check a model to.
        lines.append(
            f"Repeat against repeat, each repeat's step median as the prediction of another repeat of the "
            f"same run ({floor['pairs']} ordered pairs over {floor['runs']} runs): MAPE {_pct(floor['mape'])}, "
            f"max {_pct(floor['max'])}. An error against one sweep below this cannot be told from the machine's own "
            "change between runs."
        )
    if by_repeat:
        per_repeat = "; ".join(
            f"repeat {k + 1} alone {_pct(sum(v) / len(v))} ({len(v)} runs)" for k, v in sorted(by_repeat.items())
        )
        every = [e for v in by_repeat.values() for e in v]
        lines.append(
            f"Step-time MAPE of these runs (analytic), each repeat's median against the prediction: {per_repeat}; "
            f"every repeat {_pct(sum(every) / len(every))}, max {_pct(max(every))} ({len(every)} medians); "
            f"pooled {_pct(sum(pooled_err) / len(pooled_err)) if pooled_err else '-'}."
        )
        lines.append("")
    return lines


def drift_table(records: list[dict], engine: str = "analytic") -> list[str]:
    """Runs that re-measured a point of the profile's compute stage before and after
    (validate/probe.py): the machine's speed against its profile, and the step-time error
    with the prediction scaled by it -- how much of the error is the machine's drift. The
    prediction itself never saw the probe."""
    rows = []
    for r in _ok(records):
        pr = r.get("machine_probe") or {}
        if not pr.get("speed_ratio") or (r.get("measured") or {}).get("repeats"):
            continue
        m = (r.get("measured") or {}).get("step_time_s", {}).get("median")
        pred = (r.get("predicted") or {}).get(engine) or {}
        p = pred.get("iteration_time_s")
        e, e_adj = rel_error(p, m), rel_error(p * pr["speed_ratio"] if p else None, m)
        # The probe times a model's compute alone, so its ratio is scaled onto the prediction's
        # compute (the workload rows, step_split_s) too, the rest of the step left as predicted.
        c = (pred.get("step_split_s") or {}).get("compute")
        p_c = p + c * (pr["speed_ratio"] - 1.0) if p and c is not None else None
        if e is not None and e_adj is not None:
            rows.append((r, pr, m, p, e, e_adj, p_c, rel_error(p_c, m)))
    if not rows:
        return []

    def stats(errs):
        return (
            f"MAPE {_pct(sum(abs(x) for x in errs) / len(errs))}, max {_pct(max(abs(x) for x in errs))}, "
            f"bias {_pct(sum(errs) / len(errs), signed=True)}"
        )

    ratios = sorted(pr["speed_ratio"] for _, pr, *_ in rows)
    lines = [
        "## The machine's speed against its profile",
        "",
        "Before and after each of these runs, one point the profile's compute stage measured (the run's model "
        "at a calibrated batch size, never the run's own configuration; `calibration/compute.py --probe`, the "
        "same build, warm-up and fastest-of-5 rule) was measured again. Speed ratio = mean probe step / "
        "calibrated step: above 1, the machine was slower than when it was calibrated. The prediction was made "
        "before the probes and does not use them; 'x ratio' scales the whole predicted step by the ratio "
        "(right only as far as the drift is the processor's and its memory's, not the links'); 'compute x "
        "ratio' scales only the prediction's compute (its `step_split_s` compute: the workload rows, what the "
        "probe times) and leaves the rest of the step as predicted.",
        "",
        f"{len(rows)} runs, step time as predicted: {stats([x[4] for x in rows])}; prediction x ratio: "
        f"{stats([x[5] for x in rows])}"
        + (
            f"; compute x ratio: {stats([x[7] for x in rows if x[7] is not None])}"
            if any(x[7] is not None for x in rows)
            else ""
        )
        + f". Ratios {ratios[0]:.3f}-{ratios[-1]:.3f} (median {statistics.median(ratios):.3f}).",
        "",
        "| run | probe | calibrated | before | after | ratio | measured step | predicted | error | x ratio | error "
        "| compute x ratio | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, pr, m, p, e, e_adj, p_c, e_c in rows:
        b, a = pr.get("before", {}).get("step_s"), pr.get("after", {}).get("step_s")
        lines.append(
            f"| `{r['run_id']}` | {pr['model']} b{pr['batch']} x{pr['ranks']} | "
            f"{_num(pr['calibrated_step_s'], 's')} | {_num(b, 's')} | {_num(a, 's')} | "
            f"{pr['speed_ratio']:.3f} | {_num(m, 's')} | {_num(p, 's')} | {_pct(e, signed=True)} | "
            f"{_num(p * pr['speed_ratio'], 's')} | {_pct(e_adj, signed=True)} | {_num(p_c, 's')} | "
            f"{_pct(e_c, signed=True)} |"
        )
    lines.append("")
    return lines


def split_table(records: list[dict], engine: str = "analytic") -> list[str]:
    """Where the step goes, measured against predicted, for runs whose profiled step was split
    into groups (``busy_by_group_s``, validate/measure.py; older records lack it) and whose
    prediction carries ``step_split_s``. Shares of the step, not seconds: the profiler slows
    the profiled step, so its groups are divided by its own length."""
    rows = []
    for r in _ok(records):
        m, p = r.get("measured") or {}, (r.get("predicted") or {}).get(engine) or {}
        groups, split, length = m.get("busy_by_group_s"), p.get("step_split_s"), m.get("profiled_step_s")
        if not (groups and split and length and p.get("iteration_time_s")):
            continue
        step = p["iteration_time_s"]
        meas = {k: groups.get(k, 0.0) / length for k in ("compute", "copies", "optimizer")}
        meas["rest"] = max(1.0 - sum(meas.values()), 0.0)
        pred = {k: split.get(k, 0.0) / step for k in ("compute", "copies", "optimizer")}
        pred["rest"] = max(1.0 - sum(pred.values()), 0.0)
        faults = m.get("page_fault_bytes_per_step_per_rank")
        rows.append((r, step, meas, pred, max(faults) if faults else None))
    if not rows:
        return []
    with_faults = any(f is not None for *_, f in rows)
    lines = [
        "## Where the step goes",
        "",
        "Share of a step, measured / predicted. Measured: the profiled step's top-level ops on the training "
        "thread (torch.profiler, validate/measure.py), `compute` every op that is not a copy or inside the "
        "optimizer step, `copies` buffer copies (`copy_`, `_chunk_cat`, `cat`, ...: FSDP's and DDP's packing), "
        "`optimizer` the optimizer step, `rest` time in collective calls, waits, hooks and Python. Predicted: "
        f"the {engine} engine's `step_split_s` (compute = the workload's rows; rest = host time per unit, "
        "interference, blocking waits and exposed communication). A sum can be right with its split wrong; "
        "this table shows which. Caveats: the profiler slows a step unevenly (many small ops more than few "
        "large ones), and measured `copies` include the model's own copy ops (`.contiguous()`, `cat`), "
        "which a prediction counts in `compute`."
        + (
            " `faults`: the memory a steady step touched for the first time (minor page faults x the page "
            "size, median over the steady steps, the largest rank; runs that record faults), measured only: "
            "on a CPU host every faulted byte costs `host.page_fault_ns_per_byte`, and the prediction "
            "prices it only for buffers above the allocator's mmap threshold."
            if with_faults
            else ""
        ),
        "",
        "| run | step (measured / predicted) | compute | copies | optimizer | rest |"
        + (" faults |" if with_faults else ""),
        "|---|---|---|---|---|---|" + ("---|" if with_faults else ""),
    ]
    for r, step, meas, pred, faults in rows:
        cells = " | ".join(f"{_pct(meas[k])} / {_pct(pred[k])}" for k in ("compute", "copies", "optimizer", "rest"))
        if with_faults:
            cells += f" | {_num(faults, 'B')}"
        lines.append(
            f"| {_model(r)} {r['label']} r{r['spec']['ranks']} b{r['spec']['batch_size']} | "
            f"{_num(r['measured']['step_time_s']['median'], 's')} / {_num(step, 's')} | {cells} |"
        )
    lines.append("")
    return lines


def runs_table(records: list[dict]) -> list[str]:
    # Several results files: each run says which one it came from, and when it started.
    files = len({r.get("_source_file") for r in records}) > 1
    extra = (" file | started |", "---|---|") if files else ("", "")
    lines = [
        "## Runs",
        "",
        "| run | status | processes | steps/rank | wall | data |" + extra[0],
        "|---|---|---|---|---|---|" + extra[1],
    ]
    for r in records:
        m = r.get("measured") or {}
        status = (
            r.get("status", "?")
            if r.get("status") == "ok"
            else f"failed: {str(r.get('error', '')).rsplit('; see ', 1)[0][:160]}"
        )
        cells = f" `{_rel(r.get('_source_file', ''))}` | {str(r.get('started', '-'))[:16]} |" if files else ""
        lines.append(
            f"| `{r['run_id']}` | {status} | {r.get('processes', '?')}{_flag(r)} | {m.get('steps_per_rank', '-')} | "
            f"{r.get('wall_s', 0):.0f} s | {m.get('data', '-')} |" + cells
        )
    lines.append("")
    return lines
