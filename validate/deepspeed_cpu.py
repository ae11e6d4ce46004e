"""DeepSpeed ZeRO stages trained for real on CPU ranks, each predicted by simdl before it runs.

``python -m validate.deepspeed_cpu -o runs/deepspeed/results.jsonl [--resume] [--stages 0 1 2 3]
[--models resnet18] [--batch 16] [--ranks 2] [--python /path/to/venv-with-deepspeed/bin/python]``

For each run of the matrix (model x batch x stage), in order:

1. predict it with simdl (analytic engine) from the run's configuration and its ds_config alone,
   with the CPU profile named by ``--cluster`` (default cpu-local), before the run starts;
2. launch ``torchrun --standalone --nproc-per-node N -m validate.deepspeed_worker`` with
   ``DS_ACCELERATOR=cpu`` under ``--python`` (an interpreter where ``import deepspeed`` works; the
   worker's docstring says how DeepSpeed trains on CPU ranks);
3. merge the ranks' files and append one JSON line (configuration, prediction, measurement, the
   profile's path and checksum, host) to the results file, flushed at once.

A failed run is recorded with its error and the sweep goes on; ``--resume`` skips every run whose
``run_id`` already has a line (``--retry-failed`` redoes failed ones). Measured figures are
validate/measure.py's: the median steady step of the slowest rank (``time.perf_counter``) and the
peak of live allocator bytes (torch.profiler ``profile_memory``); predicted: ``iteration_time_s``
and ``peak_tensor_bytes``, the live-tensor peak, which is what the CPU allocator's counter sees.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from simdl.calibrate.deepspeed_check import deepspeed_shm_removed
from simdl.errors import SimdlError

from .run import (
    DEFAULT_CLUSTER,
    Launched,
    _rank_failure,
    _slowest_per_step,
    append_result,
    finished_ids,
    host_info,
    profile_digest,
    read_results,
    resolve_profile,
    summarise_result,
)

SCHEMA = "simdl-deepspeed-validation/1"
STAGES = (0, 1, 2, 3)
# DeepSpeed's documented bucket default is 5e8 elements (runtime/zero/config.py); 5e7 keeps a
# ResNet-18 run's buckets a few of its layers long, as the committed CPU table was measured.
BUCKET_ELEMENTS = 50_000_000
WORKER = "validate.deepspeed_worker"
INSTALL = "pip install deepspeed (with DS_BUILD_OPS=0: no compiled ops are needed)"


@dataclass(frozen=True)
class ZeroRun:
    model: str
    stage: int
    ranks: int = 2
    batch_size: int = 16  # per rank: train_micro_batch_size_per_gpu
    dataset: str = "cifar10"
    steps: int = 10
    warmup_steps: int = 2
    bucket_elements: int = BUCKET_ELEMENTS  # reduce_bucket_size and allgather_bucket_size

    def ds_config(self) -> dict[str, Any]:
        zero: dict[str, Any] = {"stage": self.stage}
        if self.stage:
            zero.update(reduce_bucket_size=self.bucket_elements, allgather_bucket_size=self.bucket_elements)
        return {
            "train_micro_batch_size_per_gpu": self.batch_size,
            "gradient_accumulation_steps": 1,
            "steps_per_print": 10**6,
            "zero_optimization": zero,
        }

    def worker_spec(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dataset": self.dataset,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "ds_config": self.ds_config(),
        }

    @property
    def run_id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return (
            f"zero{self.stage}-{self.model}-b{self.batch_size}-r{self.ranks}-"
            + hashlib.sha1(text.encode()).hexdigest()[:8]
        )


def matrix(models, stages, batches, ranks: int, steps: int, warmup: int) -> list[ZeroRun]:
    for s in stages:
        if s not in STAGES:
            raise SimdlError(f"--stages: {s} is not a ZeRO stage; accepted: {', '.join(map(str, STAGES))}")
    if steps < warmup + 5:
        raise SimdlError(
            f"--steps {steps}: the worker needs warm-up ({warmup}) + 3 profiled + at least 2 timed "
            f"steps; accepted: {warmup + 5} or more"
        )
    return [ZeroRun(m, s, ranks, b, steps=steps, warmup_steps=warmup) for m in models for b in batches for s in stages]


def predict_run(run: ZeroRun, cluster_path: str) -> dict[str, Any]:
    """simdl's analytic prediction of the run, from its configuration and ds_config alone."""
    import simdl

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "ds_config.json"
        cfg.write_text(json.dumps(run.ds_config()))
        kw = dict(
            model=run.model,
            gpus=run.ranks,
            cluster=cluster_path,
            dataset=run.dataset,
            optimizer="adam",
            precision="fp32",
            loader_workers=0,
            train_samples=run.batch_size * run.ranks * run.steps,
        )
        try:
            r = simdl.predict(**kw, deepspeed_config=str(cfg))
        except SimdlError as e:
            return {"kwargs": kw, "analytic": {"error": f"SimdlError: {e}"}}
    out = summarise_result(r)
    out["strategy"] = r.config.get("strategy")
    return {"kwargs": kw, "analytic": out}


def launch(run: ZeroRun, workdir: Path, python: str, timeout_s: float) -> Launched:
    """torchrun of the DeepSpeed worker under ``python``; its output in ``workdir/log.txt``."""
    import time

    from . import watch

    workdir.mkdir(parents=True, exist_ok=True)
    spec = workdir / "spec.json"
    spec.write_text(json.dumps(run.worker_spec(), indent=1))
    cmd = [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={run.ranks}",
        "-m",
        WORKER,
        "--spec",
        str(spec),
        "--out",
        str(workdir),
    ]
    env = dict(os.environ, DS_ACCELERATOR="cpu", LOCAL_SIZE=str(run.ranks))
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default, stated: one thread per rank process
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    with open(workdir / "log.txt", "w") as log, deepspeed_shm_removed():
        log.write(" ".join(cmd) + "\n")
        log.flush()
        w = watch.run_watched(cmd, stdout=log, env=env, timeout_s=timeout_s, min_available=watch.default_floor())
    return Launched(w.returncode, " ".join(cmd), time.perf_counter() - t, w.stopped, w.min_available_bytes)


def _rank_error(workdir: Path) -> str:
    """The first line of the first rank's error file (the worker writes its exception there)."""
    for f in sorted(workdir.glob("rank*.error.txt")):
        lines = f.read_text().strip().splitlines()
        return f"{f.name.split('.')[0]}: {lines[0]}" if lines else f"{f.name} is empty"
    return ""


def merge_ranks(run: ZeroRun, workdir: Path) -> dict[str, Any]:
    """One measured record from the worker's rank files (validate/deepspeed_worker.py)."""
    if error := _rank_error(workdir):
        raise RuntimeError(error)
    ranks = [json.loads(f.read_text()) for f in sorted(workdir.glob("rank*.json"))]
    if len(ranks) != run.ranks:
        raise RuntimeError(f"{len(ranks)} of {run.ranks} ranks wrote results")
    ranks.sort(key=lambda r: r["rank"])
    steady = _slowest_per_step(r["steady_step_times_s"] for r in ranks)
    if not steady:
        raise RuntimeError("no steady steps were timed")
    return {
        "step_time_s": {"median": statistics.median(steady), "n": len(steady)},
        "steady_step_times_s": steady,
        "peak_allocated_bytes": max(r["peak_allocated_bytes"] for r in ranks),
        "peak_allocated_bytes_per_rank": [r["peak_allocated_bytes"] for r in ranks],
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ranks),
        "losses": ranks[0]["losses"],
        "optimizer_class": ranks[0]["optimizer_class"],
        "deepspeed_version": ranks[0]["deepspeed_version"],
        "torch_version": ranks[0]["torch_version"],
        "backend": ranks[0]["backend"],
    }


def check_deepspeed(python: str) -> str:
    """DeepSpeed's version under ``python``; a one-line SimdlError when it does not import."""
    try:
        p = subprocess.run(
            [python, "-c", "import deepspeed; print(deepspeed.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, DS_ACCELERATOR="cpu"),
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SimdlError(
            f"--python {python}: cannot run it ({type(e).__name__}); give an interpreter where {INSTALL} was done"
        ) from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise SimdlError(
            f"--python {python}: 'import deepspeed' fails ({last}); {INSTALL}, or pass --python of a venv that has it"
        )
    return p.stdout.strip().splitlines()[-1]


def _error(prediction: dict, measured: dict) -> dict[str, float]:
    a = prediction.get("analytic", {})
    if "error" in a:
        return {}
    return {
        "peak_allocated": a["peak_tensor_bytes"] / measured["peak_allocated_bytes"] - 1.0,
        "step_time": a["iteration_time_s"] / measured["step_time_s"]["median"] - 1.0,
    }


def run_one(
    run: ZeroRun, cluster: str, root: Path, python: str, timeout_s: float, launcher: Callable[..., Launched] = launch
) -> dict[str, Any]:
    profile = str(resolve_profile(cluster))
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": run.run_id,
        "started": started,
        "run": asdict(run),
        "ds_config": run.ds_config(),
        "cluster_profile": profile,
        "cluster_profile_sha256": profile_digest(profile),
        "host": host_info(),
        "prediction": predict_run(run, profile),
    }  # before the run: it cannot see it
    workdir = root / run.run_id
    for old in [*workdir.glob("rank*.json"), *workdir.glob("rank*.error.txt")]:  # a retried run's last try
        old.unlink()
    try:
        launched = launcher(run, workdir, python, timeout_s)
        # the command as run from the results' folder, the interpreter by name (no host paths)
        command = launched.command.replace(python, "python", 1).replace(f"{root.parent}/", "")
        record["launch"] = dict(launched._asdict(), command=command)
        if launched.returncode != 0:
            raise RuntimeError(
                launched.stopped
                or _rank_error(workdir)
                or _rank_failure(workdir / "log.txt")
                or f"exit status {launched.returncode}"
            )
        record["measured"] = merge_ranks(run, workdir)
        record["error"] = _error(record["prediction"], record["measured"])
        record["status"] = "ok"
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        record.update(status="failed", failure=f"{type(e).__name__}: {e}")
    return record


def run_matrix(
    runs: list[ZeroRun],
    out: Path,
    *,
    cluster: str,
    python: str,
    timeout_s: float,
    resume: bool,
    retry_failed: bool = False,
    launcher: Callable[..., Launched] = launch,
) -> list[dict]:
    """Run, record and return every run not already finished in ``out`` (with ``resume``)."""
    done = finished_ids(read_results(out), retry_failed) if resume else set()
    if not resume and out.exists() and out.stat().st_size:
        raise SimdlError(f"-o {out}: the file has results; pass --resume to add to it, or another path")
    root = out.parent / (out.stem + "-runs")
    records = []
    for run in runs:
        if run.run_id in done:
            print(f"{run.run_id}: done, skipped (--resume)", flush=True)
            continue
        rec = run_one(run, cluster, root, python, timeout_s, launcher)
        append_result(out, rec)
        print(summary_line(rec), flush=True)
        records.append(rec)
    return records


def summary_line(rec: dict) -> str:
    run = rec["run"]
    head = f"{rec['run_id']}: ZeRO-{run['stage']} {run['model']} batch {run['batch_size']} x {run['ranks']} ranks"
    if rec.get("status") != "ok":
        return f"{head}: failed: {rec.get('failure')}"
    a, m, e = rec["prediction"]["analytic"], rec["measured"], rec["error"]
    if not e:
        return f"{head}: measured {m['peak_allocated_bytes'] / 2**20:.1f} MiB; simdl: {a['error']}"
    return (
        f"{head}: peak allocated simdl {a['peak_tensor_bytes'] / 2**20:.1f} MiB vs measured "
        f"{m['peak_allocated_bytes'] / 2**20:.1f} MiB ({e['peak_allocated']:+.1%}); step simdl "
        f"{a['iteration_time_s'] * 1e3:.0f} ms vs measured {m['step_time_s']['median'] * 1e3:.0f} ms "
        f"({e['step_time']:+.1%})"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validate.deepspeed_cpu", description=__doc__.split("\n")[0])
    p.add_argument("-o", "--out", required=True, help="results JSONL (appended to, one line per run)")
    p.add_argument("--models", nargs="+", default=["resnet18"])
    p.add_argument("--stages", nargs="+", type=int, default=list(STAGES))
    p.add_argument("--batch", nargs="+", type=int, default=[16], help="per-rank micro-batch sizes")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help="CPU profile to predict with (preset name or path)")
    p.add_argument("--python", default=sys.executable, help="interpreter where deepspeed imports")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take before it is killed")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--retry-failed", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        runs = matrix(a.models, a.stages, a.batch, a.ranks, a.steps, a.warmup)
        version = check_deepspeed(a.python)
        print(f"deepspeed {version} under {a.python}; {len(runs)} runs -> {a.out}", flush=True)
        run_matrix(
            runs,
            Path(a.out),
            cluster=a.cluster,
            python=a.python,
            timeout_s=a.timeout,
            resume=a.resume,
            retry_failed=a.retry_failed,
        )
    except SimdlError as e:
        print(f"python -m validate.deepspeed_cpu: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
