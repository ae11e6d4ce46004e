"""The ZeRO plan: forward, backward and the step on the compute stream, DeepSpeed's reductions
and gathers on its communication streams (simdl.strategies.zero for the stages' rules).

Streams: ``comm`` carries NCCL's collectives; a reduction DeepSpeed issues on the current
stream (overlap_comm off: average_tensor in stage_1_and_2.py picks current_stream) makes the
compute stream wait for it, as a blocking call does. ``pcie`` carries the offload copies
(host_s = bytes / the GPU's PCIe bandwidth, the cluster's pcie_GB_per_s).
"""

from __future__ import annotations

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


def ipg_buckets(numels: list[int], cap: int) -> list[list[int]]:
    """Parameter indices per ipg bucket, in backward (reverse registration) order: a gradient
    that would overflow the bucket first reduces what the bucket holds
    (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads; stage3.py
    reduce_ready_partitions_and_remove_grads), so a bucket never exceeds ``cap`` unless one
    gradient alone does."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in reversed(range(len(numels))):
        if current and size + numels[i] > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += numels[i]
    if current:
        buckets.append(current)
    return buckets


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> SpmdPlan:
    table = workload.table
    n = table.n_rows
    world = cluster.gpus
    stage = stage_of(config.name)
    opts = config.options
    e = 2 if workload.mixed_precision else 4
    overlap = opts.overlap(stage)
    numels = [int(p.numel) for p in table.params]
    P = sum(numels)
    first_row = first_row_of_params(table)
    cap = STAGE0_ALLREDUCE_ELEMENTS if stage == 0 else opts.reduce_bucket_size
    buckets = ipg_buckets(numels, cap)
    ready = [min(first_row[i] for i in b) for b in buckets]
    elems = [sum(numels[i] for i in b) for b in buckets]
    persistent = [i for i, k in enumerate(numels) if stage == 3 and k <= opts.stage3_param_persistence_threshold]
    fetch = fetch_modules(numels, first_row, set(persistent)) if stage == 3 else {}
    communicate = world > 1
    grad_elem = 4 if (stage == 0 and workload.precision == "bf16") else e  # BF16_Optimizer reduces fp32 grads
    groups = {"world": Group("world", world, "world" if cluster.nodes > 1 else "intra")}
    offload = opts.offload_optimizer == "cpu" and stage >= 1
    pcie_bw = cluster.spec.intra_node.pcie_bandwidth.value

    tasks: list[Task] = []

    def add(t: Task) -> int:
        tasks.append(t)
        return len(tasks) - 1

    def gather(row: int, deps: tuple[int, ...], phase: str) -> int:
        k = fetch[row]
        return add(Task(f"all_gather:{phase}:{table.names[row]}", COMM, "comm", deps=deps, collective="all_gather",
                        comm_bytes=k * e, group="world", allocs=(k * e,)))

    # Rows where forward and backward are split: stage 3's fetched modules, the buckets' ready rows.
    cuts = sorted(set(fetch) | ({r for r in ready} if stage >= 2 or (stage == 1 and overlap) else set()))
    last: tuple[int, ...] = ()
    prefetch = opts.stage3_prefetch_bucket_size
    for micro in range(workload.grad_accumulation):
        sync = micro == workload.grad_accumulation - 1
        # Forward, gathering each module's parameters (stage 3) up to the prefetch bucket ahead.
        starts = sorted(set([0]) | set(fetch))
        seg_end = {s: (starts[j + 1] if j + 1 < len(starts) else n) for j, s in enumerate(starts)}
        done: dict[int, int] = {}
        prev = last
        order = [s for s in starts if s in fetch]
        for s in starts:
            deps = prev
            if s in fetch:
                g = gather(s, _prefetch_dep(order, s, fetch, prefetch, done), "fwd")
                deps = deps + (g,)
            prev = (add(Task(f"forward[{s}:{seg_end[s]}]", COMPUTE, "fwd", deps=deps, rows=(s, seg_end[s]),
                             direction="fwd")),)
            done[s] = prev[0]
        # Backward in segments, latest rows first; reductions where DeepSpeed issues them.
        bwd_starts = sorted(set([0]) | set(cuts), reverse=True)
        stop = n
        in_backward = stage >= 2 or (stage == 1 and overlap)
        reduce_ids: list[int] = []
        done = {}
        border = sorted(fetch, reverse=True)
        for s in bwd_starts:
            deps = prev
            if s in fetch:
                deps = deps + (gather(s, _prefetch_dep(border, s, fetch, prefetch, done), "bwd"),)
            pre = add_recompute(workload, add, deps, s, stop)
            prev = (add(Task(f"backward[{s}:{stop}]", COMPUTE, "bwd", deps=pre, rows=(s, stop), direction="bwd")),)
            done[s] = prev[0]
            if in_backward and communicate:
                for k in (k for k, r in enumerate(ready) if r >= s and r < stop):
                    prev = _reduce(add, k, elems[k] * e, stage, overlap, opts.contiguous_gradients, prev, reduce_ids)
            stop = s
        if sync and communicate and not in_backward:
            # reduce after backward: stage 1's reduce_gradients, stage 0's buffered fallback
            for k in range(len(buckets)):
                prev = _reduce(add, k, elems[k] * grad_elem, stage, False, opts.contiguous_gradients or stage == 0,
                               prev, reduce_ids)
        if offload:  # each reduced gradient partition goes to host memory (async_accumulate_grad_in_cpu_via_gpu)
            prev = (add(Task("d2h:gradient partition", PCIE, "comm", deps=prev + tuple(reduce_ids[-1:]),
                             host_s=P * e / world / pcie_bw)),)
        elif reduce_ids:
            prev = prev + (reduce_ids[-1],)
        last = prev
    # The optimizer sees one flat fp32 tensor per group in stages 1-3 (single_partition_of_fp32_groups),
    # under FP16_Optimizer / BF16_Optimizer too; the model's own tensors only in fp32 stage 0.
    flat = stage >= 1 or workload.mixed_precision
    fused = opts.fused_adam and workload.optimizer == "adam" and not offload
    prev = _step(add, workload, cluster, stage, opts, P, e, world, prev, offload, pcie_bw,
                 1 if flat else len(numels), fused)
    if stage in (1, 2) or (stage == 0 and workload.precision == "bf16"):
        if communicate:
            add(Task("all_gather:updated parameters", COMM, "comm", deps=prev, collective="all_gather",
                     comm_bytes=P * e, group="world"))
    facts = ZeROFacts(
        stage=stage, world=world, elem_bytes=e, fused_adam=fused, loss_scaling=workload.precision == "fp16-amp", overlap_comm=overlap,
        contiguous_gradients=opts.contiguous_gradients, buckets=len(buckets), bucket_elements=tuple(elems),
        bucket_ready_rows=tuple(ready), fetch_modules=len(fetch),
        persistent_elements=sum(numels[i] for i in persistent), cpu_offload=offload,
        persistence_threshold=opts.stage3_param_persistence_threshold, prefetch_elements=prefetch,
        max_live_elements=opts.stage3_max_live_parameters,
        comm_buffer_bytes=opts.reduce_bucket_size * e * (2 if overlap and stage < 3 else 1) if stage else 0.0,
        buffers=zero_buffers(workload, stage, opts, world, overlap, sum(numels[i] for i in persistent)),
        host_bytes=(4 * P / world) * (2 + workload.optimizer_state_copies) if offload else 0.0,
        pcie_bytes=2 * P * e / world if offload else 0.0,
    )
    notes = ()
    if offload:
        notes = (f"ZeRO-Offload: the CPU optimizer step is priced at an assumed {CPU_ADAM_BYTES_PER_S / 1e9:.0f} GB/s "
                 "host memory rate (simdl.strategies.zero_plan.CPU_ADAM_BYTES_PER_S); PCIe at the cluster's pcie_GB_per_s",)
    return SpmdPlan(strategy=config.name, family="zero", tasks=tuple(tasks), groups=groups, world_size=world,
                    data_parallel=world, facts=facts, notes=notes)


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
            prev = (add(Task("all_reduce:norm", COMM, "comm", deps=prev, collective="all_reduce", comm_bytes=8.0,
                             group="world")),)
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
