"""Probe (not part of calibration): what of DeepSpeed ZeRO-3's initialisation is still allocated,
by torch.profiler's record, at a training step's peak on CPU ranks, and why.

    DS_ACCELERATOR=cpu LOCAL_SIZE=2 OMP_NUM_THREADS=1 PYTHONPATH=<deepspeed's site-packages>:. \\
        torchrun --standalone --nproc-per-node=2 benchmarks/zero3_init_gathers_cpu.py MODEL [--gc]

First checks, on rank 0, whether torch.profiler records a free made on another thread (a 9 MiB
tensor whose last reference a Python thread drops). Then builds MODEL (CIFAR-10 shape, batch
16 per rank) under ZeRO-3 with validate/deepspeed_cpu.py's ds_config (5e7-element buckets,
fp32, a client torch Adam), optionally runs ``gc.collect()`` once after ``deepspeed.initialize``,
trains 3 steps under torch.profiler (rank 0, memory only) and prints the live allocator bytes at
the peak of step 3, the bytes allocated before that step and live then by the record, and which
of them the per-parameter all-gathers of the initialisation made (partition_parameters.py
``_allgather_params_sequential``, each marked here).

Why: the stage-3 rows of validate/README. DeepSpeed 0.19.8 gathers every trainable parameter
whole once at initialisation (stage3.py create_reduce_and_remove_grad_hooks: ``param.all_gather()``
then ``param.partition()``), one flat tensor per parameter through a blocking gloo
all_gather_into_tensor; no sequential gather runs in a training step (the coordinator's fetches
are coalesced). torch.profiler does not record a free made on another thread: the check's
tensor stays live in the record. Run on the 2-core Intel Xeon VM, ResNet-34, six runs (other
jobs sharing the cores):

    run                 peak MiB   live from the init gathers MiB (never freed in the record)
    without --gc        592.1      9.0
    without --gc        599.1      9.1
    with --gc           576.4      0.0
    with --gc           576.2      2.3
    with --gc           603.2      20.3 (9.0 + 9.0 + 2.3)
    without --gc        594.5      20.4 (9.0 + 9.0 + 2.3 + 0.1)

A collection changes nothing consistently; what varies is how many of the initialisation's
gathered tensors the record never sees freed, which fits their last reference being dropped on
one of gloo's threads in some runs and not others. The 27.3 MiB of such gathers that an earlier
profile found live at ResNet-34's peak is this, not memory of the step.
"""

from __future__ import annotations

import gc
import sys


def _other_thread_free_recorded() -> bool:
    """Whether torch.profiler's memory record sees a tensor freed on another thread."""
    import threading

    import torch
    from torch.profiler import ProfilerActivity, profile

    from simdl.memory.measured import allocations

    box = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        box.append(torch.ones(9 * 2**20, dtype=torch.uint8))
        worker = threading.Thread(target=box.clear)  # the last reference dies on this thread
        worker.start()
        worker.join()
    big = [
        a
        for a in allocations(prof.profiler.kineto_results, step_markers=(), collective_input_ops=())
        if a.nbytes >= 2**20
    ]
    return bool(big) and all(a.end_ns is not None for a in big)


def main(argv: list[str]) -> int:
    import deepspeed
    import torch
    import torch.nn.functional as F
    from deepspeed.runtime.zero import partition_parameters as pp
    from torch.profiler import ProfilerActivity, profile, record_function

    from simdl.memory.measured import allocations, live_curve
    from simdl.workload.zoo import build_adapted

    model_name, collect = argv[0], "--gc" in argv
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    if rank == 0:
        print(f"a free on another thread is {'recorded' if _other_thread_free_recorded() else 'not recorded'}")
    sequential = pp.Init._allgather_params_sequential

    def marked(self, param_list, hierarchy=0):
        with record_function("INIT_GATHER"):
            return sequential(self, param_list, hierarchy)

    pp.Init._allgather_params_sequential = marked
    zero = {"stage": 3, "reduce_bucket_size": 50_000_000, "allgather_bucket_size": 50_000_000}
    cfg = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "zero_optimization": zero}
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True) if rank == 0 else None
    if prof:
        prof.start()
    torch.manual_seed(0)
    model, _, _ = build_adapted(model_name, (3, 32, 32), 10, device="cpu")
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.Adam(model.parameters()), config=cfg)
    if collect:
        print(f"rank {rank}: gc.collect() found {gc.collect()} unreachable objects")
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    for step in range(3):
        with record_function(f"STEP{step}"):
            loss = F.cross_entropy(engine(x), y)
            engine.backward(loss)
            engine.step()
    if not prof:
        return 0
    prof.stop()
    res = prof.profiler.kineto_results
    spans: dict[str, list] = {}
    for ev in res.events():
        if ev.name() in ("INIT_GATHER", "STEP2"):
            spans.setdefault(ev.name(), []).append((ev.start_ns(), ev.start_ns() + ev.duration_ns()))
    t0, t1 = spans["STEP2"][0]
    allocs = allocations(res, step_markers=("STEP2",), collective_input_ops=())
    t, live = live_curve(allocs)
    inside = (t >= t0) & (t <= t1)
    k = int(live[inside].argmax())
    tp = int(t[inside][k])
    held = [a for a in allocs if a.start_ns <= tp and (a.end_ns is None or a.end_ns > tp)]
    init = [a for a in held if any(s <= a.start_ns <= e for s, e in spans.get("INIT_GATHER", []))]
    mib = 2.0**20
    print(f"peak {live[inside][k] / mib:.1f} MiB at {(tp - t0) / 1e6:.1f} ms of the step ({(t1 - t0) / 1e6:.1f} ms)")
    print(f"live from before the step: {sum(a.nbytes for a in held if a.start_ns < t0) / mib:.2f} MiB")
    print(f"live from the initialisation's gathers: {sum(a.nbytes for a in init) / mib:.2f} MiB")
    for a in sorted(init, key=lambda a: -a.nbytes)[:5]:
        print(f"  {a.nbytes / mib:.2f} MiB, freed {'never' if a.end_ns is None else 'later'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
