"""Steady-state figures of a finished timeline (:class:`simdl.sim.play.Played`): the iteration
time and busy times over the iterations after the warm-up, the links' bytes and utilisation
over the same window, the PS staleness, and the notes on what the timeline showed.

Busy times are unions of task intervals clipped to the window (simdl.costs.schedule.busy_time);
rank classes are weighted by the ranks they stand for.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from ..result import Staleness
from ..strategies.plan import COMPUTE, PSPlan


@dataclass
class Steady:
    """The steady-state window (``t_start``, ``t_end``), the iteration time with the terms
    ``added`` to the timeline's (interference, blocking wait), the class-weighted busy
    seconds per iteration, the records of each class and the notes so far."""

    t_start: float
    t_end: float
    iteration: float
    compute: float
    comm_busy: float
    any_busy: float
    added: dict[str, float]
    by_class: list[list]
    notes: tuple[str, ...]


def steady_state(played, plan, cluster, warmup: int, iterations: int, notes: tuple[str, ...]) -> Steady:
    """Iteration time and busy times over the steady-state window of each class."""
    is_ps = isinstance(plan, PSPlan)
    ends, classes, run = played.ends, played.classes, played.run
    measured = iterations - warmup
    t_start = max(e[warmup - 1] for e in ends) if warmup > 0 else 0.0
    t_end = max(e[-1] for e in ends)
    # Per class: own steady-state window, busy times per iteration.
    weights = [len(c) for c in classes]
    periods = []
    by_class = _records_by_class(run.records, len(classes))
    busy = [_class_busy(by_class[c], e, warmup, measured, is_ps, run, c) for c, e in enumerate(ends)]
    for c, e in enumerate(ends):
        w0 = e[warmup - 1] if warmup > 0 else 0.0
        periods.append((e[-1] - w0) / measured)
    comp, commb, anyb = (list(x) for x in zip(*busy))
    wsum = sum(weights)

    def mean(xs):
        return sum(x * k for x, k in zip(xs, weights)) / wsum

    iteration = mean(periods) if is_ps else (t_end - t_start) / measured
    notes = tuple(notes)
    if is_ps:
        iteration, notes = _ps_host_floor(cluster, plan, played.durations, iteration, notes)
    compute, comm_busy, any_busy = mean(comp), mean(commb), mean(anyb)
    added = {} if is_ps else _spmd_added(cluster, plan, compute, comm_busy, any_busy)
    iteration += sum(added.values())
    return Steady(
        t_start=t_start,
        t_end=t_end,
        iteration=iteration,
        compute=compute,
        comm_busy=comm_busy,
        any_busy=any_busy,
        added=added,
        by_class=by_class,
        notes=notes,
    )


def _ps_host_floor(cluster, plan, durations, iteration: float, notes: tuple[str, ...]):
    """(iteration, notes), the step floored at the shared host's cores.

    Workers and server on one host's cores (cpu-local: validate runs them as processes
    of one machine): the timeline shares the cores between the computes and the
    server's work (simdl.sim.cores) but leaves out the CPU the transfers take, so the
    step is floored at the cores' operational bound, as the analytic engine's
    (simdl.costs.ps.ps_host_floor). Without it VGG16 async on cpu-xeon-emr-x4
    is predicted 3.45 s against 4.09 s measured (-16 %, lab/records/xeon-emr-x4.jsonl.xz)."""
    from ..costs.ps import ps_host_floor

    host_floor = ps_host_floor(cluster, plan, sum(durations))
    if host_floor > iteration:
        notes = tuple(notes) + (
            f"shared host: the workers' and the server's CPU on {cluster.spec.host.cpu_cores.value:g} cores "
            f"floor the step at {host_floor:.4g} s (the timeline's {iteration:.4g} s leaves out the CPU "
            f"the transfers take; its staleness is the timeline's)",
        )
        iteration = host_floor
    return iteration, notes


def _spmd_added(cluster, plan, compute: float, comm_busy: float, any_busy: float) -> dict[str, float]:
    """The analytic engine's terms the SPMD timeline does not model, added to its step."""
    from ..costs.comm import blocking_wait_time

    interference = cluster.spec.efficiency.comm_compute_interference
    added = {}
    if interference is not None and interference.value > 0.0:
        # The profile's fitted compute/communication interference (simdl calibrate; on CPU gloo's
        # threads take the cores the compute needs): the links model no core contention, so
        # the same correction as the analytic engine's is applied to the simulated overlap.
        added["interference"] = interference.value * max(compute + comm_busy - any_busy, 0.0)
    # Blocking collectives wait for peers still computing (the analytic engine's term).
    added["blocking_wait"] = blocking_wait_time(cluster, plan, compute)
    return added


def link_window(played, warmup: int, measured: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per iteration, mean utilisation) of each link over the first class's
    steady-state window."""
    snapshots, ends = played.snapshots, played.ends
    s0, s1 = snapshots[warmup - 1] if warmup > 0 else None, snapshots[-1]
    bytes_w = s1.bytes - (s0.bytes if s0 else 0.0)
    load_w = s1.load_s - (s0.load_s if s0 else 0.0)
    span = (ends[0][-1] - (ends[0][warmup - 1] if warmup > 0 else 0.0)) or 1.0
    return bytes_w / measured, load_w / span


def staleness_of(plan, run, warmup: int) -> tuple[Staleness, dict[int, int]]:
    """(staleness summary, histogram) of an asynchronous PS run's applied pushes after the
    warm-up (all of them if none is), with the share of pulls the SSP bound held."""
    hist: dict[int, int] = {}
    staleness = Staleness()
    if not isinstance(plan, PSPlan) or plan.synchronous:
        return staleness, hist
    samples = [s for s, it in zip(run.staleness, run.staleness_it) if it >= warmup] or run.staleness
    if samples:
        arr = np.array(samples, dtype=float)
        hist = dict(sorted(Counter(int(x) for x in samples).items()))
        staleness = Staleness(
            mean=float(arr.mean()),
            p50=float(np.percentile(arr, 50)),
            p99=float(np.percentile(arr, 99)),
            max=float(arr.max()),
        )
        pulls = [d for *_, d in run.pulls]  # every pull, as validate/train.py counts them
        if pulls:
            staleness = replace(
                staleness, held_pulls=sum(d > 0 for d in pulls) / len(pulls), held_wait_s=float(np.mean(pulls))
            )
    return staleness, hist


def run_notes(steady: Steady, played, hetero, iterations: int, warmup: int) -> tuple[str, ...]:
    """The notes so far, then: an input-bound step, the heterogeneity drawn, the iterations played."""
    notes = tuple(steady.notes)
    measured = iterations - warmup
    waited = [busy(iv, steady.t_start, steady.t_end) / measured for iv in played.run.data_wait]
    if max(waited, default=0.0) > 1e-3 * steady.iteration:
        notes += (f"input pipeline bound: compute waited up to {max(waited):.4g} s per iteration for data",)
    if hetero.factors or hetero.jittered:
        notes += (
            f"heterogeneity: {len(hetero.factors)} straggler rank(s), jitter {hetero.jitter}"
            f"{':' + format(hetero.jitter_param, 'g') if hetero.jittered else ''}"
            f"{' per worker and step' if hetero.per_step else ''}, seed {hetero.seed}"
            + (f"; from {hetero.source}" if hetero.source else ""),
        )
    notes += (f"simulated {iterations} iterations ({warmup} warm-up); {len(played.classes)} rank class(es)",)
    return notes


def _class_busy(recs, ends, warmup: int, measured: int, is_ps: bool, run, c: int) -> tuple[float, float, float]:
    """Compute-stream, communication and any-kernel busy seconds per iteration of one class
    over its steady-state window."""
    w0 = ends[warmup - 1] if warmup > 0 else 0.0
    w1 = ends[-1]
    comp_iv = [(r.start, r.end) for r in recs if not r.is_comm and r.stream == COMPUTE]
    comm_iv = [(r.start, r.end) for r in recs if r.is_comm]
    if is_ps:
        comm_iv = [(s, t) for (w, _, s, t, _) in run.transfers if w == c]
    return (
        busy(comp_iv, w0, w1) / measured,
        busy(comm_iv, w0, w1) / measured,
        busy(comp_iv + ([] if is_ps else comm_iv), w0, w1) / measured,
    )


def _records_by_class(records, n: int) -> list[list]:
    """The records of each class/worker, in one pass."""
    out: list[list] = [[] for _ in range(n)]
    for r in records:
        out[r.cls].append(r)
    return out


def busy(intervals, lo: float, hi: float) -> float:
    """Seconds within [lo, hi] covered by at least one interval."""
    from ..costs.schedule import busy_time

    clipped = [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]
    return busy_time(clipped)
