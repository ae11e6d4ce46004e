"""Run a profile's experiment matrix for real and predict every run with simdl.

``python -m validate.run --profile smoke|local|paper -o runs/validate/<name>/results.jsonl [--resume]``

For each run of :func:`validate.experiments.experiments`, in order:

1. predict it with simdl (analytic engine, and the SimPy engine when it is available)
   from the run's configuration only, with the cluster profile named by ``--cluster``
   (default: the cpu-local preset; after ``simdl calibrate``, the fitted profile) --
   before the run starts, so the prediction cannot have seen the measurement;
2. launch it: ``torchrun --standalone --nproc-per-node N -m validate.train`` (PS: the
   workers plus one server process).
   With ``--probe``, before and after it, one point of the profile's
   compute stage is measured again: the machine's speed against its profile
   (:mod:`validate.probe`), recorded as ``machine_probe``; the prediction never uses it;
3. merge the ranks' measurements and append one JSON line (run config, measured,
   predicted, the profile's path and checksum) to the results file.

A run is killed, with all its ranks, at ``--timeout`` or when the host's available memory
falls below ``--min-free-mib`` (:mod:`validate.watch`: without swap, a run that outgrows RAM
thrashes for many minutes). A failed run is recorded with its error and the sweep goes on. ``--resume`` skips every
run whose ``run_id`` already has a line (``--retry-failed`` redoes failed ones).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterable, NamedTuple

from simdl.calibrate import host_load

from . import probe as machine_probe
from . import watch
from .experiments import CORES, PROFILES, RunSpec, experiments

SCHEMA = "simdl-validation/1"
# The shipped CPU profile calibrated on this host's processor (simdl.cluster.host), else this one.
DEFAULT_CLUSTER = "cpu-local"
LAB_PROFILES = Path(__file__).resolve().parents[1] / "lab" / "profiles"
COMPRESSED_SUFFIXES = (".gz", ".xz")  # records packed by validate.records: read, never appended to
ENGINES = ("analytic", "sim")


# ----------------------------------------------------------------------------- JSONL


def read_results(path: str | Path) -> list[dict]:
    """Every complete line of a results file (a torn last line, from a kill, is skipped)."""
    from simdl.calibrate.records import read_jsonl

    p = Path(path)
    return read_jsonl(p) if p.exists() else []


def finished_ids(records: list[dict], retry_failed: bool = False) -> set[str]:
    return {r["run_id"] for r in records if r.get("status") == "ok" or (r.get("status") and not retry_failed)}


def append_result(path: str | Path, record: dict) -> None:
    """Append one line and flush it to disk: an interrupted sweep keeps every finished run."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = Path(p).read_text() if p.exists() else ""
    with open(p, "a") as f:
        if text and not text.endswith("\n"):
            f.write("\n")  # a torn last line stays on its own line
        f.write(json.dumps(record, default=_jsonable) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


# ----------------------------------------------------------------------------- cluster profile


def profile_folders() -> tuple[Path, ...]:
    """Where validation looks for a CPU profile by name: the shipped presets, then the
    development machines' calibrations kept with the lab data (``lab/profiles/``)."""
    from simdl.cluster.spec import CLUSTER_DIR

    return (Path(CLUSTER_DIR), LAB_PROFILES)


def resolve_profile(cluster: str) -> Path:
    """The YAML file of a preset name or path; a name found in neither folder of
    :func:`profile_folders` is taken as a shipped preset (and fails there, naming them)."""
    p = Path(cluster)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p.resolve()
    folders = profile_folders()
    for folder in folders:
        if (folder / f"{cluster}.yaml").is_file():
            return (folder / f"{cluster}.yaml").resolve()
    return (folders[0] / f"{cluster}.yaml").resolve()


def profile_for_ranks(cluster: str, ranks: int, workdir: Path) -> tuple[str, str]:
    """(profile path to predict with, note). A single-node preset with fewer device slots
    than ranks (cpu-local: 2) is replaced by the profile calibrated on the same host with
    that many ranks, ``<name>-x<ranks>.yaml`` beside it, when there is one (``simdl
    calibrate --nproc-per-node <ranks>``); otherwise it gets a derived copy with
    ``gpus_per_node = ranks``: the ranks are more processes sharing the same device
    (oversubscribed)."""
    import yaml

    from simdl.cluster import load_cluster

    path = resolve_profile(cluster)
    spec = load_cluster(str(path))
    if ranks <= spec.gpus_per_node or spec.inter_node is not None:
        return str(path), ""
    calibrated = _sibling_with_ranks(Path(path), spec, ranks)
    if calibrated is not None:
        return str(calibrated), (
            f"profile {spec.name} has {spec.gpus_per_node} device slots; "
            f"{calibrated.name} was calibrated on the same host with {ranks} ranks"
        )
    d = spec.to_dict()
    d["name"] = f"{spec.name}-x{ranks}"
    d["gpus_per_node"] = ranks
    d["description"] = (
        f"{spec.description} -- {ranks} rank processes on the same device "
        f"(oversubscribed; derived by validate.run from {path})"
    )
    out = workdir / "profiles" / f"{spec.name}-x{ranks}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        f"# Derived from {path} by validate.run: gpus_per_node {spec.gpus_per_node} -> {ranks}.\n"
        + yaml.safe_dump(d, sort_keys=False)
    )
    return str(out), f"profile {spec.name} has {spec.gpus_per_node} device slots; derived {out.name} with {ranks}"


def _sibling_with_ranks(path: Path, spec, ranks: int) -> Path | None:
    """A profile beside ``path`` calibrated with ``ranks`` ranks on the processor ``spec`` was
    calibrated on: ``<name>-x<ranks>.yaml`` first, else any whose provenance names the same
    CPU and caches (cpu-epyc-milan, 2 ranks, and cpu-epyc-x4, 4 ranks, on the Zen 3). For a
    profile in one of :func:`profile_folders`, the other folders count as beside it (the shipped
    cpu-local's 4-rank sibling cpu-local-x4 is in lab/profiles/)."""
    from simdl.cluster import load_cluster
    from simdl.cluster.host import profile_caches, profile_devices

    known = [f.resolve() for f in profile_folders()]
    here = path.parent.resolve()
    folders = [here] + ([f for f in known if f != here] if here in known else [])
    named = [f / f"{path.stem}-x{ranks}.yaml" for f in folders if (f / f"{path.stem}-x{ranks}.yaml").exists()]
    devices, caches = profile_devices(spec), profile_caches(spec)
    others = [p for f in folders for p in sorted(f.glob("*.yaml")) if p not in named and p.resolve() != path.resolve()]
    for cand in named + (others if devices else []):
        other = load_cluster(str(cand))
        if other.gpus_per_node != ranks or other.inter_node is not None:
            continue
        if cand in named or (profile_devices(other) == devices and profile_caches(other) == caches):
            return cand
    return None


def profile_digest(path: str) -> str:
    """Digest of everything a prediction reads from a cluster profile: the YAML, the resolved
    profile (a preset it ``extends`` included) and the compute profile (JSON) it names."""
    from simdl.cluster import load_cluster
    from simdl.errors import SimdlError

    h = hashlib.sha256(Path(path).read_bytes())
    try:
        spec = load_cluster(path)
    except SimdlError:
        return h.hexdigest()[:16]  # does not load: the sweep stops on it before any run
    h.update(json.dumps(spec.to_dict(), sort_keys=True, default=str).encode())
    if spec.compute_profile and Path(spec.compute_profile).is_file():
        h.update(Path(spec.compute_profile).read_bytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- prediction


def prediction_kwargs(run: RunSpec, cluster_path: str) -> dict:
    """simdl.predict arguments from the run's configuration alone."""
    from .data import SHAPES

    train = run.train_images
    if run.max_steps_per_epoch:
        train = min(train, run.max_steps_per_epoch * run.batch_size * run.ranks)
    kw: dict[str, Any] = dict(
        model=run.model_name,
        strategy=run.strategy,
        gpus=run.ranks,
        nodes=run.nodes,
        cluster=cluster_path,
        train_samples=train,
        batch_size=run.batch_size,
        epochs=run.epochs,
        optimizer=run.optimizer,
        precision="fp32",
        loader_workers=0,
    )
    if run.width == 1:
        kw["dataset"] = run.dataset
    else:  # a reduced model: its own table, traced from its factory
        kw.update(dataset=run.dataset, input_shape="x".join(map(str, SHAPES[run.dataset])), num_classes=10)
    if run.strategy == "fsdp":
        # validate/train.py gives every unit, the root included, reshard_after_forward
        # explicitly (True for full and hybrid), so FSDP2 reshards the root too.
        kw.update(sharding=run.sharding, wrap="block", reshard_root=run.sharding in ("full", "hybrid"))
        if run.shard_group:
            kw["shard_group"] = run.shard_group
    if run.is_ps:
        kw["ps_servers"] = 1
        if run.strategy == "ps-ssp":
            kw["staleness_bound"] = run.staleness_bound
    return kw


def summarise_result(r) -> dict:
    d = {
        "iteration_time_s": r.iteration_time_s,
        "epoch_time_s": r.epoch_time_s,
        "total_time_s": r.total_time_s,
        "iterations_per_epoch": r.iterations_per_epoch,
        "peak_tensor_bytes": r.peak_tensor_bytes,
        "peak_memory_bytes": r.peak_memory_bytes,
        "memory_breakdown_bytes": r.memory_breakdown_bytes,
        "gpu_utilization": r.gpu_utilization,
        "compute_time_s": r.compute_time_s,
        "comm_time_s": r.comm_time_s,
        "exposed_comm_time_s": r.exposed_comm_time_s,
        "comm_bytes_per_iteration": r.comm_bytes_per_iteration,
        "step_split_s": r.step_split_s,
        "iteration_time_band_s": list(r.iteration_time_band_s) if r.iteration_time_band_s else None,
        "staleness": {
            "mean": r.staleness.mean,
            "p50": r.staleness.p50,
            "p99": r.staleness.p99,
            "max": r.staleness.max,
            **(
                {"held_pulls": r.staleness.held_pulls, "held_wait_s": r.staleness.held_wait_s}
                if r.staleness.held_pulls is not None
                else {}
            ),
        },
        "notes": list(r.notes),
        "assumed": r.config.get("assumed", {}),
        "compute_source": r.config.get("compute_source", ""),
    }
    for extra in ("memory_timeline", "staleness_histogram", "trace"):
        v = getattr(r, extra, None)
        if v is not None and extra != "trace":
            d[extra] = v
    return d


def _sim_extras(sim_run, result, points: int = 400) -> dict:
    """The simulated memory over one steady-state iteration (the first rank class, times from
    its start) and the simulated staleness histogram, when the SimPy engine returned its run."""
    out: dict[str, Any] = {}
    hist = getattr(sim_run, "staleness_histogram", None)
    if hist:
        out["staleness_histogram"] = {str(int(k)): int(v) for k, v in sorted(hist.items())}
    memory = getattr(sim_run, "memory", None)
    if memory:  # the simulator records one steady-state iteration of each rank class
        tl = memory[sorted(memory)[0]]
        times, total = tl.times, tl.total
        if len(times):
            t0 = float(times[0])
            curve = [[float(times[i]) - t0, float(total[i])] for i in range(len(times))]
            if len(curve) > points:
                step = len(curve) / points
                curve = [
                    max(curve[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)], key=lambda p: p[1])
                    for i in range(points)
                ]
            out["memory_timeline"] = curve
    return out


def predict_run(run: RunSpec, cluster_path: str, engines=ENGINES) -> dict:
    import simdl

    from .models import registered_wrap_types

    kw = prediction_kwargs(run, cluster_path)
    out: dict[str, Any] = {"kwargs": {k: v for k, v in kw.items()}}
    for engine in engines:
        t = time.perf_counter()
        try:
            with registered_wrap_types(run.model_name):
                if engine == "sim":
                    sim_run = simdl.predict(**kw, engine=engine, return_run=True)
                    r = getattr(sim_run, "result", sim_run)
                    out[engine] = summarise_result(r)
                    out[engine].update(_sim_extras(sim_run, r))
                else:
                    r = simdl.predict(**kw, engine=engine)
                    out[engine] = summarise_result(r)
            fsdp_units = r.config.get("fsdp_units")
            if fsdp_units is not None:
                out[engine]["fsdp_units"] = fsdp_units
            out[engine]["predict_s"] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 -- the sim engine may not exist yet; record why
            out[engine] = {"error": f"{type(e).__name__}: {e}"}
    return out


# ----------------------------------------------------------------------------- launching


class Launched(NamedTuple):
    returncode: int
    command: str
    wall_s: float
    stopped: str = ""  # why the runner killed it (validate.watch): time or host memory; "" if it ended
    min_available_bytes: int | None = None  # the host's lowest MemAvailable while it ran
    cpu: dict | None = None  # what other processes took of the CPU meanwhile (simdl.calibrate.host_load)


def launch(run: RunSpec, workdir: Path, timeout_s: float, data_dir: str | None, min_available: int = 0) -> Launched:
    workdir.mkdir(parents=True, exist_ok=True)
    for old in workdir.glob("rank*.json"):
        old.unlink()
    spec = workdir / "spec.json"
    spec.write_text(json.dumps(run.to_dict(), indent=1))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={run.processes}",
        "-m",
        "validate.train",
        "--spec",
        str(spec),
        "--out",
        str(workdir),
    ]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default, stated: one thread per rank process
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    if data_dir:
        env["SIMDL_DATA_DIR"] = data_dir
    t = time.perf_counter()
    with open(workdir / "log.txt", "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        # torchrun reaps its ranks and this process reaps torchrun, so their CPU is "own" by the
        # time the meter stops; a rank the runner had to kill may be reaped by init instead and
        # then counts as another's (such a run is failed anyway).
        meter = host_load.CpuMeter()
        w = watch.run_watched(cmd, stdout=log, env=env, timeout_s=timeout_s, min_available=min_available)
        share = meter.stop()
        if w.stopped:
            log.write(f"\npython -m validate.run: stopped the run: {w.stopped}\n")
    return Launched(
        w.returncode,
        " ".join(cmd),
        time.perf_counter() - t,
        w.stopped,
        w.min_available_bytes,
        share.to_dict() if share else None,
    )


_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)[^\n]*?(?:\((SIG\w+)\))?\n", re.S)
# a rank's exception line; torch >= 2.4 prefixes each line a rank prints with "[rank<R>]: "
_EXCEPTION = re.compile(r"^(?:\[rank(\d+)\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$", re.M)


def _rank_failure(log: Path) -> str:
    """Why torchrun failed, from its log, for the run's record: the first rank that failed, its
    exit code or signal, and the last exception that rank printed (else any rank's; torchrun's own
    ChildFailedError left out); empty when the log says nothing. A rank killed by SIGKILL (exit -9) is, on Linux,
    nearly always the kernel's out-of-memory killer (more ranks x resident set than RAM);
    torchrun only prints the exit code."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    parts = []
    m = _ROOT_CAUSE.search(text)
    root = m.group(1) if m else None
    if m:
        parts.append(f"rank {root} exit {m.group(2)}" + (f" {m.group(3)}" if m.group(3) else ""))
    errors = [(r, e.strip()) for r, e in _EXCEPTION.findall(text) if "ChildFailedError" not in e]
    own = [e for r, e in errors if r == root]
    if own or errors:
        parts.append((own or [e for _, e in errors])[-1][:300])
    if "(exitcode: -9)" in text or "exitcode  : -9" in text:
        parts.append("a rank was killed by SIGKILL, exit -9: usually the out-of-memory killer; see `dmesg`")
    return f" ({'; '.join(parts)})" if parts else ""


def profiling_overhead(run: RunSpec, m: dict) -> float | None:
    """Seconds the harness's own profiling added to the training time of a merged record
    ``m``: the profiled steps' excess over the run's median steady step, and the profiler's
    stop. A user's training has neither, and simdl does not predict them. SPMD ranks share
    each step (``all_step_times_s`` is the slowest rank's), so the window is the profiled
    step and the memory steps after it (validate/train.py), plus the slowest stop. A PS
    worker profiles its step ``warmup_steps`` alone, and the slowest worker's addition is
    taken (sync waits for it; async runs end with their last worker). None for runs that did
    not record every step (before 2026-11-29)."""
    from . import measure

    steps, stops = m.get("all_step_times_s"), m.get("profiler_stop_s")
    if not steps or not stops or not m.get("steady_step_times_s"):
        return None
    w = run.warmup_steps
    if run.is_ps:
        return max(
            max(s[w] - statistics.median(s[w + 1 :]), 0.0) + stop for s, stop in zip(steps, stops) if len(s) > w + 1
        )
    base = statistics.median(m["steady_step_times_s"])
    window = range(w, min(w + measure.MEMORY_STEPS, len(steps)))
    return sum(max(steps[i] - base, 0.0) for i in window) + max(stops)


def _slowest_per_step(per_rank: Iterable[list[float]]) -> list[float]:
    """Lockstep ranks' step times as one sequence: each step lasts as long as its slowest
    rank, over the steps every rank has."""
    return [max(step) for step in zip(*per_rank)]


def merge_ranks(run: RunSpec, workdir: Path) -> dict:
    """One measured record from the ranks' files (see validate/measure.py for each figure)."""
    from . import measure

    ranks = []
    for f in sorted(workdir.glob("rank*.json")):
        ranks.append(json.loads(f.read_text()))
    errors = [r["error"] for r in ranks if "error" in r]
    if errors:
        raise RuntimeError(errors[0].strip().splitlines()[-1] if errors[0].strip() else "rank failed")
    if run.is_ps:
        server = [r for r in ranks if r.get("role") == "server"]
        trainers = [r for r in ranks if r.get("role") == "worker"]
    else:
        server, trainers = [], ranks
    if len(trainers) != run.ranks:
        raise RuntimeError(f"{len(trainers)} of {run.ranks} ranks wrote results")
    trainers.sort(key=lambda r: r["rank"])
    if run.is_ps:  # workers run independently: pool their iterations
        steady = [t for r in trainers for t in r["steady_step_times_s"]]
    else:  # ranks step in lockstep: a step lasts as long as its slowest rank
        steady = _slowest_per_step(r["steady_step_times_s"] for r in trainers)
    first = trainers[0]
    epochs = [max(r["epoch_times_s"][i] for r in trainers) for i in range(len(first["epoch_times_s"]))]
    acc = next((r["test_accuracy"] for r in trainers if r.get("test_accuracy") is not None), None)
    m = {
        "step_time_s": measure.step_stats(steady),
        "steady_step_times_s": steady,
        # every step from the first, warm-up and profiled ones included (PS: per worker; SPMD:
        # the slowest rank per step): what the training time is made of; absent before 2026-11-29
        **(
            {
                "all_step_times_s": (
                    [r["step_times_s"] for r in trainers]
                    if run.is_ps
                    else _slowest_per_step(r["step_times_s"] for r in trainers)
                )
            }
            if all(r.get("step_times_s") for r in trainers)
            else {}
        ),
        # how long each rank's torch.profiler took to stop after the profiled steps (outside
        # every timed step; inside the training time)
        **(
            {"profiler_stop_s": [r["profiler_stop_s"] for r in trainers]}
            if all(r.get("profiler_stop_s") is not None for r in trainers)
            else {}
        ),
        "epoch_times_s": epochs,
        "total_time_s": max(r["train_time_s"] for r in trainers),
        "steps_per_rank": first["steps"],
        "peak_allocated_bytes": max(r["peak_allocated_bytes"] for r in trainers),
        "peak_allocated_bytes_per_rank": [r["peak_allocated_bytes"] for r in trainers],
        # each rank's peak in each profiled steady step (validate/measure.py): how steady it is
        "peak_allocated_bytes_steps_per_rank": [r.get("peak_allocated_bytes_steps") for r in trainers],
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in trainers),
        # minor page faults (bytes) per steady step, median per rank (validate/measure.py);
        # absent from runs made before 2026-11-26T17:00Z
        **(
            {
                "page_fault_bytes_per_step_per_rank": [
                    float(statistics.median(r["steady_fault_bytes"])) for r in trainers
                ]
            }
            if all(r.get("steady_fault_bytes") for r in trainers)
            else {}
        ),
        "busy_fraction": sum(r["busy_fraction"] for r in trainers) / len(trainers),
        # the profiled step's busy time by group (validate/measure.py busy_groups), mean of the
        # ranks; absent from runs made before 2026-11-25
        **(
            {
                "busy_by_group_s": {
                    k: sum(r["busy_by_group_s"][k] for r in trainers) / len(trainers)
                    for k in trainers[0]["busy_by_group_s"]
                }
            }
            if all(r.get("busy_by_group_s") for r in trainers)
            else {}
        ),
        # the profiled step's length (the groups' denominator; the profiler slows the step)
        **(
            {"profiled_step_s": sum(r["profiled_range_s"] for r in trainers) / len(trainers)}
            if all(r.get("profiled_range_s") for r in trainers)
            else {}
        ),
        "comm_payload_bytes_per_step": first["comm_payload_bytes_per_step"],
        "comm_sent_bytes_per_step": sum(r["comm_sent_bytes_per_step"] for r in trainers) / len(trainers),
        "collectives_per_step": first["collectives_per_step"],
        "test_accuracy": acc,
        "memory_timeline": first["memory_timeline"],
        "data": first.get("data"),
        "input_shape": first.get("input_shape"),
        "adaptation": first.get("adaptation"),
        "device": first.get("device"),
        "transport": first.get("transport", first.get("backend")),
    }
    overhead = profiling_overhead(run, m)
    if overhead is not None:
        m["profiling_overhead_s"] = overhead
    if server:
        m["staleness"] = server[0]["staleness"]
        if server[0].get("staleness_steady"):
            m["staleness_steady"] = server[0]["staleness_steady"]
        pulls = len(server[0].get("pull_events") or [])  # every pull, held ones on release
        if run.strategy == "ps-ssp" and "held_pulls" in server[0] and pulls:
            # How often the staleness bound held a pull back, and the mean wait per pull
            # (held or not): the sim engine's Result.staleness.held_pulls / held_wait_s.
            held = server[0]["held_pulls"]
            m["ssp_held_pulls"] = {
                "held": len(held),
                "pulls": pulls,
                "fraction": len(held) / pulls,
                "mean_wait_s": sum(r - a for *_, a, r in held) / pulls,
            }
        m["server_updates"] = server[0]["updates"]
        m["server_update_time_s"] = server[0]["update_time_s"]
        m["server_peak_rss_bytes"] = server[0]["peak_rss_bytes"]
    return m


def host_info() -> dict:
    import torch

    from simdl.cluster.host import allocator_env, cpu_fingerprint

    fp = cpu_fingerprint()
    return {
        "hostname": platform.node(),
        "cpu_cores": CORES,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cuda": torch.cuda.is_available(),
        "cpu_model": fp["cpu_model"],
        "cpu_caches": fp["caches"],
        "cpu_identity": fp["identity"],
        "allocator_env": allocator_env(),
    }


def _profile_reasons(profiles: dict[int, tuple[str, str, str]], check) -> list[str]:
    """``check(spec)`` of each of the sweep's profiles, each reason once."""
    from simdl.cluster import load_cluster

    out = []
    for path, _, _ in profiles.values():
        why = check(load_cluster(path))
        if why and why not in out:
            out.append(why)
    return out


def profile_host_mismatches(profiles: dict[int, tuple[str, str, str]]) -> list[str]:
    """Why the sweep's profiles do not describe this host (one reason per profile), empty when
    they all do: a CPU profile calibrated on another processor predicts that processor."""
    from simdl.cluster.host import host_mismatch

    return _profile_reasons(profiles, host_mismatch)


def profile_allocator_mismatches(profiles: dict[int, tuple[str, str, str]]) -> list[str]:
    """Which of the sweep's profiles were timed under other malloc settings than the ranks
    will run with (they inherit this process's environment): glibc's heap trimming moved the
    same runs by up to 40 % on the Zen 4 (simdl.cluster.host.allocator_mismatch). A warning and a
    label, not a refusal: predicting heap-kept runs with a default-glibc profile is how the
    size of the effect was measured (lab/CAMPAIGN.md)."""
    from simdl.cluster.host import allocator_mismatch

    return _profile_reasons(profiles, allocator_mismatch)


def sweep_profiles(cluster: str, ranks: Iterable[int], root: Path) -> dict[int, tuple[str, str, str]]:
    """Per rank count: (profile path, note, digest of what predictions read from it:
    :func:`profile_digest`), resolved once when a sweep
    starts, so that every run of the sweep is predicted with the same profile."""
    out = {}
    for n in sorted(set(ranks)):
        path, note = profile_for_ranks(cluster, n, root)
        out[n] = (path, note, profile_digest(path))
    return out


def run_one(
    run: RunSpec,
    profile: str,
    cluster: str,
    root: Path,
    timeout_s: float,
    data_dir: str | None,
    engines=ENGINES,
    sweep_command: str = "",
    profiles: dict[int, tuple[str, str, str]] | None = None,
    host_mismatch: str = "",
    probe: bool = False,
    min_available: int = 0,
    wait_quiet_s: float = -1.0,
    allocator_mismatch: str = "",
) -> dict:
    workdir = root / run.run_id
    if profiles is None:
        profiles = sweep_profiles(cluster, [run.ranks], root)
    cluster_path, profile_note, sha = profiles[run.ranks]
    now = profile_digest(cluster_path) if Path(cluster_path).is_file() else "missing"
    if now != sha:
        # A profile edited (or recalibrated) while the sweep runs: predicting this run with it
        # would mix two profiles in one sweep, and a half-written file may not load.
        return {
            "schema": SCHEMA,
            "run_id": run.run_id,
            "profile": profile,
            "sweep_command": sweep_command,
            "spec": run.to_dict(),
            "status": "failed",
            "cluster_profile": cluster_path,
            "error": f"cluster profile {cluster_path} changed during the sweep (sha256 {sha} at the start, "
            f"{now} now); rerun with --resume --retry-failed",
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": run.run_id,
        "profile": profile,
        "sweep_command": sweep_command,
        "spec": run.to_dict(),
        "label": run.label,
        "model_name": run.model_name,
        "oversubscribed": run.oversubscribed,
        "processes": run.processes,
        "cores": CORES,
        "cluster_profile": cluster_path,
        "cluster_profile_sha256": sha,
        "cluster_profile_note": profile_note,
        **({"host_mismatch": host_mismatch} if host_mismatch else {}),
        **({"allocator_mismatch": allocator_mismatch} if allocator_mismatch else {}),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    rec["predicted"] = predict_run(run, cluster_path, engines)  # before the run: blind to it
    if wait_quiet_s >= 0:
        # Others' CPU before and during the run (simdl.calibrate.host_load): on 2 cores, one
        # other job slows a run by a third, and the record must say so.
        rec["host_cpu_before"] = host_load.wait_for_quiet(wait_quiet_s, what=f"starting {run.run_id}")
    point = machine_probe.probe_point(cluster_path, run) if probe else {}
    if point and "skipped" not in point:
        before = machine_probe.measure(point, workdir / "probe-before")
    ran = launch(run, workdir, timeout_s, data_dir, min_available)
    rc = ran.returncode
    if point:
        rec["machine_probe"] = (
            point
            if "skipped" in point
            else machine_probe.speed(point, before, machine_probe.measure(point, workdir / "probe-after"))
        )
    rec.update(
        command=ran.command,
        wall_s=ran.wall_s,
        returncode=rc,
        workdir=str(workdir),
        host_min_available_bytes=ran.min_available_bytes,
        host_cpu=ran.cpu,
        host_memory_floor_bytes=min_available or None,
    )
    try:
        rec["measured"] = merge_ranks(run, workdir)
        rec["status"] = "ok"
        if rc != 0:
            # Every rank wrote its complete record (after training and evaluation), so the
            # measurement is whole: a rank failed or hung while tearing down (the barrier,
            # gloo's destroy_process_group, interpreter exit). Kept, and labelled; the report
            # counts them.
            why = f" ({ran.stopped})" if ran.stopped else ""
            rec["teardown_error"] = (
                f"torchrun exited with {rc}{why} after every rank wrote its results"
                f"{_rank_failure(workdir / 'log.txt')}; see {workdir / 'log.txt'}"
            )
    except Exception as e:  # noqa: BLE001 -- a failed run is recorded, the sweep goes on
        rec["status"] = "failed"
        # The runner's own stop comes first: it is why the ranks' records are missing.
        rec["error"] = (
            (f"stopped: {ran.stopped}; " if ran.stopped else "")
            + f"{e}"
            + _rank_failure(workdir / "log.txt")
            + f"; see {workdir / 'log.txt'}"
        )
    rec["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rec["host"] = host_info()
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.run", description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, choices=PROFILES)
    p.add_argument("-o", "--output", required=True, help="results JSONL (runs/validate/<name>/results.jsonl)")
    p.add_argument("--resume", action="store_true", help="skip runs already in the output file")
    p.add_argument("--retry-failed", action="store_true", help="with --resume: redo runs recorded as failed")
    p.add_argument(
        "--cluster",
        default=None,
        help="cluster profile (preset name or YAML path) to predict with; default: the shipped "
        f"CPU profile calibrated on this host's processor, else {DEFAULT_CLUSTER}",
    )
    p.add_argument("--only", default=None, help="run only runs whose id contains this text")
    p.add_argument("--limit", type=int, default=0, help="at most this many runs")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per run before it is killed")
    p.add_argument(
        "--min-free-mib",
        type=float,
        default=None,
        help="stop a run when the host's MemAvailable falls below this many MiB (validate/watch.py: "
        "no swap here, a run that outgrows RAM thrashes for many minutes); default "
        "max(512, 3 %% of RAM); 0: no floor",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="before each run, wait up to this long while other processes keep more than a quarter "
        "of a core busy (simdl/calibrate/host_load.py); the run then starts anyway and its record "
        "says how busy the machine was before and during it; default 120, 0: measure without "
        "waiting, -1: do not measure",
    )
    p.add_argument("--data-dir", default=None, help="directory with CIFAR-10/MNIST (torchvision layout)")
    p.add_argument("--engines", default=",".join(ENGINES), help="prediction engines, comma-separated")
    p.add_argument(
        "--allow-other-host",
        action="store_true",
        help="predict with a CPU profile calibrated on another processor (the runs are "
        "labelled; default for --profile smoke, which checks the plumbing only)",
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="before and after each run, re-measure a point of the profile's compute stage "
        "(validate/probe.py: the machine's speed against its profile; about 2 x 15-40 s per run). "
        'Off by default: its ratio did not explain the runs\' errors (lab/CAMPAIGN.md, "A third blind sweep")',
    )
    p.add_argument("--list", action="store_true", help="print the matrix and exit")
    a = p.parse_args(argv)
    if a.min_free_mib is not None and not (0 <= a.min_free_mib < float("inf")):
        print(
            f"python -m validate.run: error: --min-free-mib {a.min_free_mib:g} must be a finite number of MiB >= 0 "
            "(0: no floor)",
            file=sys.stderr,
        )
        return 2
    if not (-1 <= a.wait_quiet < float("inf")) or -1 < a.wait_quiet < 0:
        print(
            f"python -m validate.run: error: --wait-quiet {a.wait_quiet:g} must be a finite number of seconds "
            ">= 0, or -1 (do not measure)",
            file=sys.stderr,
        )
        return 2
    floor = watch.default_floor() if a.min_free_mib is None else int(a.min_free_mib * watch.MiB)
    if a.cluster is None:
        from simdl.cluster.host import preset_for_this_host

        a.cluster = preset_for_this_host(folders=profile_folders()) or DEFAULT_CLUSTER
    runs = experiments(a.profile)
    if a.only:
        runs = [r for r in runs if a.only in r.run_id]
    if a.limit:
        runs = runs[: a.limit]
    if a.list:
        for r in runs:
            print(f"{r.run_id:60s} processes={r.processes}{' oversubscribed' if r.oversubscribed else ''}")
        return 0
    out = Path(a.output)
    if out.name.endswith(COMPRESSED_SUFFIXES):
        print(
            f"python -m validate.run: error: -o {out}: a sweep appends to a plain .jsonl file (accepted: "
            "a path ending in .jsonl); pack it when done: python -m validate.records add",
            file=sys.stderr,
        )
        return 2
    existing = read_results(out)
    if existing and not a.resume:
        print(f"{out} already has {len(existing)} results; pass --resume to continue it", file=sys.stderr)
        return 2
    done = finished_ids(existing, a.retry_failed)
    root = out.parent
    engines = tuple(e for e in a.engines.split(",") if e)
    todo = [r for r in runs if r.run_id not in done]
    sweep = "python -m validate.run " + " ".join(argv if argv is not None else sys.argv[1:])
    print(
        f"profile {a.profile}: {len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to run"
        + (
            f"; a run is stopped if the host's available memory falls below {floor / watch.MiB:.0f} MiB"
            if floor
            else ""
        ),
        flush=True,
    )
    from simdl.errors import SimdlError

    try:
        profiles = sweep_profiles(a.cluster, [r.ranks for r in todo], root)
    except SimdlError as e:
        print(f"python -m validate.run: error: {e}", file=sys.stderr)
        return 2
    other = "; ".join(profile_host_mismatches(profiles))
    if other and not (a.allow_other_host or a.profile == "smoke"):
        print(
            f"python -m validate.run: error: {other}: calibrate this host first (simdl calibrate "
            "--nproc-per-node 2 -o my_host.yaml, then --cluster my_host.yaml), or pass --allow-other-host "
            "to predict with it anyway (the runs are labelled)",
            file=sys.stderr,
        )
        return 2
    if other:
        print(f"warning: {other}; the runs are labelled host_mismatch", file=sys.stderr, flush=True)
    malloc = "; ".join(profile_allocator_mismatches(profiles))
    if malloc:
        print(
            f"warning: {malloc}; the runs are labelled allocator_mismatch (calibrate under the "
            "ranks' malloc settings to predict them)",
            file=sys.stderr,
            flush=True,
        )
    for i, run in enumerate(todo, 1):
        t = time.perf_counter()
        rec = run_one(
            run,
            a.profile,
            a.cluster,
            root,
            a.timeout,
            a.data_dir,
            engines,
            sweep,
            profiles,
            host_mismatch=other,
            probe=a.probe,
            min_available=floor,
            wait_quiet_s=a.wait_quiet,
            allocator_mismatch=malloc,
        )
        append_result(out, rec)
        msg = rec.get("error", "")
        if rec["status"] == "ok":
            m, pr = rec["measured"], rec["predicted"].get("analytic", {})
            msg = f"step {m['step_time_s']['median']:.4g} s (predicted {pr.get('iteration_time_s', float('nan')):.4g})"
            ratio = rec.get("machine_probe", {}).get("speed_ratio")
            if ratio:
                msg += f"; machine {ratio:.3f} x its profile's step"
            busy = host_load.busy_note(rec)
            if busy:
                msg += f"; warning: {busy}"
            if rec.get("teardown_error"):
                msg += f"; warning: {rec['teardown_error']}"
        print(f"[{i}/{len(todo)}] {run.run_id}: {rec['status']} in {time.perf_counter() - t:.0f} s  {msg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
