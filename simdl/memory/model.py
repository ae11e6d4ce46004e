"""Peak memory per rank, with a breakdown at the moment of the peak.

Tensors (what ``torch.cuda.max_memory_allocated`` reports):
- params: the fp32 parameters a rank holds (a 1/shard slice under FSDP), plus FSDP's
  unsharded units alive at the peak (the root, the unit being computed and the one
  prefetched; every unit under grad_op, which keeps them until after backward).
- grads: gradients produced so far in backward (sharded under FSDP, after reduce-scatter).
- optimizer: optimizer state, which exists from the first step on (steady state).
- activations: saved-for-backward tensors not yet freed, plus the output gradient and
  input gradient of the layer running at the peak; autocast's cache of low-precision
  weight copies under mixed precision.
- comm_buffers: DDP's gradient buckets (a flat copy of all gradients unless
  gradient_as_bucket_view=True, torch/nn/parallel/distributed.py); FSDP's all-gather
  output and reduce-scatter input of one unit; the PS worker's pulled-parameter buffer.

Process overheads ("other"): CUDA context and library workspaces, and the caching
allocator's rounding/fragmentation as a fraction of tensor memory, all named
parameters of the cluster profile.

The peak is found along backward: as the rows run in reverse, saved activations are
freed and gradients appear; the peak is the row where their sum (plus the transient
gradients of that row) is largest. Zero-grad with set_to_none=True (PyTorch's default
since 2.0, torch/optim/optimizer.py) means no gradients exist during forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cluster import Cluster
from ..result import MEMORY_CATEGORIES
from ..strategies.plan import PSPlan, SpmdPlan
from ..workload.workload import Workload


@dataclass(frozen=True)
class MemoryEstimate:
    peak_tensor_bytes: float
    peak_bytes: float  # process total: tensors + context + workspace + fragmentation
    breakdown: dict[str, float]
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes


def _backward_peak(workload: Workload, act_factor: float, grad_scale: float) -> tuple[float, float]:
    """(activations, grads) at the backward row where their sum is largest."""
    table = workload.table
    b = workload.batch_size
    saved = table.column("saved_bytes", b) * act_factor
    out = table.column("output_bytes", b) * act_factor
    grads = table.fixed["param_bytes"] * grad_scale
    remaining = np.cumsum(saved)  # activations still saved when backward reaches row r
    grads_after = grads.sum() - np.cumsum(grads)  # gradients of rows later in forward
    prev_out = np.concatenate([[0.0], out[:-1]])
    transient = out + prev_out  # grad of the row's output and of its input
    act = remaining + transient
    total = act + grads_after + grads
    k = int(np.argmax(total))
    return float(act[k]), float(grads_after[k] + grads[k])


def estimate_memory(workload: Workload, plan: SpmdPlan | PSPlan, cluster: Cluster, act_factor: float) -> MemoryEstimate:
    P = workload.param_bytes
    opt_copies = workload.optimizer_state_copies
    spec = cluster.spec
    bd = dict.fromkeys(MEMORY_CATEGORIES, 0.0)
    if isinstance(plan, PSPlan):
        act, grads = _backward_peak(workload, act_factor, 1.0)
        bd.update(params=P, grads=grads, activations=act, comm_buffers=P)
    elif plan.strategy == "ddp":
        act, grads = _backward_peak(workload, act_factor, 1.0)
        bd.update(params=P, grads=grads, optimizer=opt_copies * P, activations=act,
                  comm_buffers=plan.details["comm_buffer_bytes"])
        if workload.mixed_precision:
            bd["activations"] += P / 2  # autocast's cached 16-bit weight copies
    else:  # FSDP
        d = plan.details
        s = d["shard_size"]
        half = d["all_gather_elem_bytes"] / 4.0
        act, grads = _backward_peak(workload, act_factor, 1.0 / s)
        unsharded = 0.0
        if s > 1:
            if d["reshard_after_forward"]:
                unsharded = (d["root_unit_bytes"] + 2 * d["largest_unit_bytes"]) * half
            else:
                unsharded = P * half
        # One unit's all-gather output and reduce-scatter input (fp32 gradients).
        comm = (d["largest_unit_bytes"] * half if s > 1 else 0.0) + (d["largest_unit_bytes"] if cluster.gpus > 1 else 0.0)
        bd.update(params=P / s + unsharded, grads=grads, optimizer=opt_copies * P / s,
                  activations=act, comm_buffers=comm)
    tensors = sum(bd.values())
    mem = spec.memory
    other = mem.context_bytes.value + mem.workspace_bytes.value + mem.allocator_fragmentation.value * tensors
    bd["other"] = other
    return MemoryEstimate(tensors, tensors + other, bd, spec.gpu.memory_bytes.value)
