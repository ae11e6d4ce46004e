"""Fit DeepSpeed ZeRO's host costs (strategies.zero) to real DeepSpeed runs on CPU ranks, and
check them on runs they were not fitted on.

``python -m validate.zero_host_fit RECORDS.jsonl[.xz] ... [--fit resnet18/16] [--cluster cpu-local]``

RECORDS are validate.deepspeed_cpu's results. Every run is predicted again with the current
code and ``--cluster``, its ZeRO costs replaced by the candidates of simdl.calibrate.zero_fit.
The fit is to the runs of ``--fit`` (model/batch) alone; every other model and batch is held
out. A configuration's measured step is the smallest over its repeats in RECORDS of each run's
fastest steady step (``--statistic min-step``) or of its median (``median``): the least
contended, on a host shared with other jobs, where contention only adds time. It is compared twice: with the prediction,
and over stage 0 (the prediction times the measured / predicted step of the same model and
batch at stage 0, so that what the host and DeepSpeed's engine do to every stage alike cancels,
and the ZeRO costs are fitted in the profile's own time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import lzma
import sys
import tempfile
from pathlib import Path

from simdl.calibrate.zero_fit import ZeROHostFit
from simdl.cluster.spec import load_cluster
from simdl.errors import SimdlError
from simdl.provenance import Sourced


def host_of(r: dict) -> str:
    h = r.get("host") or {}
    return f"{h.get('cpu_model')} ({', '.join(f'{k} {v}' for k, v in sorted((h.get('cpu_caches') or {}).items()))})"


def load_records(paths: list[str]) -> list[dict]:
    """The finished runs of ``paths``, all of one processor (repeats on another are not repeats)."""
    out = []
    for p in paths:
        opener = lzma.open if p.endswith(".xz") else open
        with opener(p, "rt") as f:
            for line in f:
                r = json.loads(line)
                if r.get("status") == "ok":
                    r["_file"] = p
                    out.append(r)
    hosts = sorted({host_of(r) for r in out})
    if len(hosts) > 1:
        raise SimdlError(f"records of {len(hosts)} processors ({'; '.join(hosts)}); accepted: one processor's records")
    return out


class Predictor:
    """iteration_time_s of a record's run, with candidate ZeRO costs (memoised)."""

    def __init__(self, cluster: str, tmp: Path):
        self.spec, self.tmp, self.cache = load_cluster(cluster), tmp, {}

    def __call__(self, theta, rec: dict) -> float:
        import simdl

        key = (round(float(theta[0]), 12), round(float(theta[1]), 12), rec["run_id"])
        if key not in self.cache:
            cfg = self.tmp / f"{rec['run_id']}.json"
            cfg.write_text(json.dumps(rec["ds_config"]))
            z = self.spec.strategies.with_zero(
                param_overhead=Sourced(key[0], "assumed", "candidate") if key[0] else None,
                module_overhead=Sourced(key[1], "assumed", "candidate") if key[1] else None,
            )
            kw = {k: v for k, v in rec["prediction"]["kwargs"].items() if k != "cluster"}
            spec = dataclasses.replace(self.spec, strategies=z)
            self.cache[key] = simdl.predict(**kw, cluster=spec, deepspeed_config=str(cfg)).iteration_time_s
        return self.cache[key]


def step_of(r: dict, statistic: str) -> float:
    """``min-step``: the run's fastest steady step (of the slowest rank); ``median``: its median."""
    m = r["measured"]
    return min(m["steady_step_times_s"]) if statistic == "min-step" else m["step_time_s"]["median"]


def points(records: list[dict], pred: Predictor, statistic: str = "min-step") -> list[dict]:
    """One point per stage 1-3 run configuration: its least contended measurement (the
    smallest of its repeats' steps, :func:`step_of`, over the records' runs of the same
    run_id), with the same for stage 0 of its model and batch."""
    steps: dict[str, list[float]] = {}
    recs: dict[str, dict] = {}
    for r in records:
        steps.setdefault(r["run_id"], []).append(step_of(r, statistic))
        recs[r["run_id"]] = r
    zero = {(r["run"]["model"], r["run"]["batch_size"]): r["run_id"] for r in recs.values() if r["run"]["stage"] == 0}
    pts = []
    for rid, r in sorted(recs.items()):
        run = r["run"]
        z = zero.get((run["model"], run["batch_size"]))
        if run["stage"] == 0 or z is None:
            continue
        m0, p0 = min(steps[z]), pred((0.0, 0.0), recs[z])
        pts.append(
            {
                "model": run["model"],
                "batch": run["batch_size"],
                "stage": run["stage"],
                "measured_s": min(steps[rid]),
                "repeats": sorted(steps[rid]),
                "rec": r,
                "scale": m0 / p0,
                "stage0": (m0, p0, len(steps[z])),
            }
        )
    return pts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.zero_host_fit", description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+")
    p.add_argument("--fit", default="resnet18/16", help="MODEL/BATCH the costs are fitted on")
    p.add_argument("--cluster", default="cpu-local")
    p.add_argument("--statistic", choices=("min-step", "median"), default="min-step", help="a run's step")
    a = p.parse_args(argv)
    fit_model, fit_batch = a.fit.split("/")
    with tempfile.TemporaryDirectory() as td:
        pred = Predictor(a.cluster, Path(td))
        records = load_records(a.records)
        print(f"{len(records)} runs on {host_of(records[0])}, predicted with {a.cluster}")
        pts = points(records, pred, a.statistic)

        def over_stage0(theta, pt):
            return pred(theta, pt["rec"]) * pt["scale"]

        fit_pts = [q for q in pts if q["model"] == fit_model and q["batch"] == int(fit_batch)]
        # Stage 1's pass keeps the profile's measured value (benchmarks/zero1_vs_zero2_cpu.py); the
        # other two costs are fitted to the stage 1-3 steps of the fit's model and batch.
        est = ZeROHostFit(held_out=False, host_stages=(1, 2, 3), fit_loop=False).fit(fit_pts, over_stage0)
        theta = (est.param_s_, est.module_s_)
        loop = pred.spec.strategies.zero.loop_overhead
        fitted = {k: v for k, v in est.params().items() if k != "stage1_loop_overhead_us"}
        print(
            f"fitted on {a.fit} ({len(fit_pts)} runs): "
            + ", ".join(f"{k} {v:.0f}" for k, v in fitted.items())
            + f"; stage1_loop_overhead_us {loop.value * 1e6 if loop else 0:.0f} (the profile's, not fitted)"
        )
        print(
            "run | repeats | stage 0: measured (least) / simdl ms | measured (least) ms | simdl before | after "
            "| over stage 0: before | after"
        )
        for q in sorted(pts, key=lambda q: (q not in fit_pts, q["model"], q["batch"], q["stage"])):
            m, r = q["measured_s"], q["rec"]
            b, f = pred((0.0, 0.0), r), pred(theta, r)
            print(
                f"{'fit ' if q in fit_pts else 'held'} zero{q['stage']} {q['model']} b{q['batch']} | "
                f"{len(q['repeats'])} ({', '.join(f'{x * 1e3:.0f}' for x in q['repeats'])}) | "
                f"{q['stage0'][0] * 1e3:.0f} / {q['stage0'][1] * 1e3:.0f} | {m * 1e3:.0f} | "
                f"{b * 1e3:.0f} ({b / m - 1:+.1%}) | {f * 1e3:.0f} ({f / m - 1:+.1%}) | "
                f"{b * q['scale'] / m - 1:+.1%} | {f * q['scale'] / m - 1:+.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
