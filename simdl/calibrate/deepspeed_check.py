"""Whether `simdl calibrate` can run DeepSpeed ZeRO steps: ``import deepspeed`` must work in
the interpreter that runs the calibration (torchrun's ranks are started with it,
simdl.calibrate.run). Where it does not, the strategies stage runs without its ZeRO steps and
`simdl calibrate` says why in one line; the profile then keeps the base's strategies.zero."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

INSTALL = "pip install deepspeed (DS_BUILD_OPS=0: no compiled ops are needed)"


def deepspeed_missing(python: str | None = None) -> str | None:
    """None where ``import deepspeed`` works under ``python`` (default: this interpreter);
    else why not, in one line."""
    python = python or sys.executable
    if python == sys.executable and importlib.util.find_spec("deepspeed") is None:
        return f"'import deepspeed' fails under {python} (No module named 'deepspeed'); {INSTALL} to fit them"
    env = dict(os.environ)
    env.setdefault("DS_ACCELERATOR", "cpu" if not _has_cuda() else "cuda")
    try:
        p = subprocess.run([python, "-c", "import deepspeed"], capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {python} to import deepspeed ({type(e).__name__})"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return f"'import deepspeed' fails under {python} ({last[:200]})"
    return None


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def zero_steps_setting(settings: dict, out) -> dict:
    """``settings["zero_steps"]``: whether the strategies stage runs ZeRO steps, decided once per
    run (a resumed run keeps it), with the one-line note printed where it does not."""
    if "zero_steps" not in settings:
        why = deepspeed_missing() if "strategies" in settings["stages"] else "the strategies stage does not run"
        settings["zero_steps"] = {"run": why is None, "note": why or ""}
        if why and "strategies" in settings["stages"]:
            print(f"strategies: DeepSpeed ZeRO steps skipped: {why}", file=out, flush=True)
    return settings["zero_steps"]


# DeepSpeed's CPU all-reduce (deepspeed/ops/csrc/cpu/comm/shm.cpp, shm_initialize; 0.19.8)
# creates one POSIX shared-memory segment per rank process,
# /dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank> (its allreduce_workspace,
# 69,206,024 B at 0.19.8), and never calls its own shared_close: every run leaves them
# behind, and a campaign of short runs fills /dev/shm, which is RAM.
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "deepspeed_allreduce_buffer_"


def _segments(shm_dir: Path) -> set[Path]:
    try:
        return {p for p in shm_dir.iterdir() if p.name.startswith(f"{SHM_PREFIX}{os.getuid()}_")}
    except OSError:
        return set()


def _mapped(paths: set[Path]) -> set[Path]:
    """Those of ``paths`` that a live process still maps (/proc/<pid>/maps names the file)."""
    names = {str(p) for p in paths}
    hit: set[Path] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text(errors="replace")
        except OSError:
            continue
        hit |= {Path(n) for n in names if n in text}
    return hit


@contextmanager
def deepspeed_shm_removed(shm_dir: Path = SHM_DIR) -> Iterator[None]:
    """Around a run of DeepSpeed CPU ranks: afterwards, unlink the shared-memory segments it
    created, except any that a live process (another run) still maps."""
    before = _segments(shm_dir)
    try:
        yield
    finally:
        new = _segments(shm_dir) - before
        for p in new - _mapped(new):
            p.unlink(missing_ok=True)
