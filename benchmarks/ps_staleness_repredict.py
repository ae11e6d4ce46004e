"""Recorded async and SSP runs predicted again with today's code: how far each engine's mean
staleness is from the measured steady-state staleness, per processor.

Each record's own prediction arguments (``predicted.kwargs``) are predicted again with the
shipped profile of the processor it ran on (the profile paths in old records point at
clones that are gone). These records were measured before today's code, so the figures are
not blind: they show how a model change moves the error on data already seen.

Usage: python benchmarks/ps_staleness_repredict.py [RESULTS.jsonl=PROFILE ...]
Without arguments: the 4-rank PS sweeps of the EPYC (cpu-epyc-x4), the Intel Xeon
(cpu-local-x4) and the Emerald Rapids (cpu-xeon-emr-x4) in lab/records/.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import simdl
from simdl.calibrate.records import read_jsonl

ROOT = Path(__file__).resolve().parents[1] / "lab" / "records"
DEFAULT = {
    **{
        f: "lab/profiles/cpu-epyc-x4.yaml"
        for f in (
            "epyc-x4.jsonl.xz",
            "epyc-x4-2.jsonl.xz",
            "epyc-x4-drift.jsonl.xz",
            "epyc-x4-events.jsonl.xz",
            "epyc-x4-ssp.jsonl.xz",
        )
    },
    "intel-r4.jsonl.xz": "lab/profiles/cpu-local-x4.yaml",
    **{
        f: "lab/profiles/cpu-xeon-emr-x4.yaml"
        for f in ("xeon-emr-x4.jsonl.xz", "xeon-emr-x4-async-r2.jsonl.xz", "xeon-emr-x4-ps-s31.jsonl.xz")
    },
}


def measured_staleness(rec: dict) -> float | None:
    m = rec.get("measured") or {}
    return (m.get("staleness_steady") or m.get("staleness") or {}).get("mean")


def main(argv: list[str]) -> int:
    pairs = (
        [a.split("=", 1) for a in argv]
        if argv
        else [(str(ROOT / f), str(ROOT.parents[1] / p)) for f, p in DEFAULT.items()]
    )
    if any(len(p) != 2 for p in pairs):
        print("usage: ps_staleness_repredict.py [RESULTS.jsonl=PROFILE ...]", file=sys.stderr)
        return 2
    errors: dict[str, list[tuple[float, float]]] = {}
    cache: dict[str, tuple] = {}
    for path, profile in pairs:
        for rec in read_jsonl(Path(path)):
            rid = rec.get("run_id", "")
            if rec.get("status") != "ok" or not any(s in rid for s in ("-ps-async-", "-ps-ssps2-")):
                continue
            measured = measured_staleness(rec)
            if not measured:
                continue
            kw = dict(rec["predicted"]["kwargs"], cluster=profile)
            if rec["spec"]["strategy"] == "ps-ssp":
                kw["staleness_bound"] = rec["spec"]["staleness_bound"]
            key = json.dumps(kw, sort_keys=True)
            if key not in cache:
                cache[key] = (simdl.predict(engine="sim", **kw), simdl.predict(engine="analytic", **kw))
            sim, ana = cache[key]
            e_sim = 100 * (sim.staleness.mean / measured - 1)
            e_ana = 100 * (ana.staleness.mean / measured - 1)
            errors.setdefault(profile, []).append((e_sim, e_ana))
            print(
                f"{Path(path).name:28s} {rid[5:32]:27s} measured {measured:.2f}  sim {sim.staleness.mean:.2f} "
                f"({e_sim:+.1f} %)  analytic {ana.staleness.mean:.2f} ({e_ana:+.1f} %)"
            )
    every = [e for v in errors.values() for e in v]
    for name, errs in list(errors.items()) + [("all", every)]:
        for k, engine in enumerate(("sim", "analytic")):
            xs = [abs(e[k]) for e in errs]
            print(
                f"{name:16s} {engine:8s} n={len(xs):2d} mean abs {statistics.mean(xs):.1f} %  max {max(xs):.1f} %  "
                f"within 10 %: {sum(x <= 10 for x in xs)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
