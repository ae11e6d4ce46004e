"""The DeepSpeed training worker, launched by torchrun: one process per rank, on CPU.

``DS_ACCELERATOR=cpu torchrun --nproc-per-node N -m validate.deepspeed_worker --spec SPEC.json --out DIR``

Each rank writes ``DIR/rank<R>.json`` with what it measured, by the rules of validate/measure.py
(the median steady step by ``time.perf_counter``; the peak of live allocator bytes from
torch.profiler ``profile_memory``, started before the model is built; the process's RSS
high-water mark).

The loop: DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``; deepspeed/accelerator/
cpu_accelerator.py names ``gloo`` as its communication backend when oneccl_bindings_for_pytorch
is not installed), ``deepspeed.init_distributed(dist_backend="gloo")``, the zoo's model adapted to
the dataset (same initial weights on every rank), generated data (validate/data.py) through a
``DataLoader`` with a ``DistributedSampler`` and no loader processes, cross-entropy,
``engine.backward`` and ``engine.step``. The optimizer is a client ``torch.optim.Adam`` handed to
``deepspeed.initialize``: DeepSpeed's own Adam (FusedAdam, or DeepSpeedCPUAdam) is a compiled op,
and the ops are left unbuilt. The ZeRO stage and its options come from the spec's ``ds_config``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from . import data as vdata
from . import measure


def _rank_record(spec: dict, deepspeed) -> dict:
    import torch.distributed as dist

    from .train import _loader, _null, _profiler

    rank, world = dist.get_rank(), dist.get_world_size()
    rec: dict = {
        "rank": rank,
        "world": world,
        "device": "cpu",
        "backend": dist.get_backend(),
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "stage": spec["ds_config"]["zero_optimization"]["stage"],
    }
    from simdl.workload.zoo import build_adapted

    shape = tuple(vdata.SHAPES[spec["dataset"]])
    batch, steps = spec["ds_config"]["train_micro_batch_size_per_gpu"], spec["steps"]
    trx, tr_y, _, _, desc = vdata.load(spec["dataset"], "generated", batch * world * steps, world, shape)
    loader, _ = _loader(trx, tr_y, batch, rank, world, shuffle=False)
    rec["data"] = desc

    prof = _profiler(torch.device("cpu"))
    prof.start()  # before the model exists: the live bytes start at zero
    torch.manual_seed(0)
    model, _, _ = build_adapted(spec["model"], shape, 10, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=spec.get("lr", 1e-3))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=spec["ds_config"])
    rec["optimizer_class"] = type(engine.optimizer).__name__
    timer = measure.StepTimer()
    warmup = spec["warmup_steps"]
    last_profiled = warmup + measure.MEMORY_STEPS - 1
    losses, profiling, profiled_s = [], True, None
    for step, (x, y) in enumerate(loader):
        mark = (
            measure.MEASURED_STEP if step == warmup else measure.MEMORY_STEP if warmup < step <= last_profiled else None
        )
        timer.start()
        with record_function(mark) if mark else _null():
            loss = F.cross_entropy(engine(x), y)
            engine.backward(loss)
            engine.step()
        dt = timer.stop()
        profiled_s = dt if step == warmup else profiled_s
        if profiling and step >= last_profiled:
            prof.stop()
            profiling = False
        losses.append(float(loss.detach()))
    if profiling:
        prof.stop()
    if profiled_s is None:
        raise RuntimeError(f"run too short: {len(timer.times)} steps, the profiled step is step {warmup}")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rec.update(
        step_times_s=timer.times,
        steady_step_times_s=timer.times[last_profiled + 1 :],
        profiled_step_s=profiled_s,
        losses=losses,
        peak_rss_bytes=measure.peak_rss_bytes(),
        cpu_user_s=ru.ru_utime,
        cpu_system_s=ru.ru_stime,
        **_analyse(prof, world),
    )
    rec.pop("memory_timeline", None)
    return rec


def _analyse(prof, world: int) -> dict:
    """validate.measure's figures, with every flatten_dense_tensors output kept live while it is
    open: the ZeRO-1/2 optimizer flattens each parameter group into one buffer that the model's
    parameters become views of, for the whole run (``bit16_groups_flat``,
    deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8), and no DDP ``broadcast_coalesced`` (the
    case simdl.memory.measured's collective-input rule is for) runs here."""
    from simdl.memory.measured import allocations

    res = prof.profiler.kineto_results
    allocs = allocations(res, step_markers=(measure.MEASURED_STEP, measure.MEMORY_STEP), collective_input_ops=())
    return measure.analyse_profile(res.events(), world, allocs=allocs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validate.deepspeed_worker")
    p.add_argument("--spec", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    spec = json.loads(Path(a.spec).read_text())
    out = Path(a.out)
    rank = int(os.environ.get("RANK", 0))
    try:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
        rec = _rank_record(spec, deepspeed)
        tmp = out / f"rank{rank}.json.tmp"
        tmp.write_text(json.dumps(rec, default=float))
        tmp.replace(out / f"rank{rank}.json")
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # the driver records the rank's last exception
        (out / f"rank{rank}.error.txt").write_text(f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
