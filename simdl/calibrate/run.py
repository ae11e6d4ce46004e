"""``simdl calibrate``: launch the calibration stages with torchrun, resume, fit, write a profile.

A run directory (default ``runs/calibrate-<UTC time>``, git-ignored) holds ``run.json``
(the settings, so ``--resume RUN_DIR`` needs nothing else), one folder per stage with the
per-rank JSONL files the scripts write as they measure, the stage's ``torchrun.log`` and a
``DONE`` marker when it completed, and at the end ``fit.json`` and ``profile.yaml``.

Stages run one after another, each under its own torchrun with a share of the time budget
(collectives 30 %, compute 40 %, strategies 20 %, ps 10 %). A stage whose torchrun fails (a
rank died) or that outlives its budget plus a grace period (a rank hung) ends with a
message naming the rank and what was kept; the command then stops and tells how to
resume. ``--resume`` skips stages with a ``DONE`` marker and, inside a stage, every
measurement all ranks had logged.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import SimdlError
from . import host_load
from .processes import kill_tree
from .records import STAGES, load_stage

BUDGET_SHARE = {"collectives": 0.30, "compute": 0.40, "strategies": 0.20, "ps": 0.10}
DEFAULT_BUDGET = {True: 150.0, False: 900.0}  # quick / full, seconds of measurement
GRACE_S = 90.0  # torchrun start-up, imports, the last measurement, the DONE barrier
# Compute stage: fit models first, the held-out model last (predicted, never fitted).
COMPUTE_MODELS = {
    # vgg16 (large, efficient convolutions and a 400 MB classifier) pins the FLOP and memory
    # efficiencies that mnist_cnn and resnet18 alone leave loose.
    True: ("mnist_cnn:mnist:8,32;resnet18:cifar10:4,8;vgg16:cifar10:2,4;densenet121:cifar10:2,4", ["densenet121"]),
    False: ("mnist_cnn:mnist:16,64;resnet18:cifar10:4,16;vgg16:cifar10:2,8;densenet121:cifar10:4,8", ["densenet121"]),
}
# Strategy stage (calibration/strategies.py): models and batch sizes no validation run uses.
# wide_resnet101_2 (127 M parameters, 507 MB of fp32 gradients, 25 MB DDP buckets and
# 17-67 MB FSDP units) puts the large-message steps of the models users train into the fit;
# the three others have 45-111 MB. wide_mlp's first layer is one 403 MB message, the size of
# VGG-style classifiers. Together they add about 10 minutes at 2 CPU ranks, 25 at 4.
STRATEGY_MODELS = {
    True: "resnet18:cifar10:16;convnext_tiny:cifar10:16",
    False: (
        "resnet18:cifar10:32;convnext_tiny:cifar10:32;efficientnet_v2_s:cifar10:16;wide_resnet101_2:cifar10:16;"
        "wide_mlp:cifar10:16"
    ),
}
TORCHRUN_OPTIONS = ("nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port")


class StageFailed(SimdlError):
    """A stage ended early: a rank died or hung. The message says what was kept."""


def scripts_dir() -> Path:
    """The ``calibration/`` folder of torchrun scripts (next to the ``simdl`` package in a
    checkout; ``$SIMDL_CALIBRATION_DIR`` overrides)."""
    env = os.environ.get("SIMDL_CALIBRATION_DIR")
    d = Path(env) if env else Path(__file__).resolve().parents[2] / "calibration"
    if not (d / "collectives.py").is_file():
        raise SimdlError(
            f"calibration scripts not found in {d}; set SIMDL_CALIBRATION_DIR to the "
            "calibration/ folder of a simdl checkout"
        )
    return d


def new_run_dir(root: Path | None = None) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    d = Path(root or "runs") / f"calibrate-{stamp}"
    d.mkdir(parents=True, exist_ok=False)
    return d


def make_settings(
    *,
    nproc_per_node: int,
    quick: bool,
    time_budget: float | None,
    output: str | None,
    name: str | None = None,
    gpu: str | None = None,
    stages: tuple[str, ...] = STAGES,
    profile_models: str | None = None,
    collective_passes: int | None = None,
    compute_models: str | None = None,
    **torchrun: Any,
) -> dict[str, Any]:
    if nproc_per_node < 1:
        raise SimdlError(f"--nproc-per-node {nproc_per_node}: must be >= 1")
    budget = DEFAULT_BUDGET[quick] if time_budget is None else float(time_budget)
    if budget <= 0:
        raise SimdlError(f"--time-budget {time_budget}: must be > 0 seconds")
    if collective_passes is not None and collective_passes < 1:
        raise SimdlError(f"--collective-passes {collective_passes}: must be >= 1 (passes over the size grid)")
    models, held = COMPUTE_MODELS[quick]
    if compute_models:
        # The caller's fit set, the last model held out (predicted, never fitted) when there are two or more.
        chosen = parse_profile_models(compute_models, "--compute-models")
        models = ";".join(f"{m}:{d}:{','.join(map(str, b))}" for m, d, b in chosen)
        held = [chosen[-1][0]] if len(chosen) > 1 else []
    extra = parse_profile_models(profile_models)
    # The strategy stage's models: the compute stage profiles them at the same batch sizes,
    # so that the strategy fit sees the communication, not the compute model's error.
    strategy_models = STRATEGY_MODELS[quick]
    if "strategies" in stages or not compute_models:
        extra += [(m, d, [int(b)]) for m, d, b in (x.rsplit(":", 2) for x in strategy_models.split(";"))]
    return {
        "nproc_per_node": int(nproc_per_node),
        "quick": bool(quick),
        "time_budget_s": budget,
        "output": output,
        "name": name,
        "gpu": gpu,
        "stages": list(stages),
        "compute_models": ";".join([models] + [f"{m}:{d}:{','.join(map(str, b))}" for m, d, b in extra]),
        "compute_held_out": held,
        # How many leading --models entries the compute stage measures before its microbenchmarks.
        "compute_fit_models": len(models.split(";")),
        # Models profiled for their own predictions only (compute profiles), kept out of the
        # generic compute fit so that its held-out check stays a check.
        "compute_profile_only": sorted({m for m, _, _ in extra} - {item.split(":")[0] for item in models.split(";")}),
        "strategy_models": strategy_models,
        # None: calibration/collectives.py's default (7, --quick 3). More passes narrow each
        # size's 25th percentile on a noisy host (bootstrap SE ~6 % at 7 passes here).
        "collective_passes": None if collective_passes is None else int(collective_passes),
        "torchrun": {k: v for k, v in torchrun.items() if k in TORCHRUN_OPTIONS and v is not None},
    }


def parse_profile_models(spec: str | None, flag: str = "--profile-models") -> list[tuple[str, str, list[int]]]:
    """``model:dataset:b1,b2;...`` -> [(model, dataset, [b1, b2])] (``--profile-models``, or
    the option named by ``flag`` in errors)."""
    if not spec:
        return []
    from ..workload.datasets import get_dataset
    from ..workload.zoo import check_model_name

    out = []
    for item in spec.split(";"):
        parts = item.strip().rsplit(":", 2)
        if len(parts) != 3:
            raise SimdlError(f"{flag} {item!r}: accepted: MODEL:DATASET:B1,B2[;...] (e.g. vgg16:cifar10:24,48)")
        model, dataset, batches = parts
        check_model_name(model)
        get_dataset(dataset)
        try:
            bs = sorted({int(b) for b in batches.split(",")})
        except ValueError:
            raise SimdlError(f"{flag} {item!r}: batch sizes must be integers, got {batches!r}") from None
        if not bs or bs[0] < 2:
            raise SimdlError(f"{flag} {item!r}: batch sizes must be >= 2 (BatchNorm in training)")
        out.append((model, dataset, bs))
    return out


def _torchrun_cmd(settings: dict, stage: str, stage_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={settings['nproc_per_node']}"]
    for k, v in settings["torchrun"].items():
        cmd.append(f"--{k.replace('_', '-')}={v}")
    budget = settings["time_budget_s"] * BUDGET_SHARE[stage]
    cmd += [str(scripts_dir() / f"{stage}.py"), "--out", str(stage_dir), "--budget", f"{budget:.1f}"]
    if settings["quick"]:
        cmd.append("--quick")
    if stage == "collectives" and settings.get("collective_passes"):
        cmd += ["--passes", str(settings["collective_passes"])]
    if stage == "compute":
        cmd += ["--models", settings["compute_models"]]
        if settings.get("compute_fit_models"):
            cmd += ["--fit-models", str(settings["compute_fit_models"])]
    if stage == "strategies" and settings.get("strategy_models"):
        cmd += ["--models", settings["strategy_models"]]
    return cmd


# ------------------------------------------------------------------------------ progress


class Progress:
    """One line per stage: a bar of measurements logged by rank 0 against its plan."""

    def __init__(self, stage: str, stage_dir: Path, stream=sys.stderr):
        self.stage, self.dir, self.stream = stage, stage_dir, stream
        self.t0 = time.monotonic()
        self.tty = stream.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def counts(self) -> tuple[int, int]:
        st = load_stage(self.dir.parent, self.stage)
        return st.n_measured(0), len(st.planned)

    def line(self) -> str:
        done, total = self.counts()
        width = 24
        filled = int(width * done / total) if total else 0
        bar = "#" * filled + "-" * (width - filled)
        return f"{self.stage:<12} [{bar}] {done:>3}/{total or '?':<3} measurements  {time.monotonic() - self.t0:5.0f} s"

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            if self.tty:
                self.stream.write("\r" + self.line())
                self.stream.flush()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.stream.write(("\r" if self.tty else "") + self.line() + "\n")
        self.stream.flush()


# ------------------------------------------------------------------------------ stages


def _failure_reason(log_text: str) -> str:
    """The failed rank and why, from torchrun's error summary (its "Root Cause" block names
    the first rank that failed; the others were stopped by the agent afterwards)."""
    if "Root Cause" in log_text:
        log_text = log_text[log_text.rindex("Root Cause") :]
    ranks = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank", log_text)
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", log_text)
    why = re.findall(r"traceback\s*:\s*(.+)", log_text)
    if ranks:
        r = f"rank {ranks[0]} exited with code {codes[0] if codes else '?'}"
        if why and "N/A" not in why[0] and "To enable traceback" not in why[0]:
            r += f" ({why[0].strip()})"
        elif codes and codes[0].startswith("-"):
            try:
                r += f" ({signal.Signals(-int(codes[0])).name})"
            except ValueError:
                pass
        return r
    errors = [ln for ln in log_text.splitlines() if "Error" in ln]
    return errors[-1].strip() if errors else "torchrun failed (see its log)"


def _kept(stage_dir: Path) -> str:
    st = load_stage(stage_dir.parent, stage_dir.name)
    per = ", ".join(f"rank {r}: {st.n_measured(r)}" for r in st.ranks) or "none"
    return (
        f"kept {len(st.keys_all_ranks())} of {len(st.planned) or '?'} planned measurements "
        f"done by every rank ({per}) in {stage_dir}"
    )


def _record_host_cpu(stage_dir: Path, share: "host_load.CpuShare | None") -> dict | None:
    """Append what other processes took of the CPU during this attempt at the stage to
    ``<stage>/host_cpu.json`` (one entry per attempt: a resumed stage runs again)."""
    if share is None:
        return None
    path = stage_dir / "host_cpu.json"
    try:
        attempts = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        attempts = []
    entry = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **share.to_dict()}
    path.write_text(json.dumps(attempts + [entry], indent=1) + "\n")
    return entry


def run_stage(settings: dict, run_dir: Path, stage: str) -> dict | None:
    """Run one stage's torchrun; returns what other processes took of the CPU meanwhile
    (:mod:`.host_load`; None where it cannot be read)."""
    stage_dir = run_dir / stage
    stage_dir.mkdir(parents=True, exist_ok=True)
    cmd = _torchrun_cmd(settings, stage, stage_dir)
    timeout = settings["time_budget_s"] * BUDGET_SHARE[stage] + GRACE_S
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log_path = stage_dir / "torchrun.log"
    with open(log_path, "a", encoding="utf-8") as log, Progress(stage, stage_dir):
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        meter = host_load.CpuMeter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
            share = _record_host_cpu(stage_dir, meter.stop())
        except subprocess.TimeoutExpired:
            kill_tree(proc, grace_s=10.0)
            raise StageFailed(
                f"stage {stage} did not finish within {timeout:.0f} s (a rank hung?); torchrun "
                f"stopped; {_kept(stage_dir)}"
            ) from None
        except KeyboardInterrupt:
            kill_tree(proc, grace_s=10.0)
            raise StageFailed(f"stage {stage} interrupted; {_kept(stage_dir)}") from None
    if code != 0 or not (stage_dir / "DONE").exists():
        reason = _failure_reason(log_path.read_text(encoding="utf-8", errors="replace"))
        raise StageFailed(f"stage {stage} failed: {reason}; {_kept(stage_dir)}")
    return share


def calibrate(settings: dict, run_dir: Path, *, out=sys.stdout, wait_quiet_s: float = 120.0) -> dict:
    """Run (or resume) the stages, fit and write the profile. Returns the fit report.

    ``wait_quiet_s``: before the first stage, wait up to this long while other processes keep
    more than a quarter of a core busy (:func:`.host_load.wait_for_quiet`), then start anyway;
    0 measures without waiting, < 0 does not measure."""
    run_dir = Path(run_dir)
    if any(not (run_dir / st / "DONE").exists() for st in settings["stages"]):
        # What others take of the CPU before this run's ranks start (the load average counts
        # our own ranks once they run, and lags a minute behind: simdl.calibrate.host_load).
        quiet = host_load.wait_for_quiet(wait_quiet_s, what="calibrating", out=out) if wait_quiet_s >= 0 else None
        settings.setdefault("loadavg_before", []).append(
            {
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
                **({"host_cpu": quiet} if quiet else {}),
            }
        )
    (run_dir / "run.json").write_text(json.dumps(settings, indent=2) + "\n")
    t0 = time.monotonic()
    print(f"calibration run directory: {run_dir}", file=out)
    for stage in settings["stages"]:
        if (run_dir / stage / "DONE").exists():
            print(f"{stage:<12} done (skipped)", file=out)
            continue
        try:
            share = run_stage(settings, run_dir, stage)
            if share and share["others_cores"] > host_load.BUSY_CORES:
                print(
                    f"warning: other processes used {share['others_cores']:.2f} cores on average during the "
                    f"{stage} stage: its timings include that contention (recorded in the profile)",
                    file=out,
                    flush=True,
                )
        except StageFailed as e:
            raise StageFailed(f"{e}; continue with: simdl calibrate --resume {run_dir}") from None
    return fit_and_write(settings, run_dir, out=out, elapsed=time.monotonic() - t0)


def fit_and_write(settings: dict, run_dir: Path, *, out=sys.stdout, elapsed: float | None = None) -> dict:
    from .profile import build_profile, write_profile
    from .report import format_report

    name = settings.get("name") or (Path(settings["output"]).stem if settings.get("output") else "calibrated")
    profile, report = build_profile(
        run_dir, {k: v for k, v in settings.items() if k != "output"}, name=name, gpu=settings.get("gpu")
    )
    (run_dir / "fit.json").write_text(json.dumps(_jsonable(report), indent=1) + "\n")
    write_profile(profile, run_dir / "profile.yaml")
    target = Path(settings["output"]) if settings.get("output") else run_dir / "profile.yaml"
    if settings.get("output"):
        write_profile(profile, target)
    print(format_report(report, profile), file=out)
    if elapsed is not None:
        print(f"calibration took {elapsed:.0f} s", file=out)
    print(f"wrote {target}; use it with: simdl predict --cluster {target}", file=out)
    return report


def resume(run_dir: Path, *, output: str | None = None, out=sys.stdout, wait_quiet_s: float = 120.0) -> dict:
    run_dir = Path(run_dir)
    path = run_dir / "run.json"
    if not path.is_file():
        raise SimdlError(f"--resume {run_dir}: no run.json there (not a calibration run directory)")
    settings = read_run_settings(path)
    if output:
        settings["output"] = output
    return calibrate(settings, run_dir, out=out, wait_quiet_s=wait_quiet_s)


# What a resumed run reads of run.json (written by make_settings), with the type each must have.
_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "nproc_per_node": int,
    "quick": bool,
    "time_budget_s": (int, float),
    "stages": list,
    "torchrun": dict,
    "compute_models": str,
}


def read_run_settings(path: Path) -> dict[str, Any]:
    """run.json as written by :func:`make_settings`; one-line :class:`SimdlError` when it is
    empty, not JSON, or not shaped as that function writes it (a file edited or torn)."""
    where = f"--resume {path.parent}: {path.name}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SimdlError(f"{where} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if not text.strip():
        raise SimdlError(f"{where} is empty; start a new run (simdl calibrate --nproc-per-node P)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SimdlError(f"{where} is not valid JSON (line {e.lineno}: {e.msg}); start a new run") from None
    if not isinstance(data, dict):
        raise SimdlError(f"{where} holds a JSON {type(data).__name__}, not the run's settings; start a new run")
    for key, kind in _SETTING_TYPES.items():
        v = data.get(key)
        if key not in data or isinstance(v, bool) and kind is not bool or not isinstance(v, kind):
            raise SimdlError(f"{where}: {key} = {str(v)[:60]!r} is not what simdl calibrate writes; start a new run")
    bad = [st for st in data["stages"] if st not in STAGES]
    if bad or data["nproc_per_node"] < 1 or not 0 < data["time_budget_s"] < float("inf"):
        raise SimdlError(
            f"{where}: stages {data['stages']!r}, nproc_per_node {data['nproc_per_node']!r} or "
            f"time_budget_s {data['time_budget_s']!r} out of range; start a new run"
        )
    return data


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        return x.item()
    if isinstance(x, float) and x != x:
        return None
    return x
