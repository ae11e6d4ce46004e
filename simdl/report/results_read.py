"""Reading validation results files: torn lines skipped, several files read as one sweep,
a run's repeats pooled (their steady steps, training times and staleness)."""

from __future__ import annotations

import copy
import statistics
from pathlib import Path


def read_results(path: str | Path) -> list[dict]:
    """Every record (a torn last line is skipped with a warning; any other bad line is a
    :class:`SimdlError` naming the file and line, simdl.report.results_file). A run recorded more than once
    (``validate.run --resume --retry-failed`` appends the new attempt, and a run may be made
    again on purpose to measure its repeatability) counts once, in the place of its first
    record: its latest record, with ``attempts`` saying how many there were. Finished
    attempts measured the same way (:func:`_same_harness`) are repeats of one measurement,
    and their varying figures are pooled (:func:`pool_repeats`)."""
    from .results_file import read_records  # strict: only a torn last line is skipped

    return _collect(read_records(Path(path)))


def _collect(records) -> list[dict]:
    """:func:`read_results` on records already read, in the order they were written."""
    out: list[dict] = []
    where: dict[str, int] = {}
    finished: dict[str, list[dict]] = {}
    for rec in records:
        rid = rec.get("run_id") if isinstance(rec, dict) else None
        if rid is not None and rec.get("status") == "ok":
            same = finished.setdefault(rid, [])
            # The same measurement again (same start: a copy predicted again with
            # validate.repredict, read beside its original) is one repeat, not two.
            k = next(
                (i for i, f in enumerate(same) if rec.get("started") and f.get("started") == rec.get("started")), None
            )
            if k is None:
                same.append(rec)
            else:
                same[k] = rec
        if rid is not None and rid in where:
            i = where[rid]
            rec["attempts"] = out[i].get("attempts", 1) + 1
            out[i] = rec
        else:
            if rid is not None:
                where[rid] = len(out)
            out.append(rec)
    return [pool_repeats(r, finished.get(r.get("run_id") or "", [])) if r.get("status") == "ok" else r for r in out]


def read_result_files(paths, repeats: bool = False) -> tuple[list[dict], dict[str, str]]:
    """The records of several results files as one sweep, for a report over sweeps made on
    different days (the 2-rank runs of one, the 4-rank runs of another): each file is read
    as :func:`read_results` reads it, then a run in a later file replaces that run's record
    from an earlier file (its own prediction and profile go with it; measurements are not
    pooled across files). Returns the records in first-seen order and ``{run_id: the file
    whose record was replaced}``.

    ``repeats``: the files are sweeps of the same runs made one after the other (a blind
    sweep repeated to see how much the machine varies), and a run in several files is a
    repeat, pooled as :func:`read_results` pools the attempts in one file (the latest
    attempt's prediction and profile; nothing is replaced)."""
    if repeats:
        from .results_file import read_records

        recs = [{**rec, "_source_file": str(path)} for path in paths for rec in read_records(Path(path))]
        return _collect(recs), {}
    out: list[dict] = []
    where: dict[str, int] = {}
    replaced: dict[str, str] = {}
    for path in paths:
        for rec in read_results(path):
            rid = rec.get("run_id")
            if rid is not None and rid in where:
                replaced[rid] = str(out[where[rid]].get("_source_file", ""))
                out[where[rid]] = {**rec, "_source_file": str(path)}
                continue
            if rid is not None:
                where[rid] = len(out)
            out.append({**rec, "_source_file": str(path)})
    return out, replaced


def _same_harness(a: dict, b: dict) -> bool:
    """Two finished attempts of a run measured the same thing: same host and core count,
    same PS transport (the first exp2 attempts ran TensorPipe with its default transports,
    later ones uv only: different step times, not repeats)."""
    ma, mb = a.get("measured") or {}, b.get("measured") or {}
    ha, hb = a.get("host") or {}, b.get("host") or {}
    return (
        ma.get("transport") == mb.get("transport")
        and ha.get("hostname") == hb.get("hostname")
        and ha.get("cpu_cores") == hb.get("cpu_cores")
    )


# A validation record's fields that describe its measurement rather than its configuration
# or prediction (validate/run.py writes them).
_MEASUREMENT_KEYS = (
    "started",
    "finished",
    "measured",
    "host_cpu",
    "host_cpu_before",
    "wall_s",
    "workdir",
    "host_min_available_bytes",
    "host",
    "command",
    "returncode",
)


def pool_repeats(latest: dict, finished: list[dict]) -> dict:
    """``latest`` with its run-to-run varying figures pooled over the repeats in ``finished``
    (its finished attempts measured the same way as it): steady step times (median and
    spread of the pooled steps), training time (mean) and the steady-state staleness
    (pooled histogram of the attempts that logged it). Memory, bytes, the busy fraction
    and the test accuracy stay the latest attempt's;
    ``measured.repeats`` keeps each repeat's own step median, training time and start.
    Repeats measured on a busy host are left out when a quiet one exists
    (``measured.repeats_excluded``); if the latest is one of them, the latest quiet repeat's
    measurement stands in for it."""
    from ..calibrate.host_load import busy_note
    from .metrics import settled_steps, staleness_summary, step_stats  # metrics re-exports this module

    reps = [r for r in finished if _same_harness(r, latest)]
    # A repeat measured while other processes were busy (validate.run's host_cpu, more than
    # host_load.BUSY_CORES) timed the contention too: with a quiet repeat of the same run
    # beside it, it is left out of the pool, and listed.
    notes = [busy_note(r) for r in reps]
    busy = [(r, why) for r, why in zip(reps, notes) if why]
    if len(busy) == len(reps):  # none quiet: nothing to prefer
        busy = []
    reps = [r for r, why in zip(reps, notes) if not (busy and why)]
    if len(reps) < 2 and not busy:
        return latest
    out = copy.deepcopy(latest)
    if busy and busy_note(latest):
        # the record shown is the latest quiet repeat's measurement (the latest prediction stays)
        for k in _MEASUREMENT_KEYS:
            out.pop(k, None)
            if k in reps[-1]:
                out[k] = copy.deepcopy(reps[-1][k])
    m = out.setdefault("measured", {})
    if busy:
        m["repeats_excluded"] = [
            {
                "started": r.get("started"),
                "step_median_s": ((r.get("measured") or {}).get("step_time_s") or {}).get("median"),
                "why": why,
            }
            for r, why in busy
        ]
    if len(reps) < 2:
        return out
    ms = [r.get("measured") or {} for r in reps]
    steps = [t for x in ms for t in (x.get("steady_step_times_s") or [])]
    if steps:
        m["step_time_s"] = step_stats(steps)
        m["steady_step_times_s"] = steps
        # each repeat has its own warm-up transient: truncated before pooling
        m["settled_step_times_s"] = [t for r in reps for t in settled_steps(r)]
    totals = [x["total_time_s"] for x in ms if x.get("total_time_s") is not None]
    if totals:
        m["total_time_s"] = statistics.fmean(totals)
    over = [x.get("profiling_overhead_s") for x in ms]
    if all(o is not None for o in over):  # the mean of each repeat's training time without it
        m["profiling_overhead_s"] = statistics.fmean(o for o in over if o is not None)
    else:
        m.pop("profiling_overhead_s", None)
    # Attempts whose server did not log each update have no steady-state
    # histogram: the steady state is pooled over those that have one.
    hists = [x["staleness_steady"].get("histogram") for x in ms if x.get("staleness_steady")]
    if len(hists) > 1 and all(hists):
        pooled: dict[str, int] = {}
        for h in hists:
            for k, v in h.items():
                pooled[k] = pooled.get(k, 0) + int(v)
        m["staleness_steady"] = staleness_summary([int(k) for k, v in pooled.items() for _ in range(v)])
    m["repeats"] = [
        {
            "started": r.get("started"),
            "step_median_s": (x.get("step_time_s") or {}).get("median"),
            "total_time_s": x.get("total_time_s"),
            "test_accuracy": x.get("test_accuracy"),
            "staleness_steady_mean": (x.get("staleness_steady") or {}).get("mean"),
        }
        for r, x in zip(reps, ms)
    ]
    return out


# Summaries of a measurement: validate.measure uses them for each run, pool_repeats for the
# steps or updates of several runs together, so both are summarised by one rule.
