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
message size). The plan marks itself (``details["blocking_collectives"]``) and
:meth:`simdl.analytic.costs.CommCosts.for_plan` prices it accordingly. Blocking was chosen
on the calibration's own leave-one-model-out errors; with the earlier single load factor it
fitted worse (2 ranks: max 20.5% against 15.4% overlapped).

A profile may also charge FSDP2's own host time per unit and step
(``efficiency.fsdp_unit_overhead_us``): its forward/backward hooks are Python on the
training thread. On CPU ranks the logged calls left about as much time outside the calls
with one collective per unit (none) as with three (full), so it is a cost per unit, not per
call; it is one ``fsdp_hooks`` task before each unit's first forward run. Chosen on the
calibration's own leave-one-model-out errors (cpu-epyc: mean 7.8 % with the term against 9.9 %
without, max 22.3 % against 21.6 %, both maxima the same wide_resnet101_2 grad_op step).
"""

from __future__ import annotations

from ..cluster import Cluster
from ..cluster.allocator import mmap_threshold, trim_threshold
from ..errors import SimdlError
from ..workload.workload import Workload
from .config import StrategyConfig
from .fsdp_units import fsdp_units
from .optimizer_step import optimizer_task, uses_foreach
from .plan import COMM, COMM_REDUCE, COMPUTE, Group, SpmdPlan, Task
from ..memory.rowtree import add_recompute


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
    """FSDP2's collectives block the training thread: devices without streams (CPU, gloo)."""
    return cluster.spec.gpu.is_cpu


def _refault_limit(cluster: Cluster, grad_bytes: list[float]) -> float:
    """Bytes up to which a sharded gradient (a reduce output, one per unit) faults in again
    every step on a host whose memory comes from glibc's heap; 0 where none does.

    FSDP2 allocates each unit's reduce output in backward (foreach_reduce) and it stays the
    unit's gradient until ``zero_grad(set_to_none=True)``. Allocated last, they take the top
    of the heap; freed together at zero_grad they leave that much free at the top, and glibc
    trims the heap when it reaches the trim threshold (simdl.cluster.allocator), so the next
    backward gets the pages from the OS again. Measured (benchmarks/fsdp2_heap_trim_cpu.py):
    ViT-B/32 FSDP none, 2 ranks, the heap grows 28-57 MB at each unit's backward, every byte
    a page fault, and zero_grad trims 510 MB. Reduce outputs above the mmap threshold are
    mapped fresh anyway (their ``allocs``); below the trim threshold nothing is trimmed."""
    trim = trim_threshold(cluster)
    if trim is None or sum(grad_bytes) < trim:
        return 0.0
    return mmap_threshold(cluster)  # larger ones are mapped: simdl.analytic.costs.mapped_bytes


def _refault_note(tasks: list[Task]) -> tuple[str, ...]:
    """A warning where the plan prices gradients that glibc's heap trimming faults in again:
    the charge (bytes x the idle fill rate) under-prices what trimming cost on the Zen 4 and
    the cost moves with the heap's history (benchmarks/fsdp2_refault_cost_cpu.py on the Zen 4:
    1.9-7x the charge; the same ConvNeXt-L step 6.06 s in one run, 8.43 s in another)."""
    refault = sum(t.refaults for t in tasks)
    if not refault:
        return ()
    return (f"glibc heap trimming: {refault / 1e6:.0f} MB of gradients per rank fault in again every step; "
            "measured on CPU ranks it cost 1.9-7x the price used here and varied between runs "
            "(benchmarks/fsdp2_refault_cost_cpu.py); ranks run with MALLOC_TRIM_THRESHOLD_ above the "
            "step's heap (and a profile with host.trim_threshold_MiB) do not pay it",)


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> SpmdPlan:
    table = workload.table
    sharding = config.sharding
    world = cluster.gpus
    world_scope = "world" if cluster.nodes > 1 else "intra"
    shard_scope = replicate_scope = world_scope
    if sharding == "hybrid":
        G = cluster.gpus_per_node
        shard_size = config.shard_group or G
        if shard_size * cluster.nodes != world and config.shard_group is None:
            raise SimdlError(f"hybrid sharding needs the same GPU count on every node; got {world} GPUs on {cluster.nodes} nodes")
        if world % shard_size or G % shard_size:
            raise SimdlError(f"shard group {shard_size} must divide the GPUs of a node ({G}) and the world ({world}): "
                             "FSDP2's mesh puts each shard group's ranks on one node")
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
    units = fsdp_units(table, config.wrap)
    runs = _runs(units.row_unit)
    elem = 4  # fp32 parameters and gradients
    # FSDP MixedPrecisionPolicy(param_dtype=bf16/fp16) all-gathers low-precision params;
    # gradients are reduced in fp32 (reduce_dtype=fp32, as torchtitan's default).
    ag_elem = 2 if workload.mixed_precision else elem
    unit_bytes = [u.numel * elem for u in units.units]
    reshard = sharding in ("full", "hybrid")
    reshard_root = reshard and config.reshard_root

    limit = config.max_inflight_all_gathers
    blocking = collectives_block(cluster)
    refault_limit = _refault_limit(cluster, [b / shard_size for b in unit_bytes])
    # FSDP2's hooks per unit per step (efficiency.fsdp_unit_overhead_us; calibrated CPU profiles).
    hooks = cluster.spec.efficiency.fsdp_unit_overhead
    unit_host_s = hooks.value if hooks is not None else 0.0
    hooked: set[int] = set()
    tasks: list[Task] = []
    reduce_tasks: list[int] = []
    prev: int | None = None
    runs_left: list[int] = []
    sync = True

    def add(task: Task) -> int:
        tasks.append(task)
        return len(tasks) - 1

    def unsharded_allocs(u: int) -> tuple[float, ...]:
        # alloc_all_gather_outputs: one unsharded tensor per parameter (_fsdp_param.py)
        return tuple(n * ag_elem for n in units.units[u].param_numels)

    def all_gather(u: int, deps: tuple[int, ...], phase: str) -> int:
        if shard_size == 1:
            return local_unshard(u, deps, phase)
        unit = units.units[u]
        name = unit.name or "root"
        full = unit.numel * ag_elem
        # foreach_all_gather (_fsdp_collectives.py): the shards are copied into the flat
        # all-gather buffer (all_gather_copy_in, which allocates the whole output) on the
        # copy-in stream -- the compute stream on CPU, where there are no side streams.
        cin = add(Task(f"copy_in:{phase}:{name}", COMPUTE, phase, deps=deps,
                       bytes=2.0 * full / shard_size, kernels=1, allocs=(full,)))
        t = add(Task(f"all_gather:{phase}:{name}", COMM, "comm", deps=(cin,),
                     collective="all_gather", comm_bytes=full, group="shard"))
        # FSDP2 copies the gathered flat buffer out into the unsharded parameters
        # (foreach_all_gather_copy_out) on the compute stream: one read and one write.
        return add(Task(f"copy_out:{phase}:{name}", COMPUTE, phase, deps=(t,),
                        bytes=2.0 * full, kernels=1, allocs=unsharded_allocs(u)))

    def local_unshard(u: int, deps: tuple[int, ...], phase: str) -> int:
        # Shard size 1 (NO_SHARD as HSDP): FSDPParamGroup.wait_for_unshard copies each
        # sharded parameter into a freshly allocated unsharded one, no collective.
        unit = units.units[u]
        return add(Task(f"copy_out:{phase}:{unit.name or 'root'}", COMPUTE, phase, deps=deps,
                        bytes=2.0 * unit.numel * ag_elem, kernels=unit.n_tensors, allocs=unsharded_allocs(u)))

    def reduce(u: int, after: int) -> None:
        nonlocal prev
        if unit_bytes[u] == 0 or world == 1:
            return
        name = units.units[u].name or "root"
        # foreach_reduce (_fsdp_collectives.py): the unsharded gradients are copied into one
        # flat reduce-scatter input (foreach_reduce_scatter_copy_in, chunk_cat) on the
        # compute stream, and the reduce output (a shard) is allocated.
        out = unit_bytes[u] / shard_size
        cin = add(Task(f"rs_copy_in:{name}", COMPUTE, "bwd", deps=(after,), bytes=2.0 * unit_bytes[u], kernels=1,
                       allocs=(unit_bytes[u], out), refaults=out if out <= refault_limit else 0.0))
        if sharding == "none":
            # Shard group of one: reduce_output.copy_(reduce_scatter_input), then the
            # all-reduce over the replicate group.
            cp = add(Task(f"rs_copy:{name}", COMPUTE, "bwd", deps=(cin,), bytes=2.0 * unit_bytes[u], kernels=1))
            reduce_tasks.append(add(Task(f"all_reduce:{name}", COMM_REDUCE, "comm", deps=(cp,),
                                         collective="all_reduce", comm_bytes=unit_bytes[u], group="replicate")))
            if blocking:  # the next unit's backward starts when the all-reduce has returned
                prev = reduce_tasks[-1]
            return
        rs = add(Task(f"reduce_scatter:{name}", COMM_REDUCE, "comm", deps=(cin,),
                      collective="reduce_scatter", comm_bytes=unit_bytes[u], group="shard"))
        if replicas > 1:
            rs = add(Task(f"all_reduce:{name}", COMM_REDUCE, "comm", deps=(rs,), collective="all_reduce",
                          comm_bytes=unit_bytes[u] / shard_size, group="replicate"))
        reduce_tasks.append(rs)
        if blocking:
            prev = rs

    def schedule(run_list: list[tuple[int, int, int]], direction: str, gather, ahead: int) -> None:
        """Compute runs in order; all-gathers of units for which ``gather(u)`` holds are
        issued up to ``ahead`` units early (1 = no prefetch: issued when the unit is reached).

        The all-gather of the unit ``limit`` places after a non-root unit waits for that
        unit's compute to finish (its unsharded memory is freed then); the root is never
        resharded, so it holds no slot.
        """
        nonlocal prev
        order: list[int] = []
        for u, _, _ in run_list:
            if u not in order and gather(u):
                order.append(u)
        pos = {u: i for i, u in enumerate(order)}
        gathered: dict[int, int] = {}
        done: dict[int, int] = {}
        for u, start, stop in run_list:
            if unit_host_s and direction == "fwd" and u not in hooked:
                # Charged once per unit and step, before its first forward run (its hooks
                # run on the training thread, between the unit's collectives and compute).
                hooked.add(u)
                prev = add(Task(f"fsdp_hooks:{units.units[u].name or 'root'}", COMPUTE, "fwd",
                                deps=(prev,) if prev is not None else (), host_s=unit_host_s))
            if u in pos and u not in gathered:
                for j in range(pos[u], min(pos[u] + ahead, len(order))):
                    v = order[j]
                    if v in gathered:
                        continue
                    deps: tuple[int, ...] = (prev,) if (ahead == 1 and prev is not None) else ()
                    slot = j - limit
                    if slot >= 0 and order[slot] != 0 and order[slot] in done:
                        deps += (done[order[slot]],)
                    gathered[v] = all_gather(v, deps, direction)
            deps = ((prev,) if prev is not None else ()) + ((gathered[u],) if u in gathered else ())
            if direction == "bwd":  # activation checkpointing: recompute the unit's blocks first
                deps = add_recompute(workload, add, deps, start, stop)
            label = "forward" if direction == "fwd" else "backward"
            prev = add(Task(f"{label}:{units.units[u].name or 'root'}[{start}:{stop}]", COMPUTE, direction,
                            deps=deps, rows=(start, stop), direction=direction))
            done[u] = prev
            if direction == "bwd":
                runs_left[u] -= 1
                if runs_left[u] == 0 and sync:  # the unit's last backward run: its gradients are complete
                    reduce(u, prev)

    # Gradient accumulation: FSDP2's set_requires_gradient_sync(False) skips the gradient
    # reduction on all but the last micro-step; parameters are still gathered each time.
    for micro in range(workload.grad_accumulation):
        sync = micro == workload.grad_accumulation - 1
        hooked.clear()  # the hooks run again every micro-step
        runs_left = [0] * len(units.units)
        for u, _, _ in runs:
            runs_left[u] += 1
        # Every unit is unsharded before its forward (by an all-gather, or by a local copy
        # when the shard group has one rank).
        # Prefetch needs a stream to gather on while the compute runs; blocking collectives
        # gather each unit when it is reached.
        schedule(runs, "fwd", lambda u: unit_bytes[u] > 0, limit if config.forward_prefetch and not blocking else 1)
        # Backward: resharded units are gathered again; the root kept its parameters
        # (unless resharded too).
        schedule(list(reversed(runs)), "bwd", lambda u: reshard and unit_bytes[u] > 0 and (u != 0 or reshard_root),
                 min(2, limit) if config.backward_prefetch == "pre" and not blocking else 1)

    opt_deps = ((prev,) if prev is not None else ()) + ((reduce_tasks[-1],) if reduce_tasks else ())
    local_bytes = workload.param_bytes / shard_size
    add(optimizer_task(workload.optimizer, local_bytes, len(table.params), opt_deps,
                       foreach=uses_foreach(cluster)))
    return SpmdPlan(
        strategy=f"fsdp-{sharding}",
        tasks=tuple(tasks),
        groups=groups,
        world_size=world,
        data_parallel=world,
        notes=(units.note,) + _refault_note(tasks),
        details={
            "units": len(units.units),
            "wrap": config.wrap,
            "cpu_offload": config.cpu_offload,
            "unit_bytes": unit_bytes,
            "shard_size": shard_size,
            "replicas": replicas,
            "reshard_after_forward": reshard,
            "reshard_root": reshard_root,
            "blocking_collectives": blocking,
            "all_gather_elem_bytes": ag_elem,
            "largest_unit_bytes": max(unit_bytes) if unit_bytes else 0,
            "root_unit_bytes": unit_bytes[0] if unit_bytes else 0,
        },
    )
