"""Whether `simdl calibrate` can run DeepSpeed ZeRO steps: ``import deepspeed`` must work in
the interpreter that runs the calibration (torchrun's ranks are started with it,
simdl.calibrate.run). Where it does not, the strategies stage runs without its ZeRO steps and
`simdl calibrate` says why in one line; the profile then keeps the base's strategies.zero."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

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
