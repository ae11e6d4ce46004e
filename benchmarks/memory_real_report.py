"""Real 2-rank CPU training vs simdl's peak memory: the validation's configurations, few steps.

For each configuration, ``torchrun`` runs ``validate.train`` exactly as the validation
sweep does (generated CIFAR-10-shaped data, SGD momentum 0.9, fp32, gloo, FSDP2 per block
unit; none = HSDP with one rank per shard) but only ``STEPS`` steps: two warm-up steps,
three profiled ones. Both sides:

  measured - validate/measure.py: torch.profiler allocations paired with their frees
             (simdl.memory.measured), live bytes since before the model was built; the
             largest per-step peak over the three profiled steps, of the larger rank;
  simdl    - simdl.predict(...).peak_tensor_bytes with the validation's arguments
             (validate.run.prediction_kwargs) and the cpu-local profile.

Parameter servers: the worker's peak is measured and predicted as above; the server's
tensors live on RPC threads the profiler does not follow, so only its peak RSS is shown
next to simdl's server estimate plus the profile's process baseline (coarse).

Prints measured, predicted and the error per run, the spread of the per-step peaks (how
steady the measurement is), then mean and max |error|. Raw records go to
``runs/memory_real/results.jsonl`` (git-ignored).

Run: ``OMP_NUM_THREADS=1 python benchmarks/memory_real_report.py [--quick]``
(full: 18 runs, about 20-30 minutes on 2 cores; --quick: 4 runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from validate.experiments import RunSpec  # noqa: E402

CONFIGS = [("vit_b_32", 16), ("vit_b_32", 64), ("vgg16", 32), ("efficientnet_v2_l", 32)]
STRATEGIES = [("ddp", ""), ("fsdp", "full"), ("fsdp", "grad_op"), ("fsdp", "none")]
# Parameter servers as validate's experiment 2 runs them (MNIST, rpc), with 2 workers + 1 server.
PS_CONFIGS = [("resnet50", 32)]
PS_STRATEGIES = ("ps-sync", "ps-async")
RANKS = 2
STEPS = 6  # 2 warm-up + 3 profiled (validate.measure.MEMORY_STEPS) + 1


def runs(quick: bool) -> list[RunSpec]:
    out = []
    for model, batch in CONFIGS:
        for strategy, sharding in STRATEGIES:
            if quick and (model, batch) != ("vgg16", 32):
                continue
            out.append(
                RunSpec(
                    "memcheck",
                    model,
                    "cifar10",
                    strategy,
                    RANKS,
                    batch,
                    1,
                    batch * RANKS * STEPS,
                    64,
                    sharding=sharding,
                    max_steps_per_epoch=STEPS,
                )
            )
    for model, batch in PS_CONFIGS:
        for strategy in PS_STRATEGIES:
            out.append(
                RunSpec(
                    "memcheck",
                    model,
                    "mnist",
                    strategy,
                    RANKS,
                    batch,
                    1,
                    batch * RANKS * STEPS,
                    64,
                    max_steps_per_epoch=STEPS,
                )
            )
    return out


def ps_server_estimate(kw: dict) -> float:
    """simdl's host bytes of the (one) server shard: simdl.memory.model.ps_server_bytes."""
    from simdl.cluster import allocate, load_cluster
    from simdl.memory.model import ps_server_bytes
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    table = load_workload(kw["model"], dataset=kw["dataset"])
    wl = Workload(table=table, batch_size=kw["batch_size"], optimizer=kw["optimizer"])
    alloc = allocate(load_cluster(kw["cluster"]), kw["gpus"])
    return ps_server_bytes(wl, build_plan(wl, alloc, StrategyConfig(kw["strategy"], ps_servers=1)))


def main() -> int:
    import simdl
    from simdl.cluster import load_cluster
    from validate.models import registered_wrap_types
    from validate.run import launch, merge_ranks, prediction_kwargs, resolve_profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="VGG16 b32 under each strategy only")
    ap.add_argument("-o", "--out", default=str(ROOT / "runs" / "memory_real"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cluster = str(resolve_profile("cpu-local"))
    errors, t0 = [], time.time()
    print(f"{'run':40s} {'measured MiB':>12s} {'simdl MiB':>10s} {'error':>8s}  per-step spread")
    for run in runs(a.quick):
        kw = prediction_kwargs(run, cluster)
        with registered_wrap_types(run.model_name):
            r = simdl.predict(**kw)
        predicted = r.peak_tensor_bytes
        workdir = out / run.run_id
        rc, cmd, wall = launch(run, workdir, timeout_s=1800, data_dir=None)
        label = f"{run.model} b{run.batch_size} {run.label} x{run.ranks}"
        if rc != 0:
            print(f"{label:40s} failed (exit {rc}; {workdir / 'log.txt'})", flush=True)
            continue
        m = merge_ranks(run, workdir)
        measured = m["peak_allocated_bytes"]
        steps = [s for r in m["peak_allocated_bytes_steps_per_rank"] for s in (r or [])]
        spread = max(max(r) / min(r) - 1 for r in m["peak_allocated_bytes_steps_per_rank"] if r)
        err = predicted / measured - 1
        errors.append(err)
        print(
            f"{label:40s} {measured / 2**20:12.1f} {predicted / 2**20:10.1f} {err:+8.2%}  {spread:.3%}"
            f" ({len(steps)} rank-steps)",
            flush=True,
        )
        server = {}
        if run.is_ps and m.get("server_peak_rss_bytes"):
            # The server's tensors arrive on TensorPipe threads and are updated on RPC threads,
            # which torch.profiler does not follow: only its peak RSS is measured. Compared with
            # the process baseline of the profile (memory.context_MiB, itself an RSS) plus
            # simdl's server tensors: a coarse check, outside the error summary.
            est = ps_server_estimate(kw) + load_cluster(cluster).memory.context_bytes.value
            server = {"server_peak_rss_bytes": m["server_peak_rss_bytes"], "server_estimate_bytes": est}
            print(
                f"{'  server (peak RSS, coarse)':40s} {m['server_peak_rss_bytes'] / 2**20:12.1f} "
                f"{est / 2**20:10.1f} {est / m['server_peak_rss_bytes'] - 1:+8.2%}",
                flush=True,
            )
        with open(out / "results.jsonl", "a") as f:
            f.write(
                json.dumps(
                    {
                        "run_id": run.run_id,
                        "spec": run.to_dict(),
                        "measured_peak_bytes": measured,
                        "measured_steps_per_rank": m["peak_allocated_bytes_steps_per_rank"],
                        "predicted_peak_bytes": predicted,
                        "error": err,
                        "wall_s": wall,
                        **server,
                    }
                )
                + "\n"
            )
    if errors:
        abs_e = [abs(e) for e in errors]
        print(
            f"{len(errors)} runs: |error| mean {statistics.mean(abs_e):.2%}, max {max(abs_e):.2%} "
            f"({time.time() - t0:.0f} s)"
        )
    return 0 if errors else 1


if __name__ == "__main__":
    sys.exit(main())
