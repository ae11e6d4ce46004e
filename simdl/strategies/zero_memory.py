"""Memory of a ZeRO rank: the buffers DeepSpeed 0.16.5 allocates, each by name, and their timeline.

Sources (microsoft/DeepSpeed 0.16.5): runtime/zero/stage_1_and_2.py (bit16_groups_flat: the
flat 16-bit -- or fp32 -- parameters the model's tensors become views of;
single_partition_of_fp32_groups: ``.clone().float()`` of this rank's partition, an fp32 master
copy even in fp32 training; backward(): ``ipg_buffer`` of ``reduce_bucket_size`` elements, a
second one with overlap_comm, released in the epilogue; grads_in_partition (stage 2,
contiguous_gradients); averaged_gradients, views of the gradients until step() flattens them;
allreduce_bucket's flat copy of each bucket; step(): the partition's gradient ``.to(fp32)``),
runtime/zero/stage3.py (lp_param_buffer partition, fp32_partitioned_groups_flat,
grad_partitions_flat_buffer, ``__ipg_bucket_flat_buffer`` of reduce_bucket_size elements;
persistent parameters of at most stage3_param_persistence_threshold elements kept whole),
runtime/fp16/fused_optimizer.py (FP16_Optimizer: fp32 master of the whole flat parameters,
fp32 flat gradients at the step), runtime/bf16_optimizer.py (BF16_Optimizer: fp32 master
partition, a full fp32 gradient accumulation buffer), runtime/engine.py (stage 0:
allreduce_no_retain flattens each bucket before its all-reduce).

The timeline uses the row events of :mod:`simdl.memory.timeline` (activations, temporaries,
each row's gradient as backward produces it, in the model's dtype) and adds the buffers above.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..workload.workload import Workload
from .rows import first_row_of_params
from .zero import STAGE0_ALLREDUCE_ELEMENTS, Buffer

_CAT = {"params": 0, "grads": 1, "optimizer": 2, "activations": 3, "temporaries": 4, "comm_buffers": 5}


def fetch_modules(numels, first_row, persistent: set[int]) -> dict[int, int]:
    """Stage 3: row -> elements all-gathered before it runs (its module's non-persistent parameters)."""
    out: dict[int, int] = {}
    for i, k in enumerate(numels):
        if i not in persistent and k:
            out[first_row[i]] = out.get(first_row[i], 0) + k
    return out


def zero_buffers(
    workload: Workload, stage: int, opts, world: int, overlap: bool, persistent: int
) -> tuple[Buffer, ...]:
    """Every buffer DeepSpeed allocates on one rank, by name (per-row gradients and stage 3's
    gathered parameters are in the timeline, not here)."""
    P = float(sum(p.numel for p in workload.table.params))
    e = 2 if workload.mixed_precision else 4
    K = workload.optimizer_state_copies
    part = P / world
    R = float(opts.reduce_bucket_size)
    off = opts.offload_optimizer == "cpu" and stage >= 1
    opt_life = "host" if off else "model"
    b: list[Buffer] = []
    if stage == 0:
        bucket = min(P, STAGE0_ALLREDUCE_ELEMENTS)
        if workload.precision == "bf16":
            b += [
                Buffer("bf16 flat parameters", "params", 2 * P, "model"),
                Buffer("fp32 master partition", "params", 4 * part, "model"),
                Buffer("fp32 gradient accumulation buffer", "grads", 4 * P, "model"),
                Buffer("optimizer state", "optimizer", 4 * K * part, "model"),
            ]
            if world > 1:
                b.append(Buffer("allreduce flat bucket", "comm_buffers", 4 * bucket, "reduce"))
            return tuple(b)
        b.append(Buffer("fp16 parameters" if e == 2 else "parameters", "params", e * P, "model"))
        if e == 2:
            b += [
                Buffer("fp32 master parameters", "params", 4 * P, "model"),
                Buffer("fp32 flat gradients", "grads", 4 * P, "step"),
            ]
        b.append(Buffer("optimizer state", "optimizer", 4 * K * P, "model"))
        if world > 1:
            b.append(Buffer("allreduce flat bucket", "comm_buffers", e * bucket, "reduce"))
        return tuple(b)
    if stage < 3:
        b.append(Buffer("flat parameters", "params", e * P, "model"))
    else:
        b += [
            Buffer("parameter partition", "params", e * part, "host" if opts.offload_param == "cpu" else "model"),
            Buffer("persistent parameters", "params", e * float(persistent), "model"),
        ]
    b += [
        Buffer("fp32 master partition", "params", 4 * part, opt_life),
        Buffer("optimizer state", "optimizer", 4 * K * part, opt_life),
    ]
    if opts.contiguous_gradients:
        life = "model" if stage == 3 else "backward"
        b.append(Buffer("ipg bucket" if stage == 3 else "ipg bucket 0", "comm_buffers", e * R, life))
        if overlap and stage < 3:  # stage_1_and_2.py backward: double buffers with overlap_comm
            b.append(Buffer("ipg bucket 1", "comm_buffers", e * R, "backward"))
    if stage == 3:
        b.append(Buffer("gradient partition buffer", "grads", e * part, "host" if off else "model"))
    elif not off:  # with cpu_offload the reduced partition goes straight to the host's fp32 gradients
        if stage == 2:
            b.append(Buffer("gradient partition", "grads", e * part, "first_reduce"))
        # step() flattens averaged_gradients, which the epilogue keeps as views of the gradients
        # (get_flat_partition(return_tensor_list=True)), into the partition's flat gradient
        b.append(Buffer("flat gradient partition", "temporaries", e * part, "step"))
    if stage == 3:
        b += _stage3_reduce_buffers(e, R, P, world, off)
    if stage < 3:
        # average_tensor -> allreduce_and_scatter / allreduce_no_retain -> allreduce_bucket
        # flattens each bucket's gradients for its collective, contiguous_gradients or not
        b.append(Buffer("flattened bucket", "comm_buffers", e * min(R, P), "reduce_each"))
    if off:
        b.append(Buffer("fp32 gradient partition", "grads", 4 * part, "host"))
        if stage < 3:  # stage_1_and_2.py: temp_grad_buffer_for_gpu_offload, the largest parameter
            largest = float(max((p.numel for p in workload.table.params), default=0))
            b.append(Buffer("offload staging buffer", "grads", e * largest, "model"))
    elif e != 4:
        b.append(Buffer("fp32 gradient partition", "grads", 4 * part, "step"))
    return tuple(b)


def _stage3_reduce_buffers(e: int, R: float, P: float, world: int, off: bool) -> list[Buffer]:
    """Stage 3's buffers of the gradient reduction and of the step's flat gradient."""
    part = P / world
    # __avg_scatter_grads -> coalesced_collectives.reduce_scatter_coalesced concatenates the
    # bucket's gradients (each padded to a multiple of the world) and reduce-scatters the copy
    # into a partition-sized output (stage3.py, runtime/comm/coalesced_collectives.py)
    b = [
        Buffer("reduce-scatter flat input", "comm_buffers", e * min(R, P), "reduce_each"),
        Buffer("reduce-scatter output", "comm_buffers", e * min(R, P) / world, "reduce_each"),
    ]
    if not off and e == 4:
        # step(): _prepare_fp32_grad_for_sub_group flattens averaged_gradients (views of the
        # gradient partition buffer) into the fp32 partition's .grad, released with the sub
        # group after its update (stage3.py _release_sub_group, DeepSpeed 0.19.8); in 16 bits
        # that copy is zero_buffers' "fp32 gradient partition"
        b.append(Buffer("flat gradient partition", "temporaries", e * part, "step"))
    return b


def model_state_bytes(buffers) -> float:
    """GPU bytes of the model states (parameters, gradients, optimizer state): what
    DeepSpeed's estimate_zero*_model_states_mem_needs counts."""
    return sum(b.bytes for b in buffers if b.life != "host" and b.category in ("params", "grads", "optimizer"))


def zero_timeline(workload: Workload, plan, options):
    f = plan.facts
    key = (workload.table, workload.batch_size, workload.optimizer, workload.precision)
    return _timeline(*key, options, f)


@dataclass(frozen=True)
class _Anchors:
    """Where in a step's event order ZeRO's buffers appear and go: (position, direction, row, edge)."""

    backward_start: tuple
    epilogue: tuple  # after the last backward row
    first_reduce: tuple  # when the first bucket is reduced (the epilogue without buckets)
    step_start: tuple
    step_end: tuple


@lru_cache(maxsize=2048)
def _timeline(table, batch, optimizer, precision, opts, f):
    from ..memory import timeline as T
    from ..memory.rowtree import row_tree

    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, precision=precision)
    n = table.n_rows
    tree = row_tree(table)
    pf, pb = T._positions(n)
    e = f.elem_bytes
    ev = T._Events()
    # The model itself is in 16 bits under fp16/bf16 (engine.py module.half() / .bfloat16()): no autocast cache.
    T._row_events(
        ev, table, batch, T._act_factor(wl), False, opts.activation_checkpointing, e / 4.0, opts.conv_backward_scratch
    )

    def at(where, delta, cat, label, eps=0.0):
        pos, d, row, edge = where
        ev.add(pos + eps, _CAT[cat], delta, direction=d, row=row, edge=edge, label=label)

    def b_post(row):
        return (pb(tree.post_pos[tree.first_leaf[row]]) + 0.96, T.BWD, int(tree.first_leaf[row]), 1)

    epi = (pb(0) + 0.99, T.BWD, 0, 1)
    anchors = _Anchors(
        backward_start=(1.5 + n, T.BWD, n - 1, 0),
        epilogue=epi,
        first_reduce=b_post(max(f.bucket_ready_rows)) if f.bucket_ready_rows else epi,
        step_start=(3.0 + 2 * n + 0.2, T.STEP, -1, 0),
        step_end=(3.0 + 2 * n + 0.95, T.STEP, -1, 1),
    )
    base = np.zeros(len(T.CATEGORIES))
    base[T.PARAMS] = table.buffer_bytes
    numels = [int(p.numel) for p in table.params]
    first_row = first_row_of_params(table)
    _buffer_events(at, b_post, base, f, anchors)
    _gradient_frees(ev, at, b_post, table, tree, pb, f, anchors)
    if f.stage == 3:
        _stage3_gathers(ev, table, tree, pf, pb, f, numels, first_row, e)
    if optimizer == "adam" and not f.cpu_offload and not f.fused_adam:
        # torch/optim/adam.py: foreach Adam's one _foreach_sqrt copy of the tensors it steps;
        # per-tensor Adam (no foreach: CPU ranks) holds sqrt's output and the quotient at once
        # (_single_tensor_adam ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt)``) for its
        # largest tensor: the flat fp32 partition in stages 1-3 and under FP16/BF16_Optimizer,
        # the largest parameter in fp32 stage 0.
        local = 4.0 * sum(numels) / (f.world if f.stage >= 1 or precision == "bf16" else 1)
        if not opts.foreach:
            flat = f.stage >= 1 or precision in ("fp16-amp", "bf16")
            local = 2.0 * (local if flat else 4.0 * max(numels, default=0))
        at(anchors.step_start, local, "optimizer", "adam sqrt scratch", 0.1)
        at(anchors.step_start, -local, "optimizer", "adam sqrt scratch", 0.3)
    return ev.build(base, np.zeros(len(T.CATEGORIES)))


def _buffer_events(at, b_post, base, f, anchors: _Anchors) -> None:
    """Each ZeRO buffer over its life: held with the model (into ``base``), or allocated and
    freed at the anchors of its life."""
    for buf in f.buffers:
        if buf.life == "model":
            base[_CAT[buf.category]] += buf.bytes
        elif buf.life == "backward":
            at(anchors.backward_start, buf.bytes, buf.category, buf.name, -0.01)
            at(anchors.epilogue, -buf.bytes, buf.category, buf.name, 0.008)
        elif buf.life == "first_reduce":
            # reduce_ipg_grads copies into the partition after average_tensor has freed its flat copy
            at(anchors.first_reduce, buf.bytes, buf.category, buf.name, 0.016)
            at(anchors.step_end, -buf.bytes, buf.category, buf.name, 0.01)
        elif buf.life == "step":
            at(anchors.step_start, buf.bytes, buf.category, buf.name, -0.05)
            at(anchors.step_end, -buf.bytes, buf.category, buf.name, -0.02)
        elif buf.life == "reduce_each":  # while each bucket is reduced
            for r in f.bucket_ready_rows:
                where = b_post(r) if f.stage >= 2 else anchors.epilogue
                at(where, buf.bytes, buf.category, buf.name, 0.012)
                at(where, -buf.bytes, buf.category, buf.name, 0.014)
        elif buf.life == "reduce":  # stage 0: one flattened bucket at a time, after backward
            at(anchors.epilogue, buf.bytes, buf.category, buf.name, 0.003)
            at(anchors.epilogue, -buf.bytes, buf.category, buf.name, 0.006)


def _gradient_frees(ev, at, b_post, table, tree, pb, f, anchors: _Anchors) -> None:
    """When the row gradients (allocated by the row events) are freed: stages 2-3 free each
    bucket's once it is reduced; stage 1 in the epilogue (zero_grad(set_to_none=True)); stage 0
    at zero_grad."""
    from ..memory import timeline as T

    e = f.elem_bytes
    grads_total = float(table.param_bytes) * e / 4.0
    if f.stage >= 2 and f.contiguous_gradients:
        # The backward hook copies each gradient into the ipg bucket and points .grad at the copy
        # (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads, stage3.py
        # __add_grad_to_ipg_bucket): autograd's tensor is freed as soon as the row's backward ends.
        g = table.fixed["param_bytes"].astype(float) * e / 4.0
        ev.add(
            pb(tree.post_pos) + 0.76,
            _CAT["grads"],
            -g,
            direction=T.BWD,
            row=tree.end - 1,
            edge=1,
            label="gradients copied into the ipg bucket",
        )
    elif f.stage >= 2 and f.buckets:
        bucket_bytes = np.asarray(f.bucket_elements, float) * e
        for r, nb in zip(f.bucket_ready_rows, bucket_bytes):
            at(b_post(r), -nb, "grads", "gradients reduced into the partition", 0.02)
    elif f.stage == 1:
        at(anchors.epilogue, -grads_total, "grads", "gradients (epilogue zero_grad)", 0.007)
    else:
        at(anchors.step_end, -grads_total, "grads", "zero_grad", 0.03)


def _stage3_gathers(ev, table, tree, pf, pb, f, numels, first_row, e) -> None:
    """Each module's gathered parameters around its forward and its backward, and the
    modules prefetched behind it (up to the prefetch bucket and the live-parameter limit).

    Each fetch all-gathers the elements not yet gathered into one flat output of world x
    partition (partition_parameters.py _all_gather_dtype, DeepSpeed 0.19.8) and its handle's
    wait() gives every parameter its own ``torch.cat`` of the partitions
    (AllGatherCoalescedHandle), so the flat output lives beside the copies until the wait
    returns: the newly gathered elements are held twice for that moment."""
    from ..memory import timeline as T

    persistent = {i for i, k in enumerate(numels) if k <= f.persistence_threshold}
    fetch = fetch_modules(numels, first_row, persistent)
    order = sorted(fetch)
    for direction, rows in ((T.FWD, order), (T.BWD, order[::-1])):
        window_ahead = 0  # elements of the previous fetch's window beyond its module: already gathered
        for j, row in enumerate(rows):
            k = fetch[row]
            ahead, m = 0, j + 1
            while m < len(rows) and ahead + fetch[rows[m]] <= f.prefetch_elements:
                ahead += fetch[rows[m]]
                m += 1
            ahead = min(ahead, max(f.max_live_elements - k, 0))
            first = int(tree.first_leaf[row])
            if direction == T.FWD:
                pre, post = pf(tree.post_pos[first]) + 0.01, pf(tree.post_pos[row]) + 0.95
                r0, r1 = row, int(tree.end[row]) - 1
            else:
                pre, post = pb(tree.post_pos[row]) + 0.01, pb(tree.post_pos[first]) + 0.95
                r0, r1 = int(tree.end[row]) - 1, first
            name = table.names[row]
            new_elements, window_ahead = max(k + ahead - window_ahead, 0), ahead
            if new_elements:
                ev.add(
                    pre - 0.0005, 5, new_elements * e, direction=direction, row=r0, label=f"all-gather output {name}"
                )
                ev.add(
                    pre + 0.002, 5, -new_elements * e, direction=direction, row=r0, label=f"all-gather output {name}"
                )
            ev.add(pre, 0, k * e, direction=direction, row=r0, label=f"gathered parameters {name}")
            ev.add(post, 0, -k * e, direction=direction, row=r1, edge=1, label=f"released parameters {name}")
            if ahead:
                ev.add(
                    pre + 0.001, 5, ahead * e, direction=direction, row=r0, label=f"prefetched parameters after {name}"
                )
                ev.add(
                    post - 0.001,
                    5,
                    -ahead * e,
                    direction=direction,
                    row=r1,
                    edge=1,
                    label=f"prefetched parameters after {name}",
                )
