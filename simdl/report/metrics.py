"""Measured-vs-predicted pairs of a validation results file, and their errors.

One place defines which measured figure is compared with which predicted one (both
sides' origin in words, style.md section 8); the Markdown report, the figures and the
tests all read them from here. Error is signed relative error ``(predicted - measured)
/ measured``; MAPE is the mean of its absolute values.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .results_read import pool_repeats, read_result_files, read_results  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    unit: str
    measured_origin: str
    predicted_origin: str
    measured: Callable[[dict], Any]
    predicted: Callable[[dict], Any]
    applies: Callable[[dict], bool] = lambda r: True


def _m(r: dict) -> dict:
    return r.get("measured") or {}


def _client_server(strategy) -> bool:
    from ..strategies import registry

    return registry.is_client_server(str(strategy or ""))


def _is_async_ps(r: dict) -> bool:
    from ..strategies import registry

    return registry.is_stale(r["spec"]["strategy"])


METRICS: tuple[Metric, ...] = (
    Metric(
        "step_time",
        "steady-state step time",
        "s",
        "median wall time of the steps after warm-up and the profiled step (slowest rank per step; PS: all "
        "workers' iterations pooled), time.perf_counter",
        "Result.iteration_time_s",
        lambda r: _m(r).get("step_time_s", {}).get("median"),
        lambda p: p.get("iteration_time_s"),
    ),
    # The same steps without the transient the fixed warm-up left in (mser_truncation):
    # a check of the rule above, shown beside it, not a replacement of the goal's figure.
    Metric(
        "settled_step_time",
        "step time, initial transient removed",
        "s",
        "median of the steady-state steps above after the MSER truncation of their initial transient "
        "(White 1997; per worker for PS, per repeat when pooled)",
        "Result.iteration_time_s",
        lambda r: _settled_median(r),
        lambda p: p.get("iteration_time_s"),
    ),
    Metric(
        "total_time",
        "training time",
        "s",
        "wall time of all training epochs (evaluation excluded; includes warm-up and the profiled step)",
        "Result.total_time_s",
        lambda r: _m(r).get("total_time_s"),
        lambda p: p.get("total_time_s"),
    ),
    # The harness profiles a few steps (memory and busy time), which a user's training does
    # not; runs that recorded every step say what that added (validate/run.py profiling_overhead).
    Metric(
        "total_time_unprofiled",
        "training time without the harness's profiling",
        "s",
        "training time above less the profiled steps' excess over the median steady step and the "
        "profiler's stop (runs that recorded every step's time)",
        "Result.total_time_s",
        lambda r: (
            _m(r)["total_time_s"] - _m(r)["profiling_overhead_s"]
            if _m(r).get("profiling_overhead_s") is not None and _m(r).get("total_time_s") is not None
            else None
        ),
        lambda p: p.get("total_time_s"),
        applies=lambda r: _m(r).get("profiling_overhead_s") is not None,
    ),
    Metric(
        "peak_memory",
        "peak memory per rank (allocator)",
        "B",
        "largest rank's peak of live CPU-allocator bytes over the profiled steady steps (torch.profiler "
        "profile_memory allocations paired with their frees, from before the model was built; a "
        "running sum would count gloo's unreported frees as live)",
        "Result.peak_tensor_bytes (what torch.cuda.max_memory_allocated would report)",
        lambda r: _m(r).get("peak_allocated_bytes"),
        lambda p: p.get("peak_tensor_bytes"),
    ),
    Metric(
        "busy",
        "compute busy fraction",
        "",
        "union of aten op intervals on the training thread / step wall time (torch.profiler)",
        "Result.gpu_utilization (compute-stream busy fraction)",
        lambda r: _m(r).get("busy_fraction"),
        lambda p: p.get("gpu_utilization"),
    ),
    Metric(
        "comm_bytes",
        "bytes sent per rank per step",
        "B",
        "collective payloads the backend ran (torch.profiler gloo:* records) x ring factor; PS: pushed "
        "gradient bytes counted exactly",
        "Result.comm_bytes_per_iteration",
        lambda r: _m(r).get("comm_sent_bytes_per_step"),
        lambda p: p.get("comm_bytes_per_iteration"),
        applies=lambda r: r["spec"]["ranks"] > 1,
    ),
    Metric(
        "staleness",
        "mean staleness of applied updates",
        "updates",
        "server version counter at application minus the version the worker pulled; steady state (updates "
        "computed after the worker's warm-up steps, applied while every worker still trained) where the run "
        "logged it, else every update",
        "Result.staleness.mean",
        lambda r: _staleness(r).get("mean"),
        lambda p: (p.get("staleness") or {}).get("mean"),
        applies=_is_async_ps,
    ),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


def _staleness(r: dict) -> dict:
    """The measured staleness summary compared with the prediction: the steady-state one
    when the run logged it (a server that logged each update), else that of every update."""
    m = _m(r)
    return m.get("staleness_steady") or m.get("staleness") or {}


def mser_truncation(values: list[float]) -> int:
    """How many leading values are an initial transient, by the MSER rule (White 1997, "An
    effective truncation heuristic for bias reduction in simulation output", Simulation
    69(6); White, Cobb & Spratt 2000): the ``d`` that minimises the squared standard error of
    the mean of the values kept, ``sum((x_i - mean)^2 for i >= d) / (n - d)^2``, over ``d <=
    n / 2`` (beyond half the statistic rests on too few values to mean anything). No
    parameter: a steady run gives 0 or a value or two, a run still warming up loses its
    slow start. The earliest ``d`` wins a tie."""
    n = len(values)
    best, best_d = math.inf, 0
    for d in range(0, n // 2 + 1):
        kept = values[d:]
        mean = math.fsum(kept) / len(kept)
        stat = math.fsum((x - mean) ** 2 for x in kept) / len(kept) ** 2
        if stat < best * (1 - 1e-12):
            best, best_d = stat, d
    return best_d


def settled_steps(r: dict) -> list[float]:
    """The run's steady-state steps without their initial transient (:func:`mser_truncation`).
    SPMD ranks step in lockstep: one sequence. PS workers step on their own and their
    sequences are pooled one after another (validate/run.py), each with its own start: each is
    truncated alone. A pooled record of repeats carries the concatenation of each repeat's own
    settled steps (:func:`pool_repeats`)."""
    m = _m(r)
    if m.get("settled_step_times_s") is not None:
        return list(m["settled_step_times_s"])
    steps = list(m.get("steady_step_times_s") or [])
    if not steps:
        return []
    spec = r.get("spec") or {}
    workers = int(spec.get("ranks") or 1) if _client_server(spec.get("strategy")) else 1
    if workers > 1 and len(steps) % workers == 0:
        k = len(steps) // workers
        chunks = [steps[i * k : (i + 1) * k] for i in range(workers)]
    elif workers > 1:  # unequal workers: where one ends is unknown, so nothing is cut
        return steps
    else:
        chunks = [steps]
    return [t for c in chunks for t in c[mser_truncation(c) :]]


def _settled_median(r: dict) -> float | None:
    steps = settled_steps(r)
    return statistics.median(steps) if steps else None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between order statistics."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def step_stats(step_times: list[float]) -> dict[str, float]:
    """Median and spread of steady-state step times (seconds)."""
    if not step_times:
        return {"median": float("nan"), "p10": float("nan"), "p90": float("nan"), "n": 0}
    return {
        "median": statistics.median(step_times),
        "p10": percentile(step_times, 0.1),
        "p90": percentile(step_times, 0.9),
        "mean": statistics.fmean(step_times),
        "n": len(step_times),
    }


def staleness_summary(values: list[int]) -> dict[str, Any]:
    """Distribution of the staleness of applied updates (server version counter deltas)."""
    if not values:
        return {"n": 0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0, "histogram": {}}
    hist: dict[str, int] = {}
    for v in values:
        hist[str(int(v))] = hist.get(str(int(v)), 0) + 1
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": float(max(values)),
        "histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
    }


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None:
        return None
    try:
        p, m = float(predicted), float(measured)
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(p) and math.isfinite(m)):
        return None
    if m == 0:
        return 0.0 if p == 0 else None
    return (p - m) / abs(m)


def repeat_floor(records: list[dict]) -> dict[str, float] | None:
    """The machine's own reproducibility, scored as a prediction would be: each repeat's step
    median (``measured.repeats``, from :func:`pool_repeats`) taken as the prediction of every
    other repeat of the same run, over every ordered pair. No model can be told apart from
    the machine's change between two runs of one configuration below this error: a perfect
    prediction of one repeat scores it against the other. ``None`` without repeated runs."""
    errs, runs = [], 0
    for r in records:
        meds = [x["step_median_s"] for x in (_m(r).get("repeats") or []) if x.get("step_median_s")]
        if len(meds) < 2:
            continue
        runs += 1
        errs += [
            abs(e)
            for i, a in enumerate(meds)
            for j, b in enumerate(meds)
            if i != j and (e := rel_error(a, b)) is not None
        ]
    if not errs:
        return None
    return {"runs": runs, "pairs": len(errs), "mape": statistics.fmean(errs), "max": max(errs)}


def pairs(records: list[dict], metric: Metric, engine: str = "analytic") -> list[tuple[dict, float, float, float]]:
    """(record, measured, predicted, error) for every finished run the metric applies to."""
    out = []
    for r in records:
        if r.get("status") != "ok" or not metric.applies(r):
            continue
        pred = (r.get("predicted") or {}).get(engine) or {}
        if "error" in pred:
            continue
        m, p = metric.measured(r), metric.predicted(pred)
        e = rel_error(p, m)
        if e is not None:
            out.append((r, float(m), float(p), e))
    return out


def summary(records: list[dict], engine: str = "analytic", keys: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Per metric: n, MAPE, max |error|, mean signed error (fractions)."""
    out: dict[str, dict[str, float | None]] = {}
    for metric in METRICS:
        if keys and metric.key not in keys:
            continue
        ps = pairs(records, metric, engine)
        errs = [e for *_, e in ps]
        if not errs:
            out[metric.key] = {"n": 0, "mape": None, "max": None, "bias": None}
            continue
        out[metric.key] = {
            "n": len(errs),
            "mape": sum(abs(e) for e in errs) / len(errs),
            "max": max(abs(e) for e in errs),
            "bias": sum(errs) / len(errs),
        }
    return out


def engines_present(records: list[dict]) -> list[str]:
    found = []
    for r in records:
        for eng, v in (r.get("predicted") or {}).items():
            if eng != "kwargs" and isinstance(v, dict) and "error" not in v and eng not in found:
                found.append(eng)
    return found
