"""Fully Sharded Data Parallel: parameters, gradients and optimizer state sharded per unit.

Modelled on FSDP2 (torch.distributed.fsdp.fully_shard), the implementation that runs
on CPU here and that PyTorch now recommends; FSDP1's ShardingStrategy names map onto it:

  full     FULL_SHARD     reshard_after_forward=True: all-gather each unit before its
                          forward and again before its backward; reduce-scatter grads.
  grad_op  SHARD_GRAD_OP  reshard_after_forward=False: one all-gather per unit per step.
  hybrid   HYBRID_SHARD   full sharding inside a node; the reduce-scattered gradient
                          shard is then all-reduced across nodes (replicate group).
                          ``StrategyConfig.shard_group`` sets a smaller shard group (FSDP2's
                          2-D mesh of any shape), e.g. 2 replicas x 2 shards on one node.
  none     NO_SHARD       replicas, gradients all-reduced per unit. FSDP2 has no NO_SHARD:
                          its stand-in (and what validate/train.py runs) is HSDP on a
                          (ranks x 1) mesh, which keeps the whole "sharded" parameters and,
                          per unit from pre-forward to post-backward, an unsharded copy
                          (simdl.memory.timeline); FSDP1's NO_SHARD kept one copy.

Schedule (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _fsdp_state.py):
all-gathers run on their own stream, so the next unit's all-gather overlaps the current
unit's compute (forward prefetch; backward prefetch "pre" issues the next backward
all-gather before the current unit's backward compute, "post" after it). At most
``max_inflight_all_gathers`` unsharded units are gathered ahead of compute. Reduce-
scatters run on a separate stream. The root unit is not resharded after forward
(FSDP2 sets reshard_after_forward=False for the root when the argument is left at its
default: its parameters are needed again at once for backward), unless
``StrategyConfig.reshard_root`` says the root was given reshard_after_forward=True
explicitly, as validate/train.py does.

On a CPU device there are no side streams, and every collective FSDP2 issues blocks the
training thread until it completes: FSDP2 calls its reduce-scatter and all-reduce with
``async_op=False`` and unshards with ``unshard_async_op=False`` (_fsdp_collectives.py
foreach_reduce, _fsdp_param_group.py), and c10d then calls ``work.wait()``
(distributed_c10d.py), which on a CUDA tensor only orders the stream but on gloo's CPU
work waits on the host. So on a CPU cluster nothing is prefetched and each unit's
backward waits for the previous unit's gradient reduction (:func:`collectives_block`).
Measured: benchmarks/fsdp2_blocking_cpu.py (a synchronous 64 MiB gloo collective holds the
calling thread as long as an asynchronous one takes to complete). DDP is different: its
reducer issues asynchronous all-reduces and waits once, at the end of backward, so its
communication overlaps backward on CPU as well.

The blocking schedule is priced with the profile's blocking factors and wait where its
calibration logged the calls (simdl.calibrate.in_step), else with the in-step collective
slowdown simdl.calibrate.overlap fits to whole steps (all_reduce's own factor, falling with
message size). The plan marks itself (``facts.blocking_collectives``) and
:meth:`simdl.analytic.costs.CommCosts.for_plan` prices it accordingly. Blocking was chosen
on the calibration's own leave-one-model-out errors; with the earlier single load factor it
fitted worse (2 ranks: max 20.5% against 15.4% overlapped).

A profile may also charge FSDP2's own host time per unit and step
(``strategies.fsdp.unit_overhead_us``): its forward/backward hooks are Python on the
training thread. On CPU ranks the logged calls left about as much time outside the calls
with one collective per unit (none) as with three (full), so it is a cost per unit, not per
call; it is one ``fsdp_hooks`` task before each unit's first forward run. Chosen on the
calibration's own leave-one-model-out errors (cpu-epyc: mean 7.8 % with the term against 9.9 %
without, max 22.3 % against 21.6 %, both maxima the same wide_resnet101_2 grad_op step).
"""

from __future__ import annotations

from ..memory.timeline import fsdp_timeline
from .fsdp_plan import FSDPFacts, build_plan, collectives_block
from .options import FSDPOptions
from .registry import PredictKey, StrategySpec, register

__all__ = ["FSDPFacts", "SPEC", "build_plan", "collectives_block"]


def _echo(config, plan) -> dict:
    f = plan.facts
    out = {
        "sharding": config.sharding,
        "wrap": config.wrap,
        "fsdp_units": f.units,
        "cpu_offload": config.cpu_offload,
        "reshard_root": f.reshard_root,
    }
    if config.sharding == "hybrid":
        out.update(shard_group=f.shard_size, replicas=f.replicas)
    return out


# Simplest first: the order recommend breaks ties in (no sharding before gradient and
# optimizer sharding before full sharding; hybrid only matters across nodes).
_LABELS = ("none", "grad_op", "full", "hybrid")


def _communicators(plan) -> int:
    """The device mesh's groups that run collectives: the shard group (all-gather,
    reduce-scatter) when it has more than one rank, the replicate group (all-reduce) likewise."""
    shard = int(plan.details["shard_size"])
    return int(shard > 1) + int(plan.world_size // max(shard, 1) > 1)


SPEC = register(
    StrategySpec(
        family="fsdp",
        names=("fsdp",),
        options=FSDPOptions,
        build_plan=build_plan,
        memory_timeline=fsdp_timeline,
        predict_keys={
            "sharding": PredictKey("sharding", default_reason="FSDP's default ShardingStrategy.FULL_SHARD"),
            "wrap": PredictKey("wrap", default_reason="the model's block classes as FSDP units"),
            "cpu_offload": PredictKey("cpu_offload", bool),
            "reshard_root": PredictKey("reshard_root", bool),
            "shard_group": PredictKey("shard_group"),
        },
        labels={f"fsdp-{s}": ("fsdp", {"sharding": s}) for s in _LABELS},
        label=lambda config: f"fsdp-{config.sharding}",
        variants=lambda v: tuple(f"fsdp-{s}" for s in _LABELS if s != "hybrid" or v.multi_node),
        echo=_echo,
        communicators=_communicators,
        gpu_framework="per_unit",
        # calibration/strategies.py shards every block and the root, and gives the root
        # reshard_after_forward explicitly: True for full sharding only.
        calibration_step=lambda options: {"wrap": "block", "reshard_root": options.get("sharding") == "full"},
    )
)
