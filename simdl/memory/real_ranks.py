"""Real data-parallel CPU steps for the memory checks: DDP or FSDP2 over gloo, measured.

``world`` spawned processes train a real model (built as :mod:`simdl.memory.reference`
builds it) and report each steady step's peak live bytes from torch.profiler's allocator
events, with the unreported frees repaired (:mod:`simdl.memory.measured`).
"""

from __future__ import annotations

from ..errors import unknown
from .reference import _build_real, _optimizer, _step

# Untracked steps before the measured ones in the real multi-process runs: as many as
# validate/train.py's warm-up; DDP rebuilds its buckets in gradient-ready order during the
# second iteration (Reducer::rebuild_buckets), allocating new buckets beside the old.
REAL_WARMUP_STEPS = 2
_STEP_MARK = "simdl::measured_step"


def _wrap_ddp(model, world: int, unit_names: list[str]):
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def _wrap_fsdp2(replicas: int, reshard: bool):
    """FSDP2 as validate/train.py wraps: every unit, then the root; ``replicas`` > 1 is HSDP
    (``none`` sharding: one rank per shard, every rank a replica)."""

    def wrap(model, world: int, unit_names: list[str]):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = (
            init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
            if replicas > 1
            else init_device_mesh("cpu", (world,))
        )
        for name in unit_names:
            fully_shard(model.get_submodule(name), mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        return model

    return wrap


# How real_fsdp_step wraps the model, by its ``sharding`` argument.
_WRAPS = {
    "ddp": _wrap_ddp,
    "full": _wrap_fsdp2(1, True),
    "grad_op": _wrap_fsdp2(1, False),
    "none": _wrap_fsdp2(2, False),
}


def _fsdp_worker(rank: int, world: int, port: int, args: tuple, out) -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from .measured import allocations, live_curve, peak_between

    model_name, input_shape, num_classes, batch, optimizer, unit_names, sharding, steps = args
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        # As validate/measure.py: the profiler starts before the model exists, so the live
        # bytes of its allocations are everything the rank holds (DDP's buckets included).
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            torch.manual_seed(0)
            model, shape = _build_real(model_name, input_shape, num_classes)
            model = _WRAPS[sharding](model, world, unit_names)
            opt = _optimizer(optimizer, model.parameters(), foreach=False)
            for _ in range(REAL_WARMUP_STEPS):
                _step(model, opt, shape, batch, num_classes, "fp32")
            for _ in range(steps):
                with record_function(_STEP_MARK):
                    _step(model, opt, shape, batch, num_classes, "fp32")
        res = prof.profiler.kineto_results
        t, live = live_curve(allocations(res, step_markers=(_STEP_MARK,)))
        marks = sorted((e.start_ns(), e.end_ns()) for e in res.events() if e.name() == _STEP_MARK)
        # Each steady step on its own: with the unreported frees repaired
        # (simdl.memory.measured) they agree; the largest is the rank's peak.
        out.put((rank, [peak_between(t, live, a, b)[1] for a, b in marks]))
    finally:
        dist.destroy_process_group()


def real_fsdp_step(
    model_name: str,
    input_shape,
    num_classes: int,
    batch: int,
    unit_names: list[str],
    optimizer: str = "momentum",
    world: int = 2,
    sharding: str = "full",
    steps: int = 3,
) -> list[list[float]]:
    """Peak allocated bytes per rank and step of real data-parallel CPU steps: ``world``
    processes over gloo, FSDP2 (``sharding`` full / grad_op / none, wrapped as
    validate/train.py wraps) or DDP (``sharding="ddp"``). Returns ``[rank][step]``."""
    import socket

    import torch.multiprocessing as mp

    if sharding not in _WRAPS:
        raise unknown("sharding", sharding, tuple(_WRAPS))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    args = (model_name, tuple(input_shape), num_classes, batch, optimizer, list(unit_names), sharding, steps)
    procs = [ctx.Process(target=_fsdp_worker, args=(r, world, port, args, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return [results[r] for r in range(world)]
