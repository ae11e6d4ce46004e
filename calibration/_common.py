"""What every calibration script shares: device/backend choice, per-rank JSONL logs, budgets.

The scripts in this folder are launched by ``torchrun`` (``simdl calibrate`` does it for
you). Each one measures one *stage* and writes ``<stage dir>/rank<R>.jsonl`` as it goes:
one JSON object per line, flushed and fsynced after every measurement, so that a rank
that dies leaves everything it measured readable. When a stage completes, rank 0 writes
``<stage dir>/DONE``. On a rerun (``--resume``) a measurement whose key every rank has
already logged is skipped; the others are measured again and appended (readers keep the
last record per key and rank).

Device and backend are chosen at run time: CUDA + NCCL when a GPU is visible, otherwise
CPU + gloo. On CPU, when the ranks on a node are at least as many as its cores, each
rank uses one intra-op thread (``torch.set_num_threads(1)``): more would oversubscribe
the cores and gloo's own communication threads, and the header records that choice.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

SCHEMA = 1


@dataclass
class Ctx:
    rank: int
    world: int
    local_rank: int
    local_world: int
    node: int
    nodes: int
    device: torch.device
    backend: str
    threads: int
    out: Path
    log: "RankLog"
    deadline: float
    quick: bool

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", required=True, help="stage directory (rank<R>.jsonl files go here)")
    p.add_argument("--budget", type=float, default=60.0, help="seconds this stage may measure for")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    return p


def _versions() -> dict[str, Any]:
    v: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        if torch.cuda.is_available() and torch.distributed.is_nccl_available():
            nccl = torch.cuda.nccl.version()
            v["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 - versions are informative only
        pass
    v["gloo"] = "bundled with torch " + torch.__version__ if dist.is_gloo_available() else "unavailable"
    return v


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    # One definition of a CPU's name: validate.run compares it with the profile's provenance.
    return cpu_device_name()


def setup(args: argparse.Namespace, stage: str) -> Ctx:
    """Initialise the process group and this rank's log; returns the context."""
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        cores = os.cpu_count() or 1
        # Ranks >= cores: one thread each (else they fight for the cores with gloo's threads).
        torch.set_num_threads(1 if local_world >= cores else max(1, cores // local_world))
    dist.init_process_group(backend, device_id=device if use_cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    nodes = max(1, world // max(local_world, 1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = RankLog(out / f"rank{rank}.jsonl")
    ctx = Ctx(
        rank=rank,
        world=world,
        local_rank=local_rank,
        local_world=local_world,
        node=rank // max(local_world, 1),
        nodes=nodes,
        device=device,
        backend=backend,
        threads=torch.get_num_threads(),
        out=out,
        log=log,
        deadline=time.monotonic() + float(args.budget),
        quick=bool(args.quick),
    )
    log.write(
        {
            "type": "header",
            "stage": stage,
            "schema": SCHEMA,
            "rank": rank,
            "world": world,
            "local_rank": local_rank,
            "local_world": local_world,
            "node": ctx.node,
            "nodes": nodes,
            "host": socket.gethostname(),
            "device": device_name(device),
            "backend": backend,
            "threads": ctx.threads,
            "cpu_count": os.cpu_count(),
            "cpu_caches": cache_sizes(),
            "cpu_identity": cpu_identity(),
            "allocator_env": allocator_env(),
            "threads_note": (
                "torch.set_num_threads(1): ranks per node >= cores"
                if not use_cuda and local_world >= (os.cpu_count() or 1)
                else ""
            ),
            "versions": _versions(),
            "loadavg": list(os.getloadavg()),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "budget_s": float(args.budget),
            "quick": bool(args.quick),
            "pid": os.getpid(),
        }
    )
    return ctx


class RankLog:
    """Append-only JSONL, one record per line, durable after every write."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.done: set[str] = set()
        if self.path.exists():
            for rec in read_jsonl(self.path):
                if rec.get("type") == "measurement" and "key" in rec:
                    self.done.add(rec["key"])
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict[str, Any]) -> None:
        self._f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def measurement(self, key: str, **fields: Any) -> None:
        self.write({"type": "measurement", "key": key, "t": time.time(), **fields})
        self.done.add(key)

    def close(self) -> None:
        self._f.close()


from simdl.calibrate.records import read_jsonl  # noqa: E402  (a torn last line is skipped)
from simdl.cluster.host import allocator_env, cache_sizes, cpu_device_name, cpu_identity  # noqa: E402


def agreed_done(ctx: Ctx) -> set[str]:
    """Keys every rank has logged (so all ranks skip the same measurements on resume)."""
    sets: list[Any] = [None] * ctx.world
    dist.all_gather_object(sets, sorted(ctx.log.done))
    common = set(sets[0])
    for s in sets[1:]:
        common &= set(s)
    return common


def agree(ctx: Ctx, ok: bool) -> bool:
    """True only if every rank says ok (a collective: all ranks must call it)."""
    t = torch.tensor([1.0 if ok else 0.0], device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item() > 0.5)


def time_left(ctx: Ctx) -> float:
    return ctx.deadline - time.monotonic()


def within_budget(ctx: Ctx, need_s: float = 0.0) -> bool:
    """Collective: continue only if every rank still has ``need_s`` seconds of budget."""
    return agree(ctx, time_left(ctx) > need_s)


def plan(ctx: Ctx, keys: list[str]) -> None:
    """Tell the orchestrator how many measurements this stage plans (for its progress bar)."""
    ctx.log.write({"type": "plan", "keys": keys, "n": len(keys)})


def finish(ctx: Ctx, stopped_by_budget: bool = False, note: str = "") -> None:
    dist.barrier()
    ctx.log.write(
        {"type": "end", "stopped_by_budget": stopped_by_budget, "note": note, "loadavg": list(os.getloadavg())}
    )
    ctx.log.close()
    if ctx.rank == 0:
        (ctx.out / "DONE").write_text(
            json.dumps(
                {
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "stopped_by_budget": stopped_by_budget,
                    "note": note,
                }
            )
            + "\n"
        )
    dist.barrier()
    dist.destroy_process_group()


def release_host_memory(ctx: Ctx) -> None:
    """Between measurements on CPU: collect the model just measured and give the C heap's
    free memory back to the OS (glibc malloc_trim(3)). One process measures model after
    model, and glibc keeps freed heap blocks, so a rank's memory grew with every model: on
    2026-11-26 (4 ranks on the 24 GiB VM, calibrate-20261126T013801Z) a rank holding 6 GB was
    OOM-killed when wide_mlp followed wide_resnet101_2. No timed step runs here."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()
        return
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS): nothing to trim
        pass


def timed(ctx: Ctx, fn: Callable[[], Any], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` (device-synchronised)."""
    out = []
    for _ in range(repeats):
        ctx.sync()
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        out.append(time.perf_counter() - t0)
    return out


def maybe_die(ctx: Ctx, stage: str, count: int) -> None:
    """Test hook: ``SIMDL_CALIBRATE_KILL=stage:rank:n`` makes that rank SIGKILL itself after
    its n-th measurement of that stage (how the resume test kills a rank mid-stage)."""
    spec = os.environ.get("SIMDL_CALIBRATE_KILL", "")
    if not spec:
        return
    s, r, n = spec.split(":")
    if s == stage and int(r) == ctx.rank and count >= int(n):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
