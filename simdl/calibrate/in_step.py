"""Collectives inside measured training steps: exposed communication, and how much slower
the calls run than on the idle machine.

calibration/strategies.py logs every collective call of its FSDP steps with the host clock
at which each rank entered and left it. On CPU (gloo) the call holds the training thread
until the collective is done (benchmarks/fsdp2_blocking_cpu.py), so:

* the time in the calls is the step's exposed communication;
* a call cannot finish before the last rank has entered it: the time from the latest entry
  to the exit is the *transfer*, the rest of a rank's time in the call is *waiting* for a
  peer that was still computing (ranks of one host share its clock, so entries compare);
* the transfer divided by the idle-machine curve of the same call (calibration/
  collectives.py) is the in-step slowdown of the collective itself.

:func:`in_step_collectives` pairs the ranks' calls (every rank makes the same calls in
the same order); :func:`summarise` sets them against the profile's idle curves and against
what the profile predicts for the same calls (a check of how the profile splits a step's
time between its collectives and the work around them, which step times alone cannot
separate); :class:`BlockingFit` fits the blocking calls' in-step factors and wait from them.

The same steps are profiled once each (``profiled_step``: their time by group of ops,
simdl.calibrate.step_groups); :class:`CopyFit` fits from them how much slower the
strategies' buffer copies run inside a step than on the idle machine.
"""

from __future__ import annotations

import statistics
from typing import Callable


def in_step_collectives(records: list[dict]) -> dict | None:
    """Per-call times of one strategy measurement from its ranks' records (rank order).

    Returns ``{"world", "steps", "calls": [(collective, bytes, in_call_s, transfer_s), ...]}``
    with ``in_call_s`` the mean over the ranks, or None when a rank logged no calls or the
    ranks' call sequences differ."""
    logs: list[list] = [r.get("collective_calls") or [] for r in records]
    if not logs or any(not c for c in logs):
        return None
    n = len(logs[0])
    if any(len(c) != n for c in logs):
        return None
    calls = []
    for per_rank in zip(*logs):
        step, coll, nbytes = per_rank[0][:3]
        if any(tuple(c[:3]) != (step, coll, nbytes) for c in per_rank):
            return None
        last_in = max(c[3] for c in per_rank)
        in_call = statistics.fmean(c[4] - c[3] for c in per_rank) / 1e9
        transfer = statistics.fmean(max(c[4] - last_in, 0) for c in per_rank) / 1e9
        calls.append((coll, int(nbytes), in_call, transfer))
    steps = len({c[0] for c in logs[0]})
    return {"world": len(records), "steps": steps, "calls": calls}


def summarise(calls: dict, idle: Callable[[str, float], float], model: Callable[[str, float], float]) -> dict:
    """Per step and per collective: calls, time in the calls (exposed communication on a
    host that blocks), of it waiting for peers and transfer, the idle curves' time of the
    same calls, and the profile's prediction of them (``model``: what the engines charge a
    call in a step)."""
    steps = max(calls["steps"], 1)
    by: dict[str, dict] = {}
    for coll, nbytes, in_call, transfer in calls["calls"]:
        d = by.setdefault(coll, {"calls": 0, "in_call_s": 0.0, "transfer_s": 0.0, "idle_s": 0.0, "model_s": 0.0})
        d["calls"] += 1
        d["in_call_s"] += in_call
        d["transfer_s"] += transfer
        d["idle_s"] += idle(coll, nbytes)
        d["model_s"] += model(coll, nbytes)
    out = {}
    for coll, d in sorted(by.items()):
        per = {k: v / steps for k, v in d.items()}
        per["waiting_s"] = per["in_call_s"] - per["transfer_s"]
        per["transfer_over_idle"] = per["transfer_s"] / per["idle_s"] if per["idle_s"] > 0 else None
        per["model_over_in_call"] = per["model_s"] / per["in_call_s"] if per["in_call_s"] > 0 else None
        out[coll] = per
    total = {
        k: sum(v[k] for v in out.values())
        for k in ("calls", "in_call_s", "transfer_s", "waiting_s", "idle_s", "model_s")
    }
    total["transfer_over_idle"] = total["transfer_s"] / total["idle_s"] if total["idle_s"] > 0 else None
    total["model_over_in_call"] = total["model_s"] / total["in_call_s"] if total["in_call_s"] > 0 else None
    return {"per_step": out, "total": total}


class BlockingFit:
    """Estimator: ``fit(measurements, idle_parts)`` -> self with ``factors_`` (per collective:
    in-step transfer over idle wire time, pooled over every logged call), ``wait_`` (time in
    the calls waiting for the last peer, per second of the step's compute, pooled), and
    ``held_out_`` (per model: the in-call time per step predicted from the *other* models'
    factors and wait, against the measured one).

    ``measurements``: ``{"model", "key", "compute_s", "calls": in_step_collectives(...)}``
    rows, ``compute_s`` the model's step without communication (the strategy stage's
    ``local`` step); ``idle_parts(collective, bytes)`` -> (fixed cost per call s, wire time s)
    on the idle machine. A step's calls are priced ``sum(fixed + factor x wire) + wait x
    compute``, as the engines price blocking calls (:class:`simdl.analytic.costs.CommCosts`,
    :func:`simdl.analytic.costs.blocking_wait_time`).
    """

    def fit(self, measurements: list[dict], idle_parts: Callable[[str, float], tuple[float, float]]) -> "BlockingFit":
        rows = [m for m in measurements if m["calls"]["calls"]]
        if not rows:
            raise ValueError("BlockingFit needs logged collective calls")
        self._idle = idle_parts
        self.factors_, self.wait_ = self._solve(rows)
        self.n_calls_ = sum(len(m["calls"]["calls"]) for m in rows)
        self.held_out_ = {}
        models = sorted({m["model"] for m in rows})
        if len(models) > 1:
            for model in models:
                factors, wait = self._solve([m for m in rows if m["model"] != model])
                self.held_out_[model] = {m["key"]: self._check(m, factors, wait) for m in rows if m["model"] == model}
        return self

    def _solve(self, rows) -> tuple[dict, float]:
        wire: dict[str, float] = {}
        moved: dict[str, float] = {}
        waited = compute = 0.0
        for m in rows:
            steps = max(m["calls"]["steps"], 1)
            for coll, nbytes, in_call, transfer in m["calls"]["calls"]:
                fixed, w = self._idle(coll, nbytes)
                wire[coll] = wire.get(coll, 0.0) + w / steps
                moved[coll] = moved.get(coll, 0.0) + (transfer - fixed) / steps
                waited += (in_call - transfer) / steps
            compute += m["compute_s"]
        factors = {c: moved[c] / wire[c] if wire[c] > 0 else 1.0 for c in sorted(wire)}
        return factors, max(waited / compute, 0.0) if compute > 0 else 0.0

    def _check(self, m, factors, wait) -> dict:
        steps = max(m["calls"]["steps"], 1)
        measured = sum(c[2] for c in m["calls"]["calls"]) / steps
        pred = wait * m["compute_s"]
        for coll, nbytes, _, _ in m["calls"]["calls"]:
            fixed, w = self._idle(coll, nbytes)
            pred += (fixed + factors.get(coll, 1.0) * w) / steps
        return {"measured_s": measured, "predicted_s": pred, "rel_error": pred / measured - 1.0}


class CopyFit:
    """Estimator: ``fit(points)`` -> self with ``factor_`` (how many times its idle-machine
    time a strategy's buffer copy takes inside a step: ``efficiency.copy_in_step_factor``),
    ``residuals_`` (relative, per point) and ``held_out_`` (per model: its points' copy time
    predicted with the factor fitted on the *other* models).

    ``points``: ``{"model", "key", "measured_s", "predicted_s"}`` rows, one per profiled
    DDP/FSDP step of calibration's strategy stage: ``measured_s`` the step's copy ops on the
    training thread (simdl.calibrate.step_groups) less those of the same model's ``local``
    step (the model's own copies, which its compute rows already price), ``predicted_s`` the
    plan's copy tasks at the idle-machine rates (``Result.step_split_s["copies"]`` at factor
    1). The factor minimises the squared *relative* errors, as the other step fits do:
    ``c = sum(p/m) / sum((p/m)^2)``. Points whose measured or predicted copies are below
    ``min_s`` (a few ms: profiler noise) are left out.
    """

    def __init__(self, *, min_s: float = 5e-3):
        self.min_s = min_s

    def _solve(self, pts) -> float:
        r = [p["predicted_s"] / p["measured_s"] for p in pts]
        return sum(r) / sum(x * x for x in r)

    def fit(self, points: list[dict]) -> "CopyFit":
        pts = [p for p in points if p["measured_s"] >= self.min_s and p["predicted_s"] >= self.min_s]
        if not pts:
            raise ValueError(f"CopyFit needs a step whose measured and predicted copies are at least {self.min_s} s")
        self.points_ = pts
        self.factor_ = self._solve(pts)
        self.residuals_ = [self.factor_ * p["predicted_s"] / p["measured_s"] - 1.0 for p in pts]
        self.held_out_ = {}
        models = sorted({p["model"] for p in pts})
        if len(models) > 1:
            for model in models:
                c = self._solve([p for p in pts if p["model"] != model])
                self.held_out_[model] = {
                    "factor": c,
                    "rel_errors": {
                        p["key"]: c * p["predicted_s"] / p["measured_s"] - 1.0 for p in pts if p["model"] == model
                    },
                }
        return self
