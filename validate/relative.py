"""How well simdl predicts one strategy against another, pooled over several sweeps.

``python -m validate.relative RESULTS.jsonl [RESULTS.jsonl ...]``

Each file is read as one sweep, and each run's step time is set against its group's
reference run in the same sweep (simdl.report.validation.relative_steps: DDP, else FSDP
none, else PS sync; same experiment, model, ranks and batch). The pairs of every file are
then pooled by model and strategy. It prints, per pair kind, the number of sweeps, the
median error of the predicted ratio and how many sweeps erred upwards. It also prints each
file's own MAPE of the ratio.

A bias that keeps its sign across sweeps and machines is the model's, not the machine's.
The two runs of a pair ran minutes apart, so a profile's compute times being stale by hours
cancels out of the ratio. Give files measured on different machines, each predicted with its
own machine's profile (validate.repredict remakes the predictions with today's code).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from simdl.errors import SimdlError
from simdl.report.metrics import read_result_files
from simdl.report.validation import relative_steps


def pooled(paths: list[str], engine: str = "analytic") -> tuple[dict[tuple, list[float]], dict[str, list[float]]]:
    """(pair kind -> errors over the files, file -> its pairs' errors); a pair kind is
    (experiment, model, ranks, batch, strategy, reference)."""
    by_kind: dict[tuple, list[float]] = {}
    by_file: dict[str, list[float]] = {}
    for path in paths:
        records, _ = read_result_files([path])
        for x in relative_steps(records, engine):
            by_kind.setdefault(x["group"] + (x["label"], x["reference"]), []).append(x["error"])
            by_file.setdefault(path, []).append(x["error"])
    return by_kind, by_file


def format_pooled(by_kind: dict[tuple, list[float]], by_file: dict[str, list[float]]) -> str:
    lines = [
        "| experiment, model, ranks, batch | strategy / reference | sweeps | median error | erred upwards | errors |",
        "|---|---|---|---|---|---|",
    ]
    for k, errs in sorted(by_kind.items()):
        up = sum(e > 0 for e in errs)
        lines.append(
            f"| {k[0]}, {k[1]}, {k[2]}, {k[3]} | {k[4]} / {k[5]} | {len(errs)} | "
            f"{100 * statistics.median(errs):+.1f}% | {up}/{len(errs)} | "
            f"{' '.join(f'{100 * e:+.0f}' for e in errs)} |"
        )
    every = [abs(e) for errs in by_kind.values() for e in errs]
    lines += ["", "| file | pairs | ratio MAPE | max |", "|---|---|---|---|"]
    for path, errs in by_file.items():
        a = [abs(e) for e in errs]
        lines.append(f"| `{path}` | {len(a)} | {100 * sum(a) / len(a):.1f}% | {100 * max(a):.1f}% |")
    if every:
        lines += [
            "",
            f"All {len(every)} pairs: ratio MAPE {100 * sum(every) / len(every):.1f}%, max {100 * max(every):.1f}%.",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validate.relative", description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="validation results files (JSON lines), one sweep each")
    ap.add_argument("--engine", default="analytic", choices=("analytic", "sim"))
    args = ap.parse_args(argv)
    missing = [p for p in args.results if not Path(p).is_file()]
    if missing:
        print(
            f"error: results file {missing[0]!r} not found; give validation results files (JSON lines)", file=sys.stderr
        )
        return 2
    try:
        by_kind, by_file = pooled(args.results, args.engine)
    except SimdlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not by_kind:
        print(
            "error: no pairs: no file has a model run under two strategies (a reference: ddp, fsdp-none or "
            "ps-sync) in the same sweep",
            file=sys.stderr,
        )
        return 2
    print(format_pooled(by_kind, by_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
