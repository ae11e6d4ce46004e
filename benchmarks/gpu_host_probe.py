"""Probe: what the host spends issuing an eager training step, op by op, on this device.

    python benchmarks/gpu_host_probe.py -o OUT.jsonl [--budget-s 120] [--resume] [--cpu]
    python benchmarks/gpu_host_probe.py --fit OUT.jsonl

A step of a small model is bound by the host when its kernels are shorter than the time the
CPU takes to issue them (Python, the dispatcher, autograd, the launch). Whole models cannot
separate those costs: their forward and backward op counts rise together. This probe times
chains of ``depth`` identical tiny modules (``Linear(32, 32)``, ``Conv2d(8, 8, 3)`` on 8x8,
``Conv2d + BatchNorm2d``; batch 8), each so small that the device is idle most of the time,
at several depths, with and without biases, in three phases (forward; forward and backward;
the whole step with momentum SGD or Adam as ``torch.optim`` picks its implementation), fp32
and bf16 autocast. Every configuration is one line of ``OUT.jsonl``, written when measured
(``--resume`` keeps those done); the run stops at ``--budget-s``.

``--fit`` regresses each phase's time on depth and parameter tensors per (module, precision):
the slopes are the host seconds per forward module, per backward module and per parameter
tensor of the optimizer, the intercept the step's constant. Timing: CUDA events around each
iteration on a GPU (``time.perf_counter`` on a CPU), the median of ``--iters`` after warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

DEPTHS = (4, 16, 64)
FAMILIES = ("linear", "conv", "convbn")
PHASES = ("fwd", "fwd_bwd", "step")
OPTIMIZERS = ("sgd", "adam")
PRECISIONS = ("fp32", "bf16")
BATCH = 8


def build(family: str, depth: int, bias: bool, device):
    import torch.nn as nn

    def block():
        if family == "linear":
            return [nn.Linear(32, 32, bias=bias), nn.ReLU()]
        conv = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        return [conv, nn.ReLU()] if family == "conv" else [conv, nn.BatchNorm2d(8), nn.ReLU()]

    layers = [m for _ in range(depth) for m in block()]
    return nn.Sequential(*layers).to(device)


def configs() -> list[dict]:
    out = []
    for family in FAMILIES:
        for precision in PRECISIONS:
            for depth in DEPTHS:
                for bias in (True, False) if family == "linear" else (False,):
                    for phase in PHASES:
                        for opt in OPTIMIZERS if phase == "step" else ("none",):
                            out.append(
                                dict(
                                    family=family,
                                    precision=precision,
                                    depth=depth,
                                    bias=bias,
                                    phase=phase,
                                    optimizer=opt,
                                )
                            )
    return out


def key(c: dict) -> str:
    return "/".join(str(c[k]) for k in ("family", "precision", "depth", "bias", "phase", "optimizer"))


def measure(c: dict, device, iters: int, warmup: int) -> dict:
    import torch

    model = build(c["family"], c["depth"], c["bias"], device)
    shape = (BATCH, 32) if c["family"] == "linear" else (BATCH, 8, 8, 8)
    x = torch.randn(*shape, device=device)
    opt = None
    if c["optimizer"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif c["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dtype = torch.bfloat16 if c["precision"] == "bf16" else None
    cuda = device.type == "cuda"

    def one():
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(x)
        if c["phase"] != "fwd":
            out.float().sum().backward()
        if opt is not None:
            opt.step()

    for _ in range(warmup):
        one()
    times = []
    for _ in range(iters):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            one()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            one()
            times.append(time.perf_counter() - t)
    params = sum(1 for _ in model.parameters())
    return {
        **c,
        "key": key(c),
        "params": params,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "n": len(times),
    }


def run(out: Path, budget_s: float, resume: bool, force_cpu: bool, iters: int, warmup: int) -> int:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() and not force_cpu else "cpu")
    done = set()
    if resume and out.exists():
        done = {json.loads(line)["key"] for line in out.read_text().splitlines() if line.strip()}
    elif out.exists():
        out.unlink()
    start, n = time.time(), 0
    env = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    with out.open("a") as f:
        for c in configs():
            if key(c) in done:
                continue
            if time.time() - start > budget_s:
                print(f"budget of {budget_s:.0f} s reached after {n} configurations", flush=True)
                break
            f.write(json.dumps({**measure(c, device, iters, warmup), **env}) + "\n")
            f.flush()
            n += 1
    print(f"wrote {n} configurations to {out} ({device}, {time.time() - start:.1f} s)")
    return 0


def fit(path: Path) -> list[str]:
    """Per (module, precision): seconds per forward module, per backward module, per optimizer
    parameter tensor, and the constants, from least squares over depth and parameter count."""
    import numpy as np

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = {(r["family"], r["precision"], r["depth"], r["bias"], r["phase"], r["optimizer"]): r for r in rows}
    lines = ["module  prec  fwd us/module  bwd us/module  sgd us/param  adam us/param  fwd const us  bwd const us"]
    for family in FAMILIES:
        for precision in PRECISIONS:
            sel = [r for r in rows if r["family"] == family and r["precision"] == precision]
            fwd = [(r["depth"], r["median_s"]) for r in sel if r["phase"] == "fwd"]
            if len(fwd) < 2:
                continue
            f_slope, f_const = np.polyfit(*zip(*fwd), 1)
            bwd = [
                (r["depth"], r["median_s"] - by[(family, precision, r["depth"], r["bias"], "fwd", "none")]["median_s"])
                for r in sel
                if r["phase"] == "fwd_bwd" and (family, precision, r["depth"], r["bias"], "fwd", "none") in by
            ]
            b_slope, b_const = np.polyfit(*zip(*bwd), 1) if len(bwd) >= 2 else (float("nan"),) * 2
            per_param = {}
            for opt in OPTIMIZERS:
                pts = [
                    (
                        r["params"],
                        r["median_s"] - by[(family, precision, r["depth"], r["bias"], "fwd_bwd", "none")]["median_s"],
                    )
                    for r in sel
                    if r["phase"] == "step"
                    and r["optimizer"] == opt
                    and (family, precision, r["depth"], r["bias"], "fwd_bwd", "none") in by
                ]
                per_param[opt] = np.polyfit(*zip(*pts), 1)[0] if len({p for p, _ in pts}) >= 2 else float("nan")
            lines.append(
                f"{family:7s} {precision:5s} {1e6 * f_slope:13.1f} {1e6 * b_slope:14.1f} {1e6 * per_param['sgd']:13.2f} "
                f"{1e6 * per_param['adam']:14.2f} {1e6 * f_const:13.1f} {1e6 * b_const:13.1f}"
            )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="host_probe.jsonl")
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="time on the CPU even where CUDA is available")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--fit", metavar="OUT.jsonl", help="print the per-op costs of a finished probe")
    a = ap.parse_args(argv)
    if a.fit:
        print("\n".join(fit(Path(a.fit))))
        return 0
    return run(Path(a.output), a.budget_s, a.resume, a.cpu, a.iters, a.warmup)


if __name__ == "__main__":
    sys.exit(main())
