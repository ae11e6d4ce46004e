"""Ground truth on one GPU: predict every configuration first, then measure it.

``python -m validate.gpu_check -o DIR [--budget-s 480] [--resume]``

On one CUDA GPU (device 0), for eight torchvision models at 224x224 and 32x32, two batch
sizes, fp32 and bf16 autocast:

1. simdl's prediction of every configuration is written to ``DIR/predictions.jsonl``
   (one line each, with its time ``t``) before anything is measured; the cluster preset is
   the one whose GPU the device's name matches (:mod:`validate.gpu_predict`);
2. one worker process (:mod:`validate.gpu_worker`) then measures them in order
   (:mod:`validate.gpu_measure`) and appends one record each to ``DIR/results.jsonl`` (the
   records ``simdl report`` reads, the prediction inside) and its kernel profile to
   ``DIR/kernels.jsonl.gz``; ``DIR/run.json`` holds the versions and flags;
3. the CUDA path of ``simdl calibrate --nproc-per-node 1`` runs in a quick mode
   (:mod:`validate.gpu_calibrate`), its profile written as ``DIR/calibration-profile.yaml``
   (and the ``.compute.json`` it names), its run directory as ``DIR/calibration-run.tar.gz``;
4. a table of predicted against measured (``DIR/summary.md``) ends the run.

The whole run keeps to ``--budget-s`` of wall time counted from this process's start: the
measurements stop where the calibration's share begins; one configuration runs at most
``--config-cap-s`` (it stops between steps, or the parent kills a worker whose step never
returns and starts another for the rest); configurations left unstarted are recorded as
stopped. ``--resume`` keeps what DIR holds (its predictions too, made before their first
measurement) and measures again every configuration whose latest record is not ``ok``.

Without CUDA the same code runs on the CPU with tiny settings (:data:`CPU`), in under a
minute: CI's form. Files stay under eight, each one level below DIR, which is what the
device tool brings back from ``$OUT`` (validate/README.md, "GPU ground truth").
"""

from __future__ import annotations

import time

START = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

MODELS = (
    "resnet18",
    "resnet50",
    "vgg16",
    "densenet121",
    "efficientnet_v2_s",
    "convnext_tiny",
    "vit_b_16",
    "mobilenet_v3_large",
)
# Settings per device: what an H200-class GPU covers in the default budget, and the tiny CPU form.
GPU = {
    "models": MODELS,
    "sizes": (224, 32),
    "batches": (32, 128),
    "precisions": ("fp32", "bf16"),
    "warmup": 3,
    "steps": 10,
    "config_cap_s": 30.0,
    "calibrate_s": 110.0,
    "calibrate_models": "resnet18:cifar10:32,128;vgg16:cifar10:32,128",
}
CPU = {
    "models": ("mnist_cnn", "resnet18"),
    "sizes": (32,),
    "batches": (2, 4),
    "precisions": ("fp32", "bf16"),
    "warmup": 1,
    "steps": 2,
    "config_cap_s": 20.0,
    "calibrate_s": 30.0,
    "calibrate_models": "mnist_cnn:mnist:4,8;resnet18:cifar10:2,4",
}
MIN_CONFIG_S = 2.0  # a configuration is not started with less than this left
KILL_GRACE_S = 15.0  # past a configuration's deadline before its worker is killed


def gpu_name_from_driver() -> str | None:
    """The name of CUDA device 0 from nvidia-smi, else NVML (no CUDA context in this process:
    its memory would count in the device's used memory the worker reads), or None."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return _nvml_name()
    try:
        out = subprocess.run(
            [exe, "--id=0", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return name or None


def _nvml_name() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 -- no NVML, no driver, no GPU: the CPU form
        return None


def plan_configs(s: dict) -> list[dict]:
    """Every configuration, models innermost: a budget cut short still covers every model."""
    from .gpu_predict import DATASET_OF_SIZE

    out = []
    for size in s["sizes"]:
        for batch in s["batches"]:
            for precision in s["precisions"]:
                for model in s["models"]:
                    out.append(
                        {
                            "run_id": f"gpu/{model}/{size}px/b{batch}/{precision}",
                            "model": model,
                            "size": size,
                            "dataset": DATASET_OF_SIZE[size],
                            "batch": batch,
                            "precision": precision,
                            "steps": s["warmup"] + s["steps"] + 1,
                        }
                    )
    return out


def write_predictions(configs: list[dict], cluster, preset: str, out: Path, engines) -> None:
    from .gpu_predict import predict_config
    from .gpu_worker import read_predictions
    from .run import append_result, profile_digest, resolve_profile

    have = read_predictions(out / "predictions.jsonl")
    path = resolve_profile(preset)
    profile = {"cluster_profile": str(path), "cluster_profile_sha256": profile_digest(str(path))}
    for cfg in configs:
        if cfg["run_id"] in have:
            continue
        pred = predict_config(cfg, cluster, engines)
        append_result(
            out / "predictions.jsonl",
            {
                "type": "prediction",
                "run_id": cfg["run_id"],
                "t": time.time(),
                "cluster": cluster.name,
                "gpu": cluster.gpu.name,
                **profile,
                "config": cfg,
                "predicted": pred,
            },
        )


def _stopped(cfg: dict, out: Path, why: str) -> None:
    """Record a configuration the parent ended: ``failed`` where ``why`` says so, else ``stopped``."""
    from .gpu_worker import read_predictions, record
    from .run import append_result

    pred = read_predictions(out / "predictions.jsonl").get(cfg["run_id"])
    status = "failed" if why.startswith("failed") else "stopped"
    append_result(out / "results.jsonl", record(cfg, pred, status, None, {}, error=why, wall_s=0.0))


def _pending(configs: list[dict], out: Path) -> list[dict]:
    """The configurations with no record written since this run started."""
    from .run import read_results

    done = {r["run_id"] for r in read_results(out / "results.jsonl") if r.get("recorded_at", 0) >= START}
    return [c for c in configs if c["run_id"] not in done]


def _not_ok(configs: list[dict], out: Path) -> list[dict]:
    """--resume: the configurations whose latest record is not a finished measurement."""
    from .run import read_results

    ok = {r["run_id"] for r in read_results(out / "results.jsonl") if r.get("status") == "ok"}
    return [c for c in configs if c["run_id"] not in ok]


def measure_all(
    configs: list[dict],
    s: dict,
    out: Path,
    work: Path,
    deadline: float,
    force_cpu: bool,
    expect_cuda: bool,
    kill_grace_s: float = KILL_GRACE_S,
) -> None:
    """Run workers until every configuration has a record or the measuring time is over."""
    from simdl.calibrate.processes import kill_tree

    starts, shown = 0, set()
    while _pending(configs, out) and time.time() + MIN_CONFIG_S < deadline and starts < len(configs):
        starts += 1
        plan = {
            "configs": _pending(configs, out),
            "out": str(out),
            "work": str(work),
            "deadline": deadline,
            "config_cap_s": s["config_cap_s"],
            "min_config_s": MIN_CONFIG_S,
            "warmup": s["warmup"],
            "steps": s["steps"],
            "force_cpu": force_cpu,
            "expect_cuda": expect_cuda,
        }
        (work / "plan.json").write_text(json.dumps(plan))
        (work / "progress.json").unlink(missing_ok=True)
        log = open(work / "worker.log", "a")
        proc = subprocess.Popen(
            [sys.executable, "-m", "validate.gpu_worker", str(work / "plan.json")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        killed = _watch(proc, work, deadline, kill_grace_s, out, shown)
        if killed:
            kill_tree(proc, grace_s=2.0)
        proc.wait()
        log.close()
        if proc.returncode not in (0, None) and not killed:
            print("worker log, last lines:\n  " + "\n  ".join(_tail(work, 20)), flush=True)
        prog = killed or _progress(work)
        current = next((c for c in _pending(configs, out) if prog and c["run_id"] == prog["run_id"]), None)
        if current is not None:
            why = (
                f"stopped: its step did not return; the worker was killed {kill_grace_s:.0f} s after the "
                f"configuration's deadline"
                if killed
                else f"failed: the worker exited with code {proc.returncode} (see its log): {_tail(work)}"
            )
            _stopped(current, out, why)
        elif proc.returncode not in (0, None) and not killed:
            for cfg in _pending(configs, out):
                _stopped(
                    cfg, out, f"failed: the worker exited with code {proc.returncode} before measuring: {_tail(work)}"
                )
            return
    for cfg in _pending(configs, out):
        _stopped(
            cfg, out, f"stopped: not started, the measuring time (to {deadline - START:.0f} s of the budget) ran out"
        )
    _show_new(out, shown)
    from .gpu_worker import update_run_info

    update_run_info(out, worker_log_tail=_tail(work, 40))


def _watch(proc, work: Path, deadline: float, kill_grace_s: float, out: Path, shown: set) -> dict | None:
    """Wait for the worker, printing each record as it lands; the progress entry of the
    configuration to stop it for, if it must be killed (its step never returned, or the
    measuring time is over), else None once it exits."""
    while proc.poll() is None:
        time.sleep(0.25)
        _show_new(out, shown)
        prog = _progress(work)
        now = time.time()
        if prog and now > prog["deadline"] + kill_grace_s:
            return prog
        if now > deadline + kill_grace_s:
            return prog or {"run_id": None}
    return None


def _show_new(out: Path, shown: set) -> None:
    """One line per record not shown yet (the device tool returns the output's end)."""
    from .run import read_results

    for r in read_results(out / "results.jsonl"):
        key = (r["run_id"], r.get("recorded_at"))
        if key in shown or r.get("recorded_at", 0) < START:
            continue
        shown.add(key)
        p = ((r.get("predicted") or {}).get("analytic") or {}).get("iteration_time_s")
        m = ((r.get("measured") or {}).get("step_time_s") or {}).get("median")
        what = (
            f"step {1e3 * m:.2f} ms, predicted {1e3 * p:.2f} ms ({100 * (p - m) / m:+.0f} %)"
            if p and m
            else str(r.get("error", ""))[:120]
        )
        print(f"[{time.time() - START:6.1f} s] {r['run_id']}: {r['status']}, {what}", flush=True)


def _progress(work: Path) -> dict | None:
    try:
        return json.loads((work / "progress.json").read_text())
    except (OSError, ValueError):
        return None


def _tail(work: Path, n: int = 1) -> list[str] | str:
    """The worker log's last line (``n`` = 1), or its last ``n`` lines."""
    try:
        lines = (work / "worker.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    lines = [x[:300] for x in lines if "SyncActivityProfilerHandler" not in x]  # the profiler's start/stop notes
    return (lines[-1] if lines else "") if n == 1 else lines[-n:]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m validate.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True, help="folder of the results (DIR)")
    p.add_argument("--budget-s", type=float, default=480.0, help="wall time of the whole run (default 480)")
    p.add_argument("--resume", action="store_true", help="continue the run DIR holds")
    p.add_argument("--cpu", action="store_true", help="the CPU form even where CUDA is available")
    p.add_argument("--models", default=None, help="comma-separated zoo models (default: the eight)")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes")
    p.add_argument("--sizes", default=None, help="comma-separated image sizes (224, 32)")
    p.add_argument("--precisions", default=None, help="comma-separated: fp32, bf16")
    p.add_argument("--steps", type=int, default=None, help="timed steps per configuration")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per configuration")
    p.add_argument("--config-cap-s", type=float, default=None, help="seconds one configuration may take")
    p.add_argument(
        "--kill-grace-s",
        type=float,
        default=KILL_GRACE_S,
        help=f"seconds past a configuration's deadline before its worker is killed (default {KILL_GRACE_S:.0f})",
    )
    p.add_argument("--calibrate-s", type=float, default=None, help="seconds for the calibration (0: skip it)")
    p.add_argument("--cluster", default=None, help="cluster preset to predict with (default: from the device)")
    p.add_argument("--engines", default="analytic", help="comma-separated: analytic, sim (sim needs simpy)")
    p.add_argument("--work-dir", default=None, help="scratch folder (default DIR/../DIR.work)")
    return p.parse_args(argv)


def settings(a) -> dict:
    from simdl.errors import SimdlError

    s = dict(CPU if a.cpu else GPU)
    for key, conv in (("models", str), ("batches", int), ("sizes", int), ("precisions", str)):
        v = getattr(a, key)
        if v:
            try:
                s[key] = tuple(conv(x) for x in v.split(",") if x)
            except ValueError:
                raise SimdlError(f"--{key} {v!r}: accepted: comma-separated integers") from None
    bad = [x for x in s["sizes"] if x not in (224, 32)] + [x for x in s["precisions"] if x not in ("fp32", "bf16")]
    if bad or any(b < 2 for b in s["batches"]):
        raise SimdlError(f"bad value(s) {bad or s['batches']}: sizes 224 or 32, precisions fp32 or bf16, batches >= 2")
    for key in ("steps", "warmup", "config_cap_s", "calibrate_s"):
        if getattr(a, key) is not None:
            s[key] = getattr(a, key)
    if s["steps"] < 1 or s["warmup"] < 0 or s["config_cap_s"] <= 0 or s["calibrate_s"] < 0 or a.budget_s <= 0:
        raise SimdlError(
            f"--steps {s['steps']} / --warmup {s['warmup']} / --config-cap-s {s['config_cap_s']} / "
            f"--calibrate-s {s['calibrate_s']} / --budget-s {a.budget_s}: accepted: steps >= 1, "
            "warm-up >= 0, a cap and a budget > 0, calibration >= 0 (0: skip it)"
        )
    engines = [e for e in a.engines.split(",") if e]
    if not engines or any(e not in ("analytic", "sim") for e in engines):
        raise SimdlError(f"--engines {a.engines!r}: accepted: analytic, sim (comma-separated)")
    return s


def main(argv=None) -> int:
    from simdl.errors import SimdlError

    try:
        return _main(parse_args(argv))
    except SimdlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(a) -> int:
    from . import gpu_calibrate, gpu_summary
    from .gpu_predict import build_cuda, cluster_without_loader, preset_for_device

    out = Path(a.output)
    work = Path(a.work_dir) if a.work_dir else out.parent / f"{out.name}.work"
    if (out / "predictions.jsonl").exists() and not a.resume:
        print(f"{out} already holds a run; pass --resume to continue it", file=sys.stderr)
        return 2
    gpu = None if a.cpu else gpu_name_from_driver()
    a.cpu = gpu is None
    s = settings(a)
    budget_end = START + a.budget_s
    preset = a.cluster or preset_for_device(gpu or "cpu")
    cuda = None if a.cpu else build_cuda()  # the worker runs this interpreter's torch
    cluster = cluster_without_loader(preset, cuda)
    configs = plan_configs(s)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"device: {gpu or 'cpu (tiny settings)'}; preset {preset}"
        + (f" with CUDA {cuda} (torch.version.cuda)" if cuda else "")
        + f"; {len(configs)} configurations; "
        f"budget {a.budget_s:.0f} s",
        flush=True,
    )
    write_predictions(configs, cluster, preset, out, tuple(e for e in a.engines.split(",") if e))
    print(f"predictions written at {time.time() - START:.1f} s", flush=True)
    calib_s = s["calibrate_s"]
    if a.resume:  # measured ones stay; stopped and failed ones are measured again
        configs = _not_ok(configs, out)
    measure_all(
        configs, s, out, work, budget_end - calib_s, force_cpu=a.cpu, expect_cuda=not a.cpu, kill_grace_s=a.kill_grace_s
    )
    print(f"measurements done at {time.time() - START:.1f} s", flush=True)
    if calib_s > 0:
        gpu_calibrate.run(
            out, work, s["calibrate_models"], min(calib_s, budget_end - time.time()), gpu_file=cluster.gpu.name
        )
    text = gpu_summary.write(out)
    print(text)
    print(
        f"gpu_check took {time.time() - START:.1f} s of its {a.budget_s:.0f} s budget "
        f"(CPU {time.process_time():.1f} s in this process)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
