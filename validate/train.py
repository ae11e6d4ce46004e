"""The real training worker, launched by torchrun: one process per rank.

``torchrun --nproc-per-node N -m validate.train --spec SPEC.json --out DIR``

Each rank writes ``DIR/rank<R>.json`` with what it measured (see validate/measure.py).

Loops (what simdl's strategy plans assume, so that both sides describe one thing):

* every run: real data loader (``DataLoader`` over the run's tensors with a
  ``DistributedSampler``, ``num_workers=0``: loader processes would compete for the
  same 2 cores), cross-entropy loss, ``SGD(lr, momentum=0.9)``,
  ``zero_grad(set_to_none=True)``, test accuracy evaluated after the last epoch;
  checkpoints off; fp32.
* ``ddp``: ``DistributedDataParallel`` with PyTorch's defaults (25 MiB buckets,
  ``broadcast_buffers=True``), as simdl.strategies.ddp plans.
* ``fsdp``: FSDP2 ``fully_shard`` on every module whose class is in
  ``simdl.workload.zoo.DEFAULT_WRAP_TYPES`` for the model (the units simdl's plan
  shards), then on the root. full: ``reshard_after_forward=True``; grad_op: ``False``;
  none: a (world x 1) replicate x shard mesh (HSDP with shard size 1: replicas whose
  gradients are all-reduced per unit); hybrid: a (replicas x shard group) mesh, the
  shard group the run's ``shard_group`` or else the ranks of a node.
* ``ps-*``: rank 0 is the parameter server, ranks 1..N the workers, over
  ``torch.distributed.rpc`` (TensorPipe, on CPU over its uv transport: TCP loopback,
  see ``RPC_TRANSPORTS``). The server holds the parameters (one shard:
  one server), the optimizer, and a version counter incremented per applied update.
  A worker pulls (params, version), computes forward and backward, pushes its
  gradients with the version it pulled; the staleness of an applied update is the
  server's version at application minus that pulled version. sync: the server averages
  the N pushes of a round, applies one update, then releases the workers; async: each
  push is applied on arrival; SSP: applied on arrival, and a pull by a worker more than
  ``staleness_bound`` iterations ahead of the slowest waits (Ho et al., NIPS 2013).
  Worker 1 evaluates test accuracy with the final parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import rpc
from torch.profiler import ProfilerActivity, profile, record_function

from . import data as vdata
from . import measure
from .experiments import RunSpec

# ----------------------------------------------------------------------------- helpers


def _device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def _sync(device: torch.device):
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def build_model(run: RunSpec, device: torch.device):
    """The run's model as the zoo builds it (adapted to the dataset, padded if needed)."""
    from simdl.workload.zoo import build_adapted

    from .data import SHAPES

    _, note, shape = build_adapted(run.model_name, SHAPES[run.dataset], 10, device="meta")
    torch.manual_seed(0)  # same initial weights on every rank (FSDP2 shards each rank's own)
    model, _, _ = build_adapted(run.model_name, shape, 10, device="cpu")
    return model.to(device), shape, note


def wrap_types(run: RunSpec) -> tuple[str, ...]:
    from .models import wrap_types_of

    return wrap_types_of(run.model_name)


def _loader(x, y, batch, rank, world, shuffle, seed=0):
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)
    return DataLoader(ds, batch_size=batch, sampler=sampler, num_workers=0), sampler


def _profiler(device: torch.device):
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(activities=acts, profile_memory=True, record_shapes=True)


def _write(out: Path, rank: int, rec: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(rec, default=float))
    tmp.replace(out / f"rank{rank}.json")


# ----------------------------------------------------------------------------- DDP / FSDP


def _wrap_spmd(run: RunSpec, model, device, world):
    if run.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = None
    if run.sharding == "none":
        mesh = init_device_mesh(device.type, (world, 1), mesh_dim_names=("replicate", "shard"))
    elif run.sharding == "hybrid":
        per = run.shard_group or world // run.nodes
        mesh = init_device_mesh(device.type, (world // per, per), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    reshard = run.sharding in ("full", "hybrid")
    types = set(wrap_types(run))
    for m in list(model.modules()):
        if m is not model and type(m).__name__ in types:
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard)
    # Given explicitly, True reshards the root after forward too (FSDP2 keeps the root
    # gathered only for the default None: _fsdp_state._lazy_init); simdl predicts these
    # runs with reshard_root (validate.run.prediction_kwargs).
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model


def run_spmd(run: RunSpec, out: Path) -> None:
    device = _device()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rec: dict = {"rank": rank, "world": world, "device": str(device), "backend": backend}
    _, note, shape = build_model_meta(run)
    trx, tr_y, tex, te_y, desc = vdata.load(
        run.dataset, run.data, run.train_images, run.test_images, shape, os.environ.get("SIMDL_DATA_DIR")
    )
    rec.update(data=desc, input_shape=list(shape), adaptation=note)
    loader, sampler = _loader(trx, tr_y, run.batch_size, rank, world, shuffle=True)

    prof = _profiler(device)
    prof.start()  # before the model exists: the memory running sum starts at zero
    model, _, _ = build_model(run, device)
    model = _wrap_spmd(run, model, device, world)
    opt = torch.optim.SGD(model.parameters(), lr=run.lr, momentum=0.9)
    timer = measure.StepTimer(_sync(device))
    step, profiled, epoch_times, losses = 0, None, [], []
    last_profiled = run.warmup_steps + measure.MEMORY_STEPS - 1  # memory-only steps follow the timed one
    profiling = True
    t_train = time.perf_counter()
    for epoch in range(run.epochs):
        sampler.set_epoch(epoch)
        t_epoch = time.perf_counter()
        it = iter(loader)
        n_steps = 0
        while True:
            if run.max_steps_per_epoch and n_steps >= run.max_steps_per_epoch:
                break
            is_profiled = step == run.warmup_steps and profiled is None
            in_window = profiling and run.warmup_steps < step <= last_profiled
            timer.start()
            mark = measure.MEASURED_STEP if is_profiled else measure.MEMORY_STEP if in_window else None
            ctx = record_function(mark) if mark else _null()
            with ctx:
                try:
                    x, y = next(it)
                except StopIteration:  # end of epoch: nothing was timed
                    break
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                if is_profiled and device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            dt = timer.stop()
            if is_profiled:
                profiled = (step, dt)
                if device.type == "cuda":
                    rec["cuda_max_memory_allocated"] = float(torch.cuda.max_memory_allocated(device))
            if profiling and profiled is not None and step >= last_profiled:
                t_stop = time.perf_counter()
                prof.stop()
                rec["profiler_stop_s"] = time.perf_counter() - t_stop
                profiling = False
            losses.append(float(loss.detach()))
            step += 1
            n_steps += 1
        epoch_times.append(time.perf_counter() - t_epoch)
    train_s = time.perf_counter() - t_train
    if profiling:
        prof.stop()
    if profiled is None:
        raise RuntimeError(f"run too short: {step} steps, the profiled step is step {run.warmup_steps}")
    analysis = _analyse(prof, world)
    if "cuda_max_memory_allocated" in rec:
        analysis["peak_allocated_bytes"] = rec["cuda_max_memory_allocated"]
    # steady state: after the profiled steps (the profiler slows the steps it records)
    steady = [t for i, t in enumerate(timer.times) if i > last_profiled]
    acc = _evaluate_spmd(run, model, tex, te_y, device, rank, world)
    faults = [b for i, b in enumerate(timer.fault_bytes) if i > last_profiled]
    rec.update(
        step_times_s=timer.times,
        steady_step_times_s=steady,
        steps=step,
        epoch_times_s=epoch_times,
        steady_fault_bytes=faults,
        train_time_s=train_s,
        profiled_step=profiled[0],
        profiled_step_s=profiled[1],
        test_accuracy=acc,
        final_loss=losses[-1] if losses else None,
        peak_rss_bytes=measure.peak_rss_bytes(),
        **analysis,
    )
    _write(out, rank, rec)
    dist.barrier()
    dist.destroy_process_group()


def _analyse(prof, world: int) -> dict:
    """measure.analyse_profile on the profile, with its allocations paired to their frees."""
    from simdl.memory.measured import allocations

    res = prof.profiler.kineto_results
    allocs = allocations(res, step_markers=(measure.MEASURED_STEP, measure.MEMORY_STEP))
    return measure.analyse_profile(res.events(), world, allocs=allocs)


def build_model_meta(run: RunSpec):
    from simdl.workload.zoo import build_adapted

    from .data import SHAPES

    return build_adapted(run.model_name, SHAPES[run.dataset], 10, device="meta")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@torch.no_grad()
def _evaluate_spmd(run, model, tex, te_y, device, rank, world) -> float:
    loader, _ = _loader(tex, te_y, run.batch_size, rank, world, shuffle=False)
    model.eval()
    correct = torch.zeros(2, dtype=torch.float64, device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct[0] += (model(x).argmax(1) == y).sum()
        correct[1] += len(y)
    dist.all_reduce(correct)
    model.train()
    return float(correct[0] / correct[1])


# ----------------------------------------------------------------------------- parameter server

_SERVER = None

# TensorPipe transports for the PS's RPC. Its default shm transport busy-polls: a
# TP_SHM_reactor thread per process that spins (yielding) while idle. torchrun starts
# every rank in its own session, hence its own CFS autogroup (kernel.sched_autogroup_enabled
# = 1 here), so that spinner shares its process's slice of the cores with the training
# thread: with 5 processes on 2 cores it took ~60% of each process's CPU time and doubled
# the step (ResNet-50 sync, 4 workers: 2.61 s with shm vs 1.06 s with uv; per-thread CPU
# from /proc/<pid>/task/*/stat, probe of 2026-11-23). uv (TCP loopback, epoll) waits
# without spinning, and is what workers on other hosts than the server would use anyway.
RPC_TRANSPORTS = ["uv"]


class ParameterServer:
    """Parameters, optimizer and version counter of the (single) server shard."""

    def __init__(self, run: RunSpec, workers: int) -> None:
        model, _, _ = build_model(run, torch.device("cpu"))
        self.params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
        self.opt = torch.optim.SGD(self.params, lr=run.lr, momentum=0.9)
        self.mode = run.strategy
        self.bound = run.staleness_bound
        self.n = workers
        self.version = 0
        self.lock = threading.Lock()
        self.staleness: list[int] = []
        # Per async update: (worker, its clock, whether some worker had already finished,
        # whether every worker had stopped its profiler when this update's snapshot was pulled).
        self.update_log: list[tuple[int, int, bool, bool]] = []
        # A worker's profiler stops after its step ``warmup_steps`` (run_ps), so before it
        # pulls for the next step: its pause (0.1-3 s on the EPYC, 2026-11-27) thins the other
        # workers' updates and would lower their staleness. Steady state begins after it.
        self.warmup = run.warmup_steps
        self.pull_clocks = [-1] * workers
        self.pulled_steady = [False] * workers
        self.update_s: list[float] = []
        # Per async/SSP update and pull, perf_counter seconds since the server started: what
        # the staleness of each update is made of (which applies fall between a worker's own
        # apply and its next snapshot). (worker, request arrived, lock taken, done, version).
        self.t0 = time.perf_counter()  # kept in the record: workers' rpc_times share the clock
        self.push_events: list[tuple[int, float, float, float, int]] = []
        self.pull_events: list[tuple[int, float, float, float, int]] = []
        self.clocks = [0] * workers
        self.done = [False] * workers
        self.waiting: list[tuple[int, int, torch.futures.Future, float]] = []
        # ps-ssp: (worker, clock, arrived, released) of each pull the bound held back.
        self.held: list[tuple[int, int, float, float]] = []
        self.round_sum: list[torch.Tensor] | None = None
        self.round_count = 0
        self.round_versions: list[int] = []
        self.round_future = torch.futures.Future()
        # ps-sync: per round, perf_counter seconds since t0: mean started, update started, done.
        self.round_events: list[tuple[float, float, float]] = []
        # ps-sync: the CPU seconds of each push's part of the sum (its thread's, not wall: on a
        # shared host the two differ by the cores the thread did not get).
        self.sum_cpu_s: list[float] = []
        self.ready_count = 0
        self.ready_future = torch.futures.Future()

    def ready(self) -> torch.futures.Future:
        """A barrier: the workers start training together (imports and model builds of
        oversubscribed processes finish at different times)."""
        with self.lock:
            self.ready_count += 1
            fut = self.ready_future
            release = self.ready_count == self.n
        if release:
            fut.set_result(True)
        return fut

    def _snapshot(self):
        return [p.detach().clone() for p in self.params], self.version

    def _apply(self, grads) -> None:
        t = time.perf_counter()
        for p, g in zip(self.params, grads):
            p.grad = g
        self.opt.step()
        self.version += 1
        self.update_s.append(time.perf_counter() - t)

    def pull(self, worker: int, clock: int) -> torch.futures.Future:
        fut = torch.futures.Future()
        arrived = time.perf_counter() - self.t0
        with self.lock:
            self.pull_clocks[worker] = clock
            self.pulled_steady[worker] = all(c > self.warmup for c in self.pull_clocks)
            if self.mode != "ps-ssp" or self._ssp_ok(clock):
                taken = time.perf_counter() - self.t0
                value = self._snapshot()
                self.pull_events.append((worker, arrived, taken, time.perf_counter() - self.t0, value[1]))
            else:
                self.waiting.append((worker, clock, fut, arrived))
                return fut
        fut.set_result(value)
        return fut

    def _ssp_ok(self, clock: int) -> bool:
        active = [c for c, d in zip(self.clocks, self.done) if not d]
        return not active or clock - min(active) <= self.bound

    def push(self, worker: int, grads, version: int, last: bool) -> torch.futures.Future:
        release: list[tuple[torch.futures.Future, object]] = []
        arrived = time.perf_counter() - self.t0
        with self.lock:
            taken = time.perf_counter() - self.t0
            if self.mode == "ps-sync":
                cpu = time.thread_time()
                # The sum lives across rounds, as the optimizer's momentum does: a fresh 537 MB
                # sum per round (VGG16) faulted its pages in at up to 1.7 CPU-s on the
                # Emerald Rapids VM, whose freed memory goes back to the host (free page
                # reporting) -- 0.2 s when the pages were still mapped (2026-11-29, lab/CAMPAIGN.md).
                if self.round_sum is None:
                    self.round_sum = [torch.empty_like(g) for g in grads]
                if self.round_count == 0:
                    for s, g in zip(self.round_sum, grads):
                        s.copy_(g)
                else:
                    for s, g in zip(self.round_sum, grads):
                        s.add_(g)
                self.round_count += 1
                self.round_versions.append(version)
                self.sum_cpu_s.append(time.thread_time() - cpu)
                fut = self.round_future
                # Where a sync round's server time goes: each push's share of the sum, then
                # (the last push) the mean and the update. version: the one the round produces.
                self.push_events.append((worker, arrived, taken, time.perf_counter() - self.t0, self.version + 1))
                if self.round_count == self.n:
                    self.staleness += [self.version - v for v in self.round_versions]
                    t_mean = time.perf_counter() - self.t0
                    mean = [s.div_(self.n) for s in self.round_sum]
                    t_update = time.perf_counter() - self.t0
                    self._apply(mean)
                    self.round_events.append((t_mean, t_update, time.perf_counter() - self.t0))
                    release.append((fut, self.version))
                    self.round_count, self.round_versions = 0, []
                    self.round_future = torch.futures.Future()
            else:
                self.staleness.append(self.version - version)
                self.update_log.append((worker, self.clocks[worker], any(self.done), self.pulled_steady[worker]))
                self._apply(grads)
                self.push_events.append((worker, arrived, taken, time.perf_counter() - self.t0, self.version))
                self.clocks[worker] += 1
                if last:
                    self.done[worker] = True
                fut = torch.futures.Future()
                release.append((fut, self.version))
                still = []
                for w, c, f, held_at in self.waiting:
                    if self._ssp_ok(c):
                        taken = time.perf_counter() - self.t0
                        self.held.append((w, c, held_at, taken))
                        snap = self._snapshot()
                        # -1: held by the bound (its arrival is in ``held``).
                        self.pull_events.append((w, -1.0, taken, time.perf_counter() - self.t0, snap[1]))
                        release.append((f, snap))
                    else:
                        still.append((w, c, f, held_at))
                self.waiting = still
        for f, v in release:
            f.set_result(v)
        return fut


@rpc.functions.async_execution
def _rpc_pull(worker: int, clock: int):
    return _SERVER.pull(worker, clock)


@rpc.functions.async_execution
def _rpc_push(worker: int, grads, version: int, last: bool):
    return _SERVER.push(worker, grads, version, last)


@rpc.functions.async_execution
def _rpc_ready():
    return _SERVER.ready()


def _rpc_final():
    with _SERVER.lock:
        return _SERVER._snapshot()


def run_ps(run: RunSpec, out: Path) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    workers = world - 1
    opts = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=max(8, 2 * world), rpc_timeout=3600, _transports=RPC_TRANSPORTS
    )
    name = "ps" if rank == 0 else f"worker{rank}"
    rec: dict = {
        "rank": rank,
        "world": world,
        "role": "server" if rank == 0 else "worker",
        "device": "cpu",
        "transport": f"torch.distributed.rpc (TensorPipe, {'/'.join(RPC_TRANSPORTS)})",
    }
    global _SERVER
    if rank == 0:
        _SERVER = ParameterServer(run, workers)
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=opts)
    if rank == 0:
        t = time.perf_counter()
        rpc.shutdown()  # waits for every worker to finish
        s = _SERVER
        # Steady state, as step time is measured: updates a worker computed after its warm-up
        # steps and the server applied while every worker was still training (at the start
        # every worker pulls version 0; at the end the last workers race fewer peers), from
        # snapshots pulled once every worker's profiler had stopped.
        steady = [
            v
            for v, (_, clock, ended, after_profiling) in zip(s.staleness, s.update_log)
            if clock >= run.warmup_steps and not ended and after_profiling
        ]
        rec.update(
            staleness=measure.staleness_summary(s.staleness),
            staleness_values=s.staleness,
            staleness_steady=measure.staleness_summary(steady) if s.update_log else None,
            staleness_log=[list(u) for u in s.update_log],
            push_events=[list(e) for e in s.push_events],
            pull_events=[list(e) for e in s.pull_events],
            events_t0=s.t0,
            held_pulls=[list(h) for h in s.held],
            round_events=[list(e) for e in s.round_events],
            sum_cpu_s=s.sum_cpu_s,
            updates=s.version,
            update_time_s=measure.step_stats(s.update_s),
            server_wall_s=time.perf_counter() - t,
            peak_rss_bytes=measure.peak_rss_bytes(),
        )
        _write(out, rank, rec)
        return
    w = rank - 1
    device = torch.device("cpu")
    _, note, shape = build_model_meta(run)
    trx, tr_y, tex, te_y, desc = vdata.load(
        run.dataset, run.data, run.train_images, run.test_images, shape, os.environ.get("SIMDL_DATA_DIR")
    )
    rec.update(data=desc, input_shape=list(shape), adaptation=note)
    loader, sampler = _loader(trx, tr_y, run.batch_size, w, workers, shuffle=True)
    prof = _profiler(device)
    prof.start()
    model, _, _ = build_model(run, device)
    params = list(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    timer = measure.StepTimer()
    step, clock, profiled, epoch_times = 0, 0, None, []
    # One profiled step: a worker's memory involves no gloo worker thread (module
    # validate/measure.py), and PS runs are short (their timed steps are few already).
    last_profiled = run.warmup_steps
    profiling = True
    pushed = pulled = 0.0
    # Per step, perf_counter (CLOCK_MONOTONIC: one clock for every process on the host, as
    # the server's events): pull called, pull returned, push called, push returned.
    rpc_times: list[tuple[float, float, float, float]] = []
    total_steps = run.epochs * (run.max_steps_per_epoch or len(loader))
    rpc.rpc_sync("ps", _rpc_ready)
    t_train = time.perf_counter()
    for epoch in range(run.epochs):
        sampler.set_epoch(epoch)
        t_epoch = time.perf_counter()
        for i, (x, y) in enumerate(loader):
            if run.max_steps_per_epoch and i >= run.max_steps_per_epoch:
                break
            is_profiled = step == run.warmup_steps and profiled is None
            in_window = profiling and run.warmup_steps < step <= last_profiled
            mark = measure.MEASURED_STEP if is_profiled else measure.MEMORY_STEP if in_window else None
            timer.start()
            with record_function(mark) if mark else _null():
                t_pull = time.perf_counter()
                values, version = rpc.rpc_sync("ps", _rpc_pull, args=(w, clock))
                t_pulled = time.perf_counter()
                pulled += sum(v.numel() * v.element_size() for v in values)
                with torch.no_grad():
                    for p, v in zip(params, values):
                        p.copy_(v)
                del values
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                grads = [p.grad for p in params]
                pushed += sum(g.numel() * g.element_size() for g in grads)
                t_push = time.perf_counter()
                rpc.rpc_sync("ps", _rpc_push, args=(w, grads, version, step + 1 == total_steps))
                rpc_times.append((t_pull, t_pulled, t_push, time.perf_counter()))
                del grads
                for p in params:
                    p.grad = None
            dt = timer.stop()
            if is_profiled:
                profiled = (step, dt)
            if profiling and profiled is not None and step >= last_profiled:
                t_stop = time.perf_counter()
                prof.stop()
                rec["profiler_stop_s"] = time.perf_counter() - t_stop
                profiling = False
            clock += 1
            step += 1
        epoch_times.append(time.perf_counter() - t_epoch)
    train_s = time.perf_counter() - t_train
    if profiling:
        prof.stop()
    if profiled is None:
        raise RuntimeError(f"run too short: {step} steps, the profiled step is step {run.warmup_steps}")
    analysis = _analyse(prof, 1)
    analysis.update(
        comm_payload_bytes_per_step=(pushed + pulled) / max(step, 1),
        comm_sent_bytes_per_step=pushed / max(step, 1),
        collectives_per_step=2,
    )
    acc = None
    if rank == 1:  # final accuracy with the server's final parameters
        values, _ = rpc.rpc_sync("ps", _rpc_final)
        with torch.no_grad():
            for p, v in zip(params, values):
                p.copy_(v)
        acc = _evaluate_local(run, model, tex, te_y)
    steady = [t for i, t in enumerate(timer.times) if i > last_profiled]
    faults = [b for i, b in enumerate(timer.fault_bytes) if i > last_profiled]
    rec.update(
        step_times_s=timer.times,
        steady_step_times_s=steady,
        steps=step,
        epoch_times_s=epoch_times,
        steady_fault_bytes=faults,
        rpc_times=[list(t) for t in rpc_times],
        train_time_s=train_s,
        profiled_step=profiled[0],
        profiled_step_s=profiled[1],
        test_accuracy=acc,
        param_bytes=param_bytes,
        peak_rss_bytes=measure.peak_rss_bytes(),
        **analysis,
    )
    _write(out, rank, rec)
    rpc.shutdown()


@torch.no_grad()
def _evaluate_local(run, model, tex, te_y) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(te_y), run.batch_size):
        correct += int((model(tex[i : i + run.batch_size]).argmax(1) == te_y[i : i + run.batch_size]).sum())
    model.train()
    return correct / max(len(te_y), 1)


# ----------------------------------------------------------------------------- entry point


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", required=True, help="a JSON file with one RunSpec")
    p.add_argument("--out", required=True, help="directory for rank<R>.json")
    a = p.parse_args(argv)
    run = RunSpec.from_dict(json.loads(Path(a.spec).read_text()))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(a.out)
    try:
        if run.is_ps:
            run_ps(run, out)
        else:
            run_spmd(run, out)
    except Exception:
        rank = int(os.environ.get("RANK", 0))
        _write(out, rank, {"rank": rank, "error": traceback.format_exc()})
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
