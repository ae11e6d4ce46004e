"""simdl's timeline peak next to PyTorch's trackers' peaks, for the tests and the report.

Sources on each side: simdl = :func:`simdl.memory.timeline.build_timeline` on the shipped
workload table (no torch); PyTorch = :mod:`simdl.memory.reference` (MemTracker /
FSDPMemTracker under FakeTensorMode, computed here). Both count bytes of live storages
without the caching allocator's 512-byte rounding.

Category comparison: simdl files a parameter's gradient as ``grads`` once AccumulateGrad
holds it, as MemTracker does; FSDPMemTracker files autograd's *unsharded* gradients as
``Temp`` until the post-backward hook relabels (and frees) them, so for FSDP ``grads``
and ``temporaries`` are compared as one. A category counts as matching when it is
within 5% of PyTorch's, or within 1% of the peak (which decides small categories).
"""

from __future__ import annotations

from dataclasses import dataclass

PEAK_TOLERANCE = 0.03
CATEGORY_TOLERANCE = 0.05
SMALL_CATEGORY = 0.01  # of the peak: categories under ~20% of it are judged on this


@dataclass
class Comparison:
    label: str
    ours: float
    ref: float
    ours_bd: dict
    ref_bd: dict

    @property
    def error(self) -> float:
        return self.ours / self.ref - 1

    def category_errors(self) -> dict[str, tuple[float, bool]]:
        """category -> (relative error, within tolerance)."""
        keys = set(self.ours_bd) | set(self.ref_bd)
        out = {}
        for k in sorted(keys):
            a, b = self.ours_bd.get(k, 0.0), self.ref_bd.get(k, 0.0)
            rel = (a - b) / b if b else (0.0 if a == 0 else float("inf"))
            ok = abs(a - b) <= max(CATEGORY_TOLERANCE * b, SMALL_CATEGORY * self.ref)
            out[k] = (rel, ok)
        return out


def _workload(model, dataset, batch, optimizer, ac=False):
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    table = load_workload(model, dataset=dataset)
    return table, Workload(table=table, batch_size=batch, optimizer=optimizer, activation_checkpointing=ac)


def compare_single(model: str, batch: int, optimizer: str, dataset: str = "cifar10", ac: bool = False) -> Comparison:
    """simdl's DDP rank (1 GPU: plain training) vs MemTracker."""
    from simdl.cluster import allocate, load_cluster
    from simdl.memory.reference import memtracker_step
    from simdl.memory.rowtree import block_names
    from simdl.memory.timeline import MemoryOptions, build_timeline
    from simdl.strategies import StrategyConfig, build_plan

    table, wl = _workload(model, dataset, batch, optimizer, ac)
    plan = build_plan(wl, allocate(load_cluster("a100-80gb-nvlink"), 1), StrategyConfig("ddp"))
    ours, bd, _ = build_timeline(wl, plan, MemoryOptions(activation_checkpointing=ac)).peak()
    ref = memtracker_step(
        model,
        table.input_shape,
        table.num_classes,
        batch,
        optimizer,
        checkpoint_blocks=block_names(table) if ac else None,
    )
    label = f"{model} b={batch} {optimizer}" + (" +AC" if ac else "")
    return Comparison(label, ours, ref.peak_bytes, bd, ref.breakdown)


def compare_fsdp(
    model: str, batch: int, optimizer: str, world: int = 4, sharding: str = "full", dataset: str = "cifar10"
) -> Comparison:
    """simdl's FSDP rank vs FSDPMemTracker on rank 0 of ``world`` fake ranks (hybrid: 2 replicas;
    none: ``world`` replicas of one shard, FSDP2's stand-in for NO_SHARD)."""
    from simdl.cluster import allocate, load_cluster
    from simdl.memory.reference import fsdp_memtracker_step
    from simdl.memory.timeline import build_timeline
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.strategies.fsdp_units import fsdp_units

    table, wl = _workload(model, dataset, batch, optimizer)
    hybrid = sharding == "hybrid"
    alloc = allocate(load_cluster("a100-40gb-2node" if hybrid else "a100-80gb-nvlink"), world, 2 if hybrid else None)
    # fsdp_memtracker_step gives the root reshard_after_forward explicitly, as validate does.
    plan = build_plan(wl, alloc, StrategyConfig("fsdp", sharding=sharding, reshard_root=True))
    ours, bd, _ = build_timeline(wl, plan).peak()
    units = [u.name for u in fsdp_units(table, "block").units[1:]]
    replicas = 2 if hybrid else world if sharding == "none" else 1
    ref = fsdp_memtracker_step(
        model,
        table.input_shape,
        table.num_classes,
        batch,
        world,
        units,
        optimizer,
        sharding=sharding,
        replicas=replicas,
    )
    bd, rbd = dict(bd), dict(ref.breakdown)
    for d in (bd, rbd):
        d["grads+temporaries"] = d.pop("grads", 0.0) + d.pop("temporaries", 0.0)
    return Comparison(f"{model} b={batch} {optimizer} fsdp-{sharding} x{world}", ours, ref.peak_bytes, bd, rbd)
