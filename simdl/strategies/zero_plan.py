"""The ZeRO plan: forward, backward and the step on the compute stream, DeepSpeed's reductions
and gathers on its communication streams (simdl.strategies.zero for the stages' rules).

Streams: ``comm`` carries NCCL's collectives; a reduction DeepSpeed issues on the current
stream (overlap_comm off: average_tensor in stage_1_and_2.py picks current_stream) makes the
compute stream wait for it, as a blocking call does. ``pcie`` carries the offload copies
(host_s = bytes / the GPU's PCIe bandwidth, the cluster's pcie_GB_per_s).

DeepSpeed's Python per parameter and per submodule call is host time on the compute stream
(``host`` in the step split), priced from the cluster's ``strategies.zero`` section (absent: 0):

* ``param_overhead_us`` per parameter and step, stages 1-3: in stages 2-3 (and stage 1 with
  overlap_comm) the gradient hook of each parameter runs in the backward segment where its
  gradient is complete (stage_1_and_2.py create_gradient_handling_hooks; stage3.py
  create_reduce_and_remove_grad_hooks, DeepSpeed 0.19.8); in stage 1 reduce_gradients loops
  over the parameters after backward, once per optimizer step;
* ``stage1_loop_overhead_us`` per parameter and step, stage 1 without overlap_comm: the pass
  stage 2 does not make (its hooks fire without reducing, and the loop's own calls), charged
  with the loop;
* ``module_overhead_us`` per submodule call and step, stage 3: parameter_offload.py registers a
  pre/post forward and a pre/post backward hook on every module (_register_hooks_recursively),
  and each call of a module runs them; a table row is one module call, charged half in its
  forward and half in its backward (two of the four hooks each).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster import Cluster
from ..memory.rowtree import add_recompute
from ..workload.workload import Workload
from .config import StrategyConfig
from .optimizer_step import optimizer_task, uses_foreach
from .plan import COMM, COMM_REDUCE, COMPUTE, Group, SpmdPlan, Task
from .rows import first_row_of_params
from .zero import STAGE0_ALLREDUCE_ELEMENTS, ZeROFacts, stage_of
from .zero_memory import fetch_modules, zero_buffers

PCIE = "pcie"

# Assumed: DeepSpeedCPUAdam streams the fp32 partition, its gradient and the two moments at
# this host memory rate (two sockets of 8-channel DDR4-3200 give 409.6 GB/s peak; a third is
# assumed achieved by the AVX loop). Only offload_optimizer=cpu uses it, and the result says so.
CPU_ADAM_BYTES_PER_S = 136e9


def ipg_buckets(numels: list[int], cap: int, *, backward: bool = True) -> list[list[int]]:
    """Parameter indices per ipg bucket, in the order the gradients reach it: a gradient that
    would overflow the bucket first reduces what the bucket holds
    (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads; stage3.py
    reduce_ready_partitions_and_remove_grads), so a bucket never exceeds ``cap`` unless one
    gradient alone does. ``backward``: in backward (reverse registration) order, as the
    gradient hooks fire; else in registration order, as stage 1's reduce_gradients loops over
    bit16_groups after backward (stage_1_and_2.py) and stage 0's buffered_allreduce_fallback
    over module.parameters() (engine.py _get_gradients_for_reduction; DeepSpeed 0.19.8)."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in reversed(range(len(numels))) if backward else range(len(numels)):
        if current and size + numels[i] > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += numels[i]
    if current:
        buckets.append(current)
    return buckets


@dataclass(frozen=True)
class _Layout:
    """What one ZeRO rank reduces and gathers, and in which element size."""

    stage: int
    world: int
    e: int  # bytes per parameter / gradient element of the model's dtype
    grad_elem: int  # bytes per element the gradients are reduced in
    overlap: bool
    numels: tuple[int, ...]
    P: int
    ready: tuple[int, ...]  # row after whose backward each bucket is reduced
    elems: tuple[int, ...]  # elements per bucket
    persistent: tuple[int, ...]  # stage 3: parameters kept whole
    fetch: dict  # stage 3: row -> elements gathered before it
    offload: bool
    pcie_bw: float
    param_s: float  # strategies.zero.param_overhead_us, seconds per parameter and step
    call_s: float  # stage 3: strategies.zero.module_overhead_us, seconds per module call and step
    loop_s: float  # stage 1 without overlap_comm: strategies.zero.stage1_loop_overhead_us per parameter
    first_row: tuple[int, ...]  # each parameter's first table row

    @property
    def in_backward(self) -> bool:  # reductions issued by the backward hooks
        return self.stage >= 2 or (self.stage == 1 and self.overlap)


def _layout(workload: Workload, cluster: Cluster, config: StrategyConfig) -> _Layout:
    stage, opts = stage_of(config.name), config.options
    costs = cluster.spec.strategies.zero
    numels = tuple(int(p.numel) for p in workload.table.params)
    first_row = first_row_of_params(workload.table)
    overlap = opts.overlap(stage)
    in_backward = stage >= 2 or (stage == 1 and overlap)
    cap = STAGE0_ALLREDUCE_ELEMENTS if stage == 0 else opts.reduce_bucket_size
    buckets = ipg_buckets(list(numels), cap, backward=in_backward)
    persistent = tuple(i for i, k in enumerate(numels) if stage == 3 and k <= opts.stage3_param_persistence_threshold)
    e = 2 if workload.mixed_precision else 4
    return _Layout(
        stage=stage,
        world=cluster.gpus,
        e=e,
        grad_elem=4 if (stage == 0 and workload.precision == "bf16") else e,  # BF16_Optimizer reduces fp32 grads
        overlap=overlap,
        numels=numels,
        P=sum(numels),
        ready=tuple(min(first_row[i] for i in b) for b in buckets),
        elems=tuple(sum(numels[i] for i in b) for b in buckets),
        persistent=persistent,
        fetch=fetch_modules(numels, first_row, set(persistent)) if stage == 3 else {},
        offload=opts.offload_optimizer == "cpu" and stage >= 1,
        pcie_bw=cluster.spec.intra_node.pcie_bandwidth.value,
        param_s=costs.param_overhead.value if costs.param_overhead is not None and stage >= 1 else 0.0,
        call_s=costs.module_overhead.value if costs.module_overhead is not None and stage == 3 else 0.0,
        loop_s=costs.loop_overhead.value if costs.loop_overhead is not None and stage == 1 and not in_backward else 0.0,
        first_row=first_row,
    )


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> SpmdPlan:
    lay, opts = _layout(workload, cluster, config), config.options
    tasks: list[Task] = []

    def add(t: Task) -> int:
        tasks.append(t)
        return len(tasks) - 1

    prev: tuple[int, ...] = ()
    for micro in range(workload.grad_accumulation):
        prev = _micro_step(add, workload, lay, opts, prev, sync=micro == workload.grad_accumulation - 1)
    # The optimizer sees one flat fp32 tensor per group in stages 1-3 (single_partition_of_fp32_groups),
    # under FP16_Optimizer / BF16_Optimizer too; the model's own tensors only in fp32 stage 0.
    flat = lay.stage >= 1 or workload.mixed_precision
    fused = opts.fused_adam and workload.optimizer == "adam" and not lay.offload
    prev = _step(
        add,
        workload,
        cluster,
        lay.stage,
        opts,
        lay.P,
        lay.e,
        lay.world,
        prev,
        lay.offload,
        lay.pcie_bw,
        1 if flat else len(lay.numels),
        fused,
    )
    if (lay.stage in (1, 2) or (lay.stage == 0 and workload.precision == "bf16")) and lay.world > 1:
        add(
            Task(
                "all_gather:updated parameters",
                COMM,
                "comm",
                deps=prev,
                collective="all_gather",
                comm_bytes=lay.P * lay.e,
                group="world",
            )
        )
    notes: tuple[str, ...] = ()
    if lay.offload:
        notes = (
            f"ZeRO-Offload: the CPU optimizer step is priced at an assumed {CPU_ADAM_BYTES_PER_S / 1e9:.0f} GB/s "
            "host memory rate (simdl.strategies.zero_plan.CPU_ADAM_BYTES_PER_S); PCIe at the cluster's pcie_GB_per_s",
        )
    world = lay.world
    return SpmdPlan(
        strategy=config.name,
        family="zero",
        tasks=tuple(tasks),
        world_size=world,
        data_parallel=world,
        groups={"world": Group("world", world, "world" if cluster.nodes > 1 else "intra")},
        facts=_facts(workload, lay, opts, fused),
        notes=notes,
    )


def _micro_step(add, workload: Workload, lay: _Layout, opts, last: tuple, *, sync: bool) -> tuple:
    """Forward and backward of one micro-step, with stage 3's gathers and the reductions where
    DeepSpeed issues them (stages >= 2 at every micro-step: engine.py allreduce_gradients)."""
    table, n, fetch, e = workload.table, workload.table.n_rows, lay.fetch, lay.e
    communicate, prefetch = lay.world > 1, opts.stage3_prefetch_bucket_size

    def gather(row: int, deps: tuple[int, ...], phase: str) -> int:
        k = fetch[row]
        return add(
            Task(
                f"all_gather:{phase}:{table.names[row]}",
                COMM,
                "comm",
                deps=deps,
                collective="all_gather",
                comm_bytes=k * e,
                group="world",
                allocs=(k * e,),
            )
        )

    # Forward, gathering each module's parameters (stage 3) up to the prefetch bucket ahead.
    starts = sorted({0} | set(fetch))
    seg_end = {s: (starts[j + 1] if j + 1 < len(starts) else n) for j, s in enumerate(starts)}
    done: dict[int, int] = {}
    prev = last
    order = [s for s in starts if s in fetch]
    for s in starts:
        deps = prev + ((gather(s, _prefetch_dep(order, s, fetch, prefetch, done), "fwd"),) if s in fetch else ())
        fwd_host = (seg_end[s] - s) * lay.call_s / 2  # pre/post forward hooks of each module call
        prev = (_compute(add, "forward", "fwd", s, seg_end[s], deps, fwd_host),)
        done[s] = prev[0]
    # Backward in segments, latest rows first, split at stage 3's modules and the buckets' ready rows.
    cuts = set(fetch) | (set(lay.ready) if lay.in_backward else set())
    reduce_ids: list[int] = []
    stop, done, border = n, {}, sorted(fetch, reverse=True)
    for s in sorted({0} | cuts, reverse=True):
        deps = prev + ((gather(s, _prefetch_dep(border, s, fetch, prefetch, done), "bwd"),) if s in fetch else ())
        pre = add_recompute(workload, add, deps, s, stop)
        bwd_host = (stop - s) * lay.call_s / 2  # pre/post backward hooks of each module call
        if lay.in_backward:  # the gradient hooks of the parameters completed in this segment
            bwd_host += sum(1 for r in lay.first_row if s <= r < stop) * lay.param_s
        prev = (_compute(add, "backward", "bwd", s, stop, pre, bwd_host),)
        done[s] = prev[0]
        if lay.in_backward and communicate:
            for k in (k for k, r in enumerate(lay.ready) if s <= r < stop):
                prev = _reduce(
                    add, k, lay.elems[k] * e, lay.stage, lay.overlap, opts.contiguous_gradients, prev, reduce_ids
                )
        stop = s
    return _after_backward(add, lay, opts, prev, reduce_ids, sync=sync)


def _compute(add, label: str, direction: str, start: int, stop: int, deps: tuple, host_s: float) -> int:
    """One forward or backward segment of the table's rows, with the host time of its hooks."""
    return add(
        Task(
            f"{label}[{start}:{stop}]",
            COMPUTE,
            direction,
            deps=deps,
            rows=(start, stop),
            direction=direction,
            host_s=host_s,
        )
    )


def _after_backward(add, lay: _Layout, opts, prev: tuple, reduce_ids: list, *, sync: bool) -> tuple:
    """What follows backward: stage 1's loop over the parameters and the reductions issued after
    backward (stages 0-1 without overlap_comm), then the offloaded gradient's copy to the host."""
    if sync and (lay.param_s or lay.loop_s) and not lay.in_backward:
        # stage 1: reduce_gradients' loop over the parameters, with its hooks' and its own extra pass
        host_s = len(lay.numels) * (lay.param_s + lay.loop_s)
        prev = (add(Task("reduce_gradients:parameters", COMPUTE, "bwd", deps=prev, host_s=host_s)),)
    if sync and lay.world > 1 and not lay.in_backward:
        # reduce after backward: stage 1's reduce_gradients, stage 0's buffered fallback
        for k in range(len(lay.elems)):
            prev = _reduce(
                add,
                k,
                lay.elems[k] * lay.grad_elem,
                lay.stage,
                False,
                opts.contiguous_gradients or lay.stage == 0,
                prev,
                reduce_ids,
            )
    if lay.offload:  # each reduced gradient partition goes to host memory (async_accumulate_grad_in_cpu_via_gpu)
        return (
            add(
                Task(
                    "d2h:gradient partition",
                    PCIE,
                    "comm",
                    deps=prev + tuple(reduce_ids[-1:]),
                    host_s=lay.P * lay.e / lay.world / lay.pcie_bw,
                )
            ),
        )
    return prev + tuple(reduce_ids[-1:])


def _facts(workload: Workload, lay: _Layout, opts, fused: bool) -> ZeROFacts:
    P, world, e, stage = lay.P, lay.world, lay.e, lay.stage
    persistent = sum(lay.numels[i] for i in lay.persistent)
    return ZeROFacts(
        stage=stage,
        world=world,
        elem_bytes=e,
        fused_adam=fused,
        loss_scaling=workload.precision == "fp16-amp",
        overlap_comm=lay.overlap,
        contiguous_gradients=opts.contiguous_gradients,
        buckets=len(lay.elems),
        bucket_elements=lay.elems,
        bucket_ready_rows=lay.ready,
        fetch_modules=len(lay.fetch),
        persistent_elements=persistent,
        cpu_offload=lay.offload,
        persistence_threshold=opts.stage3_param_persistence_threshold,
        prefetch_elements=opts.stage3_prefetch_bucket_size,
        max_live_elements=opts.stage3_max_live_parameters,
        comm_buffer_bytes=opts.reduce_bucket_size * e * (2 if lay.overlap and stage < 3 else 1) if stage else 0.0,
        buffers=zero_buffers(workload, stage, opts, world, lay.overlap, persistent),
        host_bytes=(4 * P / world) * (2 + workload.optimizer_state_copies) if lay.offload else 0.0,
        pcie_bytes=2 * P * e / world if lay.offload else 0.0,
    )


def _prefetch_dep(order: list[int], row: int, fetch: dict[int, int], window: int, done: dict[int, int]) -> tuple:
    """The compute task the gather of ``row`` waits for. While module ``m`` computes, the
    parameter coordinator prefetches the modules after it up to ``window`` elements
    (stage3 prefetch_bucket_size), so ``row`` is gathered once the compute reaches the
    earliest module ``m`` with the modules after it up to ``row`` inside the window."""
    j = order.index(row)
    m, ahead = j, 0
    while m > 0 and ahead + fetch[order[m]] <= window:
        ahead += fetch[order[m]]
        m -= 1
    if m == 0:
        return ()
    return (done[order[m - 1]],) if order[m - 1] in done else ()


def _reduce(add, k: int, nbytes: float, stage: int, overlap: bool, contiguous: bool, prev: tuple, ids: list) -> tuple:
    """One bucket's reduction: the copy into the flat bucket (ipg buffer, or the flatten of
    allreduce_no_retain), then an all-reduce (stages 0-2) or a reduce-scatter (stage 3). Without
    overlap_comm the compute stream waits for the collective."""
    if contiguous:
        prev = (add(Task(f"ipg_copy_in:bucket{k}", COMPUTE, "bwd", deps=prev, bytes=2.0 * nbytes, kernels=1)),)
    coll = "reduce_scatter" if stage == 3 else "all_reduce"
    stream = COMM_REDUCE if overlap else COMM
    r = add(Task(f"{coll}:bucket{k}", stream, "comm", deps=prev, collective=coll, comm_bytes=nbytes, group="world"))
    ids.append(r)
    if stage == 0:  # allreduce_no_retain copies the reduced flat bucket back into the gradients
        return (add(Task(f"unflatten:bucket{k}", COMPUTE, "bwd", deps=prev + (r,), bytes=2.0 * nbytes, kernels=1)),)
    return prev + (r,) if not overlap else prev


def _step(add, workload, cluster, stage, opts, P, e, world, prev, offload, pcie_bw, n_tensors, fused) -> tuple:
    """The optimizer step: overflow check (fp16), gradient norm (clipping), the fp32 update on the
    partition, the copy back into the 16-bit parameters."""
    local = P / world if stage >= 1 or workload.precision == "bf16" else P
    fp16 = workload.precision == "fp16-amp"
    if fp16 or opts.gradient_clipping > 0:
        # has_overflow / get_grad_norm read the gradient partition; stages >= 1 all-reduce the flag or norm
        prev = (add(Task("grad_norm_and_overflow_check", COMPUTE, "opt", deps=prev, bytes=local * e, kernels=2)),)
        if stage >= 1 and world > 1:
            prev = (
                add(
                    Task(
                        "all_reduce:norm",
                        COMM,
                        "comm",
                        deps=prev,
                        collective="all_reduce",
                        comm_bytes=8.0,
                        group="world",
                    )
                ),
            )
    if e != 4 and not offload:  # the 16-bit gradient partition converted to fp32 for the update
        prev = (add(Task("grad_to_fp32", COMPUTE, "opt", deps=prev, bytes=local * (e + 4), kernels=1)),)
    if offload:
        host_s = (4 * local) * (3 + 2 * workload.optimizer_state_copies) / CPU_ADAM_BYTES_PER_S
        prev = (add(Task("cpu_optimizer_step", PCIE, "opt", deps=prev, host_s=host_s)),)
        prev = (add(Task("h2d:updated partition", PCIE, "comm", deps=prev, host_s=local * e / pcie_bw)),)
        return prev
    if fused:
        # csrc/adam/multi_tensor_adam.cu: one pass reads g, p, m, v and writes p, m, v (7 fp32 passes)
        prev = (add(Task("optimizer:fused_adam", COMPUTE, "opt", deps=prev, bytes=7 * 4 * local, kernels=n_tensors)),)
    else:
        prev = (add(optimizer_task(workload.optimizer, 4 * local, n_tensors, prev, foreach=uses_foreach(cluster))),)
    if e != 4 or stage >= 1:  # fp32 master partition -> the (16-bit) flat parameters
        prev = (add(Task("master_to_params", COMPUTE, "opt", deps=prev, bytes=local * (4 + e), kernels=1)),)
    return prev
