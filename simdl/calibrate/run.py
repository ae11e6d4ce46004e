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

from ..errors import SimdlError
from . import host_load
from .deepspeed_check import deepspeed_shm_removed, zero_steps_setting
from .processes import kill_tree
from .records import load_stage
from .run_settings import (  # noqa: F401  (re-exported: the CLI and tests import them from here)
    make_settings,
    parse_profile_models,
    read_run_settings,
)

BUDGET_SHARE = {"collectives": 0.30, "compute": 0.40, "strategies": 0.20, "ps": 0.10}
GRACE_S = 90.0  # torchrun start-up, imports, the last measurement, the DONE barrier


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
    if stage == "strategies" and settings.get("zero_steps", {}).get("run"):
        cmd.append("--zero")
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
    with open(log_path, "a", encoding="utf-8") as log, Progress(stage, stage_dir), deepspeed_shm_removed():
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
    if not (run_dir / "strategies" / "DONE").exists():
        zero_steps_setting(settings, out)
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
