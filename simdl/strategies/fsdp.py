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

from dataclasses import dataclass

from ..cluster import Cluster
from ..errors import SimdlError
from ..hosts import host_for
from ..memory.rowtree import add_recompute
from ..memory.timeline import fsdp_timeline
from ..workload.workload import Workload
from .config import StrategyConfig
from .fsdp_units import fsdp_units
from .optimizer_step import optimizer_task, uses_foreach
from .options import FSDPOptions
from .plan import COMM, COMM_REDUCE, COMPUTE, Group, PlanFacts, SpmdPlan, Task
from .registry import PredictKey, StrategySpec, register


def _runs(row_unit) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive rows that belong to one unit: (unit, start, stop)."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    n = len(row_unit)
    for i in range(1, n + 1):
        if i == n or row_unit[i] != row_unit[start]:
            runs.append((int(row_unit[start]), start, i))
            start = i
    return runs


def collectives_block(cluster: Cluster) -> bool:
    """FSDP2's collectives block the training thread where the host backend says so (CPU, gloo)."""
    return host_for(cluster).collectives_block()


@dataclass(frozen=True)
class FSDPFacts(PlanFacts):
    units: int = 0  # FSDP units (simdl.strategies.fsdp_units)
    wrap: str = "block"  # the wrap policy the units come from
    unit_bytes: tuple[float, ...] = ()  # each unit's unsharded fp32 parameter bytes, root first
    shard_size: int = 1  # ranks a unit is sharded over
    replicas: int = 1  # shard groups holding the same shard (hybrid), or ranks (no sharding)
    reshard_after_forward: bool = False  # units are freed after forward and gathered again for backward
    reshard_root: bool = False  # the root unit is resharded after forward too
    all_gather_elem_bytes: int = 4  # bytes per gathered element (2 under a bf16/fp16 param dtype)
    largest_unit_bytes: float = 0
    root_unit_bytes: float = 0


def _mesh(cluster: Cluster, config: StrategyConfig) -> tuple[int, int, dict[str, Group]]:
    """(shard size, replicas, process groups) of the sharding on this allocation."""
    sharding = config.sharding
    world = cluster.gpus
    world_scope = "world" if cluster.nodes > 1 else "intra"
    shard_scope = replicate_scope = world_scope
    if sharding == "hybrid":
        G = cluster.gpus_per_node
        shard_size = config.shard_group or G
        if shard_size * cluster.nodes != world and config.shard_group is None:
            raise SimdlError(
                f"hybrid sharding needs the same GPU count on every node; got {world} GPUs on {cluster.nodes} nodes"
            )
        if world % shard_size or G % shard_size:
            raise SimdlError(
                f"shard group {shard_size} must divide the GPUs of a node ({G}) and the world ({world}): "
                "FSDP2's mesh puts each shard group's ranks on one node"
            )
        replicas = world // shard_size
        # The mesh is row-major (torch.distributed.device_mesh): a shard group is shard_size
        # consecutive ranks of one node; a replicate group takes one rank of each shard group.
        shard_scope = "intra"
        replicate_scope = "intra" if cluster.nodes == 1 else "inter" if shard_size == G else "world"
    elif sharding == "none":
        shard_size, replicas = 1, world
    else:
        shard_size, replicas = world, 1
    groups = {
        "world": Group("world", world, world_scope),
        "shard": Group("shard", shard_size, shard_scope),
        "replicate": Group("replicate", replicas, replicate_scope),
    }
    return shard_size, replicas, groups


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> SpmdPlan:
    return _Builder(workload, cluster, config).plan()


class _Builder:
    """The tasks of one FSDP iteration, unit by unit (the schedule of the module docstring)."""

    def __init__(self, workload: Workload, cluster: Cluster, config: StrategyConfig) -> None:
        self.workload, self.cluster, self.config = workload, cluster, config
        self.sharding = config.sharding
        self.world = cluster.gpus
        self.shard_size, self.replicas, self.groups = _mesh(cluster, config)
        self.units = fsdp_units(workload.table, config.wrap)
        self.runs = _runs(self.units.row_unit)
        elem = 4  # fp32 parameters and gradients
        # FSDP MixedPrecisionPolicy(param_dtype=bf16/fp16) all-gathers low-precision params;
        # gradients are reduced in fp32 (reduce_dtype=fp32, as torchtitan's default).
        self.ag_elem = 2 if workload.mixed_precision else elem
        self.unit_bytes = [u.numel * elem for u in self.units.units]
        self.reshard = self.sharding in ("full", "hybrid")
        self.reshard_root = self.reshard and config.reshard_root
        self.limit = config.max_inflight_all_gathers
        self.blocking = collectives_block(cluster)
        self.host = host_for(cluster)
        self.refault_limit = self.host.refault_limit([b / self.shard_size for b in self.unit_bytes])
        # FSDP2's hooks per unit per step (strategies.fsdp.unit_overhead_us; calibrated CPU profiles).
        hooks = cluster.spec.strategies.fsdp.unit_overhead
        self.unit_host_s = hooks.value if hooks is not None else 0.0
        self.hooked: set[int] = set()
        self.tasks: list[Task] = []
        self.reduce_tasks: list[int] = []
        self.prev: int | None = None
        self.runs_left: list[int] = []
        self.sync = True

    def add(self, task: Task) -> int:
        self.tasks.append(task)
        return len(self.tasks) - 1

    def _name(self, u: int) -> str:
        return self.units.units[u].name or "root"

    def unsharded_allocs(self, u: int) -> tuple[float, ...]:
        # alloc_all_gather_outputs: one unsharded tensor per parameter (_fsdp_param.py)
        return tuple(n * self.ag_elem for n in self.units.units[u].param_numels)

    def all_gather(self, u: int, deps: tuple[int, ...], phase: str) -> int:
        if self.shard_size == 1:
            return self.local_unshard(u, deps, phase)
        name = self._name(u)
        full = self.units.units[u].numel * self.ag_elem
        # foreach_all_gather (_fsdp_collectives.py): the shards are copied into the flat
        # all-gather buffer (all_gather_copy_in, which allocates the whole output) on the
        # copy-in stream -- the compute stream on CPU, where there are no side streams.
        cin = self.add(
            Task(
                f"copy_in:{phase}:{name}",
                COMPUTE,
                phase,
                deps=deps,
                bytes=2.0 * full / self.shard_size,
                kernels=1,
                allocs=(full,),
            )
        )
        t = self.add(
            Task(
                f"all_gather:{phase}:{name}",
                COMM,
                "comm",
                deps=(cin,),
                collective="all_gather",
                comm_bytes=full,
                group="shard",
            )
        )
        # FSDP2 copies the gathered flat buffer out into the unsharded parameters
        # (foreach_all_gather_copy_out) on the compute stream: one read and one write.
        return self.add(
            Task(
                f"copy_out:{phase}:{name}",
                COMPUTE,
                phase,
                deps=(t,),
                bytes=2.0 * full,
                kernels=1,
                allocs=self.unsharded_allocs(u),
            )
        )

    def local_unshard(self, u: int, deps: tuple[int, ...], phase: str) -> int:
        # Shard size 1 (NO_SHARD as HSDP): FSDPParamGroup.wait_for_unshard copies each
        # sharded parameter into a freshly allocated unsharded one, no collective.
        unit = self.units.units[u]
        return self.add(
            Task(
                f"copy_out:{phase}:{self._name(u)}",
                COMPUTE,
                phase,
                deps=deps,
                bytes=2.0 * unit.numel * self.ag_elem,
                kernels=unit.n_tensors,
                allocs=self.unsharded_allocs(u),
            )
        )

    def reduce(self, u: int, after: int) -> None:
        size = self.unit_bytes[u]
        if size == 0 or self.world == 1:
            return
        name = self._name(u)
        # foreach_reduce (_fsdp_collectives.py): the unsharded gradients are copied into one
        # flat reduce-scatter input (foreach_reduce_scatter_copy_in, chunk_cat) on the
        # compute stream, and the reduce output (a shard) is allocated.
        out = size / self.shard_size
        cin = self.add(
            Task(
                f"rs_copy_in:{name}",
                COMPUTE,
                "bwd",
                deps=(after,),
                bytes=2.0 * size,
                kernels=1,
                allocs=(size, out),
                refaults=out if out <= self.refault_limit else 0.0,
            )
        )
        if self.sharding == "none":
            # Shard group of one: reduce_output.copy_(reduce_scatter_input), then the
            # all-reduce over the replicate group.
            cp = self.add(Task(f"rs_copy:{name}", COMPUTE, "bwd", deps=(cin,), bytes=2.0 * size, kernels=1))
            self.reduce_tasks.append(
                self.add(
                    Task(
                        f"all_reduce:{name}",
                        COMM_REDUCE,
                        "comm",
                        deps=(cp,),
                        collective="all_reduce",
                        comm_bytes=size,
                        group="replicate",
                    )
                )
            )
            if self.blocking:  # the next unit's backward starts when the all-reduce has returned
                self.prev = self.reduce_tasks[-1]
            return
        rs = self.add(
            Task(
                f"reduce_scatter:{name}",
                COMM_REDUCE,
                "comm",
                deps=(cin,),
                collective="reduce_scatter",
                comm_bytes=size,
                group="shard",
            )
        )
        if self.replicas > 1:
            rs = self.add(
                Task(
                    f"all_reduce:{name}",
                    COMM_REDUCE,
                    "comm",
                    deps=(rs,),
                    collective="all_reduce",
                    comm_bytes=size / self.shard_size,
                    group="replicate",
                )
            )
        self.reduce_tasks.append(rs)
        if self.blocking:
            self.prev = rs

    def _hooks(self, u: int) -> None:
        # Charged once per unit and step, before its first forward run (its hooks run on the
        # training thread, between the unit's collectives and compute).
        self.hooked.add(u)
        self.prev = self.add(
            Task(
                f"fsdp_hooks:{self._name(u)}",
                COMPUTE,
                "fwd",
                deps=(self.prev,) if self.prev is not None else (),
                host_s=self.unit_host_s,
            )
        )

    def _gather_ahead(
        self, order: list[int], at: int, ahead: int, gathered: dict[int, int], done: dict[int, int], direction: str
    ) -> None:
        """All-gathers of the units from ``order[at]`` up to ``ahead`` units on. The all-gather
        of the unit ``limit`` places after a non-root unit waits for that unit's compute to
        finish (its unsharded memory is freed then); the root is never resharded, so it holds
        no slot."""
        for j in range(at, min(at + ahead, len(order))):
            v = order[j]
            if v in gathered:
                continue
            deps: tuple[int, ...] = (self.prev,) if (ahead == 1 and self.prev is not None) else ()
            slot = j - self.limit
            if slot >= 0 and order[slot] != 0 and order[slot] in done:
                deps += (done[order[slot]],)
            gathered[v] = self.all_gather(v, deps, direction)

    def schedule(self, run_list: list[tuple[int, int, int]], direction: str, gather, ahead: int) -> None:
        """Compute runs in order; all-gathers of units for which ``gather(u)`` holds are
        issued up to ``ahead`` units early (1 = no prefetch: issued when the unit is reached)."""
        order: list[int] = []
        for u, _, _ in run_list:
            if u not in order and gather(u):
                order.append(u)
        pos = {u: i for i, u in enumerate(order)}
        gathered: dict[int, int] = {}
        done: dict[int, int] = {}
        for u, start, stop in run_list:
            if self.unit_host_s and direction == "fwd" and u not in self.hooked:
                self._hooks(u)
            if u in pos and u not in gathered:
                self._gather_ahead(order, pos[u], ahead, gathered, done, direction)
            deps = ((self.prev,) if self.prev is not None else ()) + ((gathered[u],) if u in gathered else ())
            if direction == "bwd":  # activation checkpointing: recompute the unit's blocks first
                deps = add_recompute(self.workload, self.add, deps, start, stop)
            label = "forward" if direction == "fwd" else "backward"
            self.prev = self.add(
                Task(
                    f"{label}:{self._name(u)}[{start}:{stop}]",
                    COMPUTE,
                    direction,
                    deps=deps,
                    rows=(start, stop),
                    direction=direction,
                )
            )
            done[u] = self.prev
            if direction == "bwd":
                self.runs_left[u] -= 1
                if self.runs_left[u] == 0 and self.sync:  # the unit's last backward run: its gradients are complete
                    self.reduce(u, self.prev)

    def iteration(self) -> None:
        """Every micro-step's forward and backward, then the optimizer step."""
        config, unit_bytes = self.config, self.unit_bytes
        # Gradient accumulation: FSDP2's set_requires_gradient_sync(False) skips the gradient
        # reduction on all but the last micro-step; parameters are still gathered each time.
        for micro in range(self.workload.grad_accumulation):
            self.sync = micro == self.workload.grad_accumulation - 1
            self.hooked.clear()  # the hooks run again every micro-step
            self.runs_left = [0] * len(self.units.units)
            for u, _, _ in self.runs:
                self.runs_left[u] += 1
            # Every unit is unsharded before its forward (by an all-gather, or by a local copy
            # when the shard group has one rank).
            # Prefetch needs a stream to gather on while the compute runs; blocking collectives
            # gather each unit when it is reached.
            self.schedule(
                self.runs,
                "fwd",
                lambda u: unit_bytes[u] > 0,
                self.limit if config.forward_prefetch and not self.blocking else 1,
            )
            # Backward: resharded units are gathered again; the root kept its parameters
            # (unless resharded too).
            self.schedule(
                list(reversed(self.runs)),
                "bwd",
                lambda u: self.reshard and unit_bytes[u] > 0 and (u != 0 or self.reshard_root),
                min(2, self.limit) if config.backward_prefetch == "pre" and not self.blocking else 1,
            )
        opt_deps = ((self.prev,) if self.prev is not None else ()) + (
            (self.reduce_tasks[-1],) if self.reduce_tasks else ()
        )
        local_bytes = self.workload.param_bytes / self.shard_size
        self.add(
            optimizer_task(
                self.workload.optimizer,
                local_bytes,
                len(self.workload.table.params),
                opt_deps,
                foreach=uses_foreach(self.cluster),
            )
        )

    def plan(self) -> SpmdPlan:
        self.iteration()
        unit_bytes = self.unit_bytes
        return SpmdPlan(
            strategy=f"fsdp-{self.sharding}",
            family="fsdp",
            tasks=tuple(self.tasks),
            groups=self.groups,
            world_size=self.world,
            data_parallel=self.world,
            notes=(self.units.note,) + self.host.refault_notes(sum(t.refaults for t in self.tasks)),
            facts=FSDPFacts(
                units=len(self.units.units),
                wrap=self.config.wrap,
                cpu_offload=self.config.cpu_offload,
                unit_bytes=tuple(unit_bytes),
                shard_size=self.shard_size,
                replicas=self.replicas,
                reshard_after_forward=self.reshard,
                reshard_root=self.reshard_root,
                blocking_collectives=self.blocking,
                all_gather_elem_bytes=self.ag_elem,
                largest_unit_bytes=max(unit_bytes) if unit_bytes else 0,
                root_unit_bytes=unit_bytes[0] if unit_bytes else 0,
            ),
        )


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
