"""The machine's speed at run time: a point of the profile's compute stage, measured again.

A profile describes the machine when it was calibrated, and a CPU VM's speed moves by more
than the validation goal within hours: on 2026-11-26 the same 12 runs, same code and
profile, were 13 % faster (median; 1-29 %) 2.7 h apart (lab/CAMPAIGN.md). A run's error then
mixes the model's error with the machine's drift, and one sweep cannot tell them apart.

So before and after each run, :mod:`validate.run` re-measures one point the profile's
compute stage measured: the run's own model on its dataset, at the calibrated batch size
nearest the run's (calibration measured other batch sizes than validation runs, so this is
never the run's configuration), on as many ranks sharing the device as calibration had,
with ``calibration/compute.py --probe`` (the same model build, warm-up and repeats as the
compute stage, and the same repeat booked: ``simdl.calibrate.compute.anchored_step``). The record keeps both times and their ratio, ``speed_ratio`` =
step now / step at calibration (above 1: the machine is slower than its profile).

The prediction does not use it: it is made before the probe runs, blind. The report shows
each run's error as measured and, beside it, the error of the prediction times the ratio:
how much of the error the machine's drift explains. The ratio scales the whole step,
communication included, which is right only as far as the drift is the processor's (and
its memory's) speed; the report says so.

It is opt-in (``validate.run --probe``): on 2026-11-27 (Zen 3, cpu-epyc-milan, the 2-rank
Experiment 1 matrix) the ratio did not explain the runs' errors -- the probes put the
machine 6-12 % faster than its profile for EfficientNet-V2-L and ConvNeXt-Large while the
runs were not, scaling made the step MAPE 11.5 % instead of 5.2 %, and a run's probe
before and after differed by up to 28 % (lab/CAMPAIGN.md, "A third blind sweep, with a probe
of the machine's speed"). On the Emerald Rapids VM of cpu-xeon-emr-b (2026-11-29, the ViT
grid) it did not either: ratios 0.56-0.95, step MAPE 11.9 % as predicted and 20.6 % scaled.
Scaled onto the predicted compute alone (the report's 'compute x ratio', since then) it gave
8.6 % there, but 8.2 % and 12.5 % against 5.2 % and 12.0 % as predicted on the EPYC's sweeps
(lab/CAMPAIGN.md, "The same 24 runs again").
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from simdl.calibrate.compute import anchored_step
from simdl.calibrate.records import read_jsonl  # skips the torn last line a killed rank leaves
from simdl.textfile import read_text

from . import watch
from .experiments import RunSpec

# calibration/compute.py's default for a full (not --quick) compute stage; the probe uses the
# same number so that "the median (or fastest) of N" means the same thing on both sides.
REPEATS = 5
SCRIPT = Path(__file__).resolve().parent.parent / "calibration" / "compute.py"


def probe_point(cluster_path: str, run: RunSpec) -> dict:
    """The compute-stage point to re-measure for ``run``: ``{model, dataset, batch,
    calibrated_step_s, ranks}``, or ``{skipped: why}`` when the profile has none."""
    from simdl.cluster import load_cluster

    spec = load_cluster(cluster_path)
    if not spec.compute_profile:
        return {"skipped": f"profile {spec.name} has no compute profile"}
    prof = json.loads(read_text(spec.compute_profile))
    name = run.model_name
    rows = [m for m in prof.get("models", []) if m.get("model") == name and m.get("dataset") == run.dataset]
    if not rows:
        return {"skipped": f"{Path(spec.compute_profile).name} has no {name} on {run.dataset}"}
    m = rows[0]
    others = [(b, s) for b, s in zip(m["batches"], m["step_s"]) if b != run.batch_size]
    if not others:
        return {"skipped": f"{Path(spec.compute_profile).name} measured {name} only at the run's batch size"}
    b, s = min(others, key=lambda bs: (abs(math.log(bs[0] / run.batch_size)), bs[0]))
    return {
        "model": name,
        "dataset": run.dataset,
        "batch": int(b),
        "calibrated_step_s": float(s),
        "ranks": int(prof.get("ranks_sharing_device", 1)),
        "compute_profile": spec.compute_profile,
    }


def measure(point: dict, out: Path, timeout_s: float = 600.0) -> dict:
    """Run the probe (torchrun, ``point['ranks']`` ranks); ``{step_s, per_rank_s, wall_s}``,
    the mean over ranks of each rank's step as the compute stage books it
    (:func:`simdl.calibrate.compute.anchored_step`: the median of the repeats since
    2026-11-28, the fastest before), or
    ``{error}``."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank*.jsonl"):
        old.unlink()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={point['ranks']}",
        str(SCRIPT),
        "--out",
        str(out),
        "--budget",
        str(timeout_s),
        "--probe",
        "--repeats",
        str(REPEATS),
        "--models",
        f"{point['model']}:{point['dataset']}:{point['batch']}",
    ]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    root = str(SCRIPT.parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    with open(out / "log.txt", "w") as log:
        rc = watch.run_watched(cmd, stdout=log, env=env, timeout_s=timeout_s, min_available=0, cwd=root).returncode
    wall = time.perf_counter() - t
    per_rank = []
    for f in sorted(out.glob("rank*.jsonl")):
        recs = [r for r in read_jsonl(f) if r.get("type") == "measurement" and r.get("kind") == "probe"]
        if recs:
            per_rank.append(sum(anchored_step(recs[-1])))
    if rc != 0 or len(per_rank) != point["ranks"]:
        return {
            "error": f"probe exited with {rc}, {len(per_rank)} of {point['ranks']} ranks measured; "
            f"see {out / 'log.txt'}",
            "wall_s": wall,
        }
    return {"step_s": statistics.fmean(per_rank), "per_rank_s": per_rank, "wall_s": wall}


def speed(point: dict, before: dict, after: dict) -> dict:
    """The record a run keeps: the point, both probes, and ``speed_ratio`` (the mean of the
    probes that worked over the calibrated step; absent when none did)."""
    rec = {**{k: v for k, v in point.items() if k != "compute_profile"}, "before": before, "after": after}
    ok = [p["step_s"] for p in (before, after) if "step_s" in p]
    if ok and point.get("calibrated_step_s"):
        rec["speed_ratio"] = statistics.fmean(ok) / point["calibrated_step_s"]
    return rec
