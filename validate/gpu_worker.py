"""The measuring process of :mod:`validate.gpu_check`: ``python -m validate.gpu_worker PLAN.json``.

Started by the parent once the predictions are written; measures the plan's configurations
in order (those with no record of this run yet), and appends one record per
configuration as soon as it ends (ok, stopped at its deadline, or failed with its error:
the others go on). Before each configuration it writes ``progress.json`` (which one, since
when) so that the parent can stop it if a step never returns.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import sys
import time
import traceback
from pathlib import Path


def update_run_info(out: Path, **parts) -> None:
    """Merge ``parts`` into ``DIR/run.json`` (device and versions; the calibration's outcome)."""
    path = Path(out) / "run.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        info = {}
    info.update(parts)
    path.write_text(json.dumps(info, indent=1, default=str) + "\n")


def read_predictions(path: Path) -> dict[str, dict]:
    from simdl.calibrate.records import read_jsonl

    return {r["run_id"]: r for r in read_jsonl(path)} if path.exists() else {}


def append_kernels(path: Path, run_id: str, prof: dict) -> None:
    """One gzip member per configuration: a killed run leaves every finished one readable."""
    line = (
        json.dumps(
            {
                "run_id": run_id,
                "source": prof["source"],
                "profiled_step_s": prof["profiled_step_s"],
                "kernels": prof["kernels"],
            }
        )
        + "\n"
    )
    with open(path, "ab") as f:
        f.write(gzip.compress(line.encode()))


def record(cfg: dict, pred: dict | None, status: str, measured: dict | None, env: dict, **extra) -> dict:
    return {
        "schema": "simdl-validation/1",
        "kind": "gpu_check",
        "profile": "gpu1",
        "run_id": cfg["run_id"],
        "status": status,
        "spec": spec_of(cfg),
        "model_name": cfg["model"],
        "label": f"{cfg['precision']} {cfg['size']}px",
        "predicted": (pred or {}).get("predicted", {}),
        "predicted_at": (pred or {}).get("t"),
        "cluster": (pred or {}).get("cluster"),
        "cluster_profile": (pred or {}).get("cluster_profile"),
        "cluster_profile_sha256": (pred or {}).get("cluster_profile_sha256"),
        "measured": measured or {},
        "host": env_host(env),
        "recorded_at": time.time(),
        **extra,
    }


def spec_of(cfg: dict) -> dict:
    return {
        "experiment": "gpu",
        "model": cfg["model"],
        "strategy": "single",
        "ranks": 1,
        "nodes": 1,
        "batch_size": cfg["batch"],
        "dataset": cfg["dataset"],
        "image_size": cfg["size"],
        "precision": cfg["precision"],
        "optimizer": "momentum",
    }


def env_host(env: dict) -> dict:
    """The host fields validate.run records (the report's setup section reads them)."""
    return {
        "hostname": env.get("hostname"),
        "cpu_cores": env.get("cpu_cores"),
        "cpu_model": env.get("cpu_model"),
        "torch": env.get("torch"),
        "python": env.get("python"),
        "device": env.get("device"),
        "cuda": bool(env.get("device")) and env.get("device") != "cpu",
        "cuda_version": env.get("cuda"),
        "cudnn": env.get("cudnn"),
    }


def run(plan: dict) -> int:
    from . import gpu_device
    from .gpu_measure import Stopped, measure
    from .run import append_result

    out, work = Path(plan["out"]), Path(plan["work"])
    device = gpu_device.pick_device(force_cpu=plan["force_cpu"])
    if plan["expect_cuda"] and device.type != "cuda":
        print("gpu_worker: nvidia-smi saw a GPU but torch.cuda.is_available() is False", file=sys.stderr)
        return 3
    env = gpu_device.environment(device)
    update_run_info(out, env=env)
    preds = read_predictions(out / "predictions.jsonl")
    for cfg in plan["configs"]:  # the parent's list: none of them has a record of this run yet
        rid = cfg["run_id"]
        now = time.time()
        if now + plan["min_config_s"] > plan["deadline"]:
            break  # the parent records what was left unstarted
        deadline = min(now + plan["config_cap_s"], plan["deadline"])
        (work / "progress.json").write_text(json.dumps({"run_id": rid, "started": now, "deadline": deadline}))
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        extra = {"started": started, "processes": 1}
        try:
            measured, prof = measure(cfg, device, deadline, plan["warmup"], plan["steps"])
            append_kernels(out / "kernels.jsonl.gz", rid, prof)
            rec = record(cfg, preds.get(rid), "ok", measured, env, **extra)
        except Stopped as e:
            rec = record(
                cfg,
                preds.get(rid),
                "stopped",
                None,
                env,
                **extra,
                error=f"stopped: its {deadline - now:.0f} s ran out after {e.done}",
            )
        except Exception as e:  # noqa: BLE001 -- recorded; the next configuration goes on
            rec = record(
                cfg,
                preds.get(rid),
                "failed",
                None,
                env,
                **extra,
                error=f"{type(e).__name__}: {str(e)[:400]}",
                traceback=traceback.format_exc()[-2000:],
            )
        rec["wall_s"] = time.time() - now
        append_result(out / "results.jsonl", rec)
        _release(device)
    return 0


def _release(device) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(args[0]).read_text())
    return run(plan)


if __name__ == "__main__":
    sys.exit(main())
