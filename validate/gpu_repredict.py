"""Predict the configurations of a :mod:`validate.gpu_check` run again with today's simdl.

``python -m validate.gpu_repredict lab/records/gpu-h200 [-o NAME.jsonl.xz] [--fitted RUN_ID ...]``

Measurements are kept as they are; only the ``predicted`` side changes. Each configuration
is predicted from its own settings (model, data set, batch, precision, steps) on the preset
of the run's device with the CUDA version of the run's torch build (``run.json``), exactly
as :mod:`validate.gpu_check` predicts before it measures. The records go to ``NAME`` in the
same folder (beside ``run.json``, so ``simdl report`` reads them with their environment),
written as they are made. ``--fitted``: the configurations a fitted value of the GPU file
came from; the summary prints each figure's error over the others too (held out).
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
from pathlib import Path

from simdl.errors import SimdlError


def read_records(path: Path) -> list[dict]:
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def config_of(rec: dict) -> dict:
    """The settings :func:`validate.gpu_predict.predict_config` reads, from a record."""
    kw = rec["predicted"]["kwargs"]
    return {
        "model": kw["model"],
        "dataset": kw["dataset"],
        "batch": kw["batch_size"],
        "precision": kw["precision"],
        "steps": kw["train_samples"] // kw["batch_size"],
    }


def repredict(folder: Path, out: Path) -> list[dict]:
    from simdl.memory.device import cuda_major

    from .gpu_predict import cluster_without_loader, predict_config, preset_for_device

    info = json.loads((folder / "run.json").read_text())
    env = info.get("env") or {}
    cuda = cuda_major(env["cuda"]) if env.get("cuda") else None
    cluster = cluster_without_loader(preset_for_device(env.get("device") or "cpu"), cuda)
    records = read_records(folder / "results.jsonl.xz")
    out.unlink(missing_ok=True)
    new = []
    with lzma.open(out, "wt") as f:
        for rec in records:
            r = dict(rec, predicted=predict_config(config_of(rec), cluster), repredicted_cuda=cuda)
            f.write(json.dumps(r) + "\n")
            new.append(r)
    return new


def _errors(records: list[dict], env: dict, leave_out: set[str]) -> dict[str, list[float]]:
    from simdl.report.gpu import _err, _sides

    out: dict[str, list[float]] = {"step": [], "alloc": [], "reserved": [], "device": []}
    for r in records:
        if r.get("status") != "ok" or r["run_id"] in leave_out:
            continue
        s = _sides(r, env)
        for key in out:
            e = _err(*s[key])
            if e is not None:
                out[key].append(e)
    return out


def summary(records: list[dict], env: dict, fitted: set[str]) -> list[str]:
    lines = []
    for label, leave_out in (("all", set()), ("held out (fit configurations left out)", fitted)):
        if label != "all" and not fitted:
            continue
        lines.append(f"{label}:")
        for key, e in _errors(records, env, leave_out).items():
            if e:
                lines.append(
                    f"  {key:9s} MAPE {100 * statistics.fmean(abs(x) for x in e):5.1f} %  signed "
                    f"{100 * statistics.fmean(e):+6.1f} %  max |err| {100 * max(abs(x) for x in e):5.1f} %  "
                    f"within 3 %: {sum(abs(x) <= 0.03 for x in e)} of {len(e)}"
                )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.gpu_repredict", description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a gpu_check output folder (results.jsonl.xz and run.json)")
    p.add_argument("-o", "--output", default="repredicted.jsonl.xz", help="file name in that folder")
    p.add_argument("--fitted", nargs="*", default=[], help="run ids a fitted value came from")
    a = p.parse_args(argv)
    folder = Path(a.folder)
    try:
        for need in ("run.json", "results.jsonl.xz"):
            if not (folder / need).is_file():
                raise SimdlError(f"{folder}: no {need}; accepted: a validate.gpu_check output folder")
        records = repredict(folder, folder / a.output)
    except SimdlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = json.loads((folder / "run.json").read_text()).get("env") or {}
    print(f"wrote {folder / a.output}: {len(records)} configurations predicted again")
    print("\n".join(summary(records, env, set(a.fitted))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
