"""DistributedDataParallel: full replicas, gradients all-reduced in buckets during backward.

What PyTorch does (torch/nn/parallel/distributed.py, torch/csrc/distributed/c10d/reducer.cpp):
- Parameters are assigned to buckets in reverse registration order; a bucket closes
  once its size reaches the cap (the first bucket's cap is 1 MiB, later ones 25 MiB),
  so a bucket can exceed its cap by one tensor (compute_bucket_assignment_by_size).
- During backward a bucket is all-reduced as soon as all its gradients are ready;
  buckets are launched in index order (Reducer::mark_bucket_ready).
- With broadcast_buffers=True (the default) module buffers are broadcast from rank 0
  before each forward.
- Copies (reducer.cpp of the PyTorch source whose API torch 2.14.1 exposes, with its default
  ``batched_grad_copy=False``): as each gradient is ready, ``mark_variable_ready_dense``
  writes it into its bucket view, one kernel per parameter (``at::mul_out`` dividing by the
  world size while copying, or ``div_`` in place where the gradient already is the view).
  After the last all-reduce, ``finalize_bucket_dense`` copies each parameter's averaged
  gradient back into ``param.grad`` (``copy_bucket_to_grad``, one kernel per parameter) with
  ``gradient_as_bucket_view=False`` (the default); with ``True`` it points ``param.grad`` at
  the bucket view and copies nothing. The copy into the bucket stays under the view: the
  gradient is the view only if the previous step left it so, and ``zero_grad()`` sets it to
  None every step by default (``set_to_none=True``, torch/optim/optimizer.py; torch 2.14.1's
  DDP docstring for ``batched_grad_copy``: "gradient_as_bucket_view alone cannot avoid
  copies because the bucket view alias is destroyed every iteration"). Then the optimizer runs.
- Under ``no_sync()`` (gradient accumulation) backward runs without communication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..cluster import Cluster
from ..memory.rowtree import add_recompute
from ..memory.timeline import replica_timeline
from ..units import MiB
from ..workload.workload import Workload
from .config import StrategyConfig
from .optimizer_step import optimizer_task, uses_foreach
from .options import DDPOptions
from .plan import COMM, COMPUTE, Group, PlanFacts, SpmdPlan, Task
from .registry import PredictKey, StrategySpec, register
from .rows import first_row_of_params


@dataclass(frozen=True)
class DDPFacts(PlanFacts):
    buckets: int = 0  # gradient buckets (reducer.cpp compute_bucket_assignment_by_size)
    bucket_bytes: tuple[float, ...] = ()  # each bucket's size, in launch order


def bucket_assignment(param_bytes: Sequence[float], first_cap: float, cap: float) -> list[list[int]]:
    """Indices of parameters per bucket, parameters taken in reverse registration order."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    limit = first_cap
    for i in reversed(range(len(param_bytes))):
        current.append(i)
        size += param_bytes[i]
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0.0, cap
    if current:
        buckets.append(current)
    return buckets


@dataclass(frozen=True)
class _Buckets:
    """DDP's gradient buckets on one table: their parameters, sizes and the rows they wait for."""

    params: list[list[int]]  # parameter indices per bucket, in launch order
    nbytes: Sequence[float]  # each bucket's size
    ready_row: list[int]  # the row whose backward completes the bucket's gradients
    param_bytes: Sequence[float]  # each parameter's gradient bytes


def _buckets(workload: Workload, config: StrategyConfig) -> _Buckets:
    table = workload.table
    elem = 4  # fp32 gradients: AMP keeps fp32 parameters, so gradients are fp32 too
    p_bytes = [p.numel * elem for p in table.params]
    buckets = bucket_assignment(p_bytes, config.first_bucket_bytes, config.bucket_cap_bytes)
    first_row = first_row_of_params(table)
    # A bucket is ready after the backward of the earliest-in-forward row owning one of its
    # parameters (backward runs rows in reverse).
    ready_row = [min(first_row[i] for i in b) for b in buckets]
    return _Buckets(buckets, [sum(p_bytes[i] for i in b) for b in buckets], ready_row, p_bytes)


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> SpmdPlan:
    table = workload.table
    world = cluster.gpus
    groups = {"world": Group("world", world, "world" if cluster.nodes > 1 else "intra")}
    bk = _buckets(workload, config)
    tasks: list[Task] = []

    def add(task: Task) -> int:
        tasks.append(task)
        return len(tasks) - 1

    communicate = world > 1
    last_compute: tuple[int, ...] = ()
    for micro in range(workload.grad_accumulation):
        sync = micro == workload.grad_accumulation - 1
        last_compute = _micro_step(workload, config, bk, add, last_compute, communicate, sync)
    add(
        optimizer_task(
            workload.optimizer, workload.param_bytes, len(table.params), last_compute, foreach=uses_foreach(cluster)
        )
    )
    return SpmdPlan(
        strategy="ddp",
        family="ddp",
        tasks=tuple(tasks),
        groups=groups,
        world_size=world,
        data_parallel=world,
        facts=DDPFacts(
            buckets=len(bk.params),
            gradient_as_bucket_view=config.gradient_as_bucket_view,
            bucket_bytes=tuple(bk.nbytes),
            comm_buffer_bytes=sum(bk.nbytes) if communicate else 0.0,
        ),
    )


def _micro_step(
    workload: Workload,
    config: StrategyConfig,
    bk: _Buckets,
    add: Callable[[Task], int],
    after: tuple[int, ...],
    communicate: bool,
    sync: bool,
) -> tuple[int, ...]:
    """One micro-step's forward and backward after the tasks ``after``; its last compute task.
    Only the step that synchronises (the last; no_sync() before it) reduces gradients."""
    table = workload.table
    n_rows = table.n_rows
    deps = after
    if communicate and config.broadcast_buffers and table.buffer_bytes > 0:
        b = add(
            Task(
                "broadcast_buffers",
                COMM,
                "comm",
                deps=deps,
                collective="broadcast",
                comm_bytes=float(table.buffer_bytes),
                group="world",
            )
        )
        deps = deps + (b,)
    fwd = add(Task("forward", COMPUTE, "fwd", deps=deps, rows=(0, n_rows), direction="fwd"))
    if not (sync and communicate):
        pre = add_recompute(workload, add, (fwd,), 0, n_rows)
        return (add(Task("backward", COMPUTE, "bwd", deps=pre, rows=(0, n_rows), direction="bwd")),)
    return (_reducing_backward(workload, config, bk, add, fwd),)


def _reducing_backward(
    workload: Workload, config: StrategyConfig, bk: _Buckets, add: Callable[[Task], int], fwd: int
) -> int:
    """Backward split where buckets become ready (latest-ready boundary first), each bucket
    all-reduced once full; then the copy out of the buckets, the task returned."""
    stop = workload.table.n_rows
    prev = fwd
    ar: list[int] = []
    for start in sorted(set(bk.ready_row), reverse=True):
        pre = add_recompute(workload, add, (prev,), start, stop)
        prev = add(Task(f"backward[{start}:{stop}]", COMPUTE, "bwd", deps=pre, rows=(start, stop), direction="bwd"))
        for k, row in enumerate(bk.ready_row):
            if row == start:
                prev = _reduce_bucket(bk, add, k, prev, ar)
        stop = start
    if stop > 0:
        pre = add_recompute(workload, add, (prev,), 0, stop)
        prev = add(Task(f"backward[0:{stop}]", COMPUTE, "bwd", deps=pre, rows=(0, stop), direction="bwd"))
    # finalize_bucket_dense: copy_bucket_to_grad per parameter, or nothing under the view
    # (the task stays as the point where the optimizer waits for the last all-reduce).
    if config.gradient_as_bucket_view:
        out_bytes, out_kernels = 0.0, 0
    else:
        out_bytes, out_kernels = 2.0 * sum(bk.nbytes), len(bk.param_bytes)
    return add(Task("bucket_copy_out", COMPUTE, "bwd", deps=(prev, ar[-1]), bytes=out_bytes, kernels=out_kernels))


def _reduce_bucket(bk: _Buckets, add: Callable[[Task], int], k: int, prev: int, ar: list[int]) -> int:
    """Bucket ``k``'s copy in after task ``prev`` (the compute task returned) and its all-reduce
    (appended to ``ar``). Reducer::mark_variable_ready_dense writes each gradient into its bucket
    as it is ready (one kernel per parameter, with or without the view: module docstring); a
    full bucket is all-reduced at once."""
    nbytes = bk.nbytes[k]
    prev = add(
        Task(
            f"bucket_copy_in:bucket{k}",
            COMPUTE,
            "bwd",
            deps=(prev,),
            bytes=2.0 * nbytes,
            kernels=len(bk.params[k]),
        )
    )
    ar.append(
        add(
            Task(
                f"all_reduce:bucket{k}",
                COMM,
                "comm",
                deps=(prev,),
                collective="all_reduce",
                comm_bytes=nbytes,
                group="world",
            )
        )
    )
    return prev


def _echo(config, plan) -> dict:
    return {
        "bucket_cap_bytes": config.bucket_cap_bytes,
        "first_bucket_bytes": config.first_bucket_bytes,
        "buckets": plan.facts.buckets,
    }


SPEC = register(
    StrategySpec(
        family="ddp",
        names=("ddp",),
        options=DDPOptions,
        build_plan=build_plan,
        memory_timeline=replica_timeline,
        predict_keys={"bucket_cap_mb": PredictKey("bucket_cap_bytes", lambda mb: mb * MiB)},
        labels={"ddp": ("ddp", {})},
        variants=lambda v: ("ddp",),
        echo=_echo,
        communicators=lambda plan: 1,  # the default process group DDP's reducer all-reduces on
        gpu_framework="reducer",
    )
)
