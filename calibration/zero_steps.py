"""DeepSpeed ZeRO steps of the strategies stage (calibration/strategies.py ``--zero``).

``simdl calibrate`` passes ``--zero`` where ``import deepspeed`` works in the interpreter that
runs it (simdl.calibrate.deepspeed_check); the stage then trains each ``--models`` entry under
``zero2``, ``zero3`` and, outside ``--quick``, ``zero1`` as well (:data:`QUICK_ZERO_VARIANTS`): ``deepspeed.initialize`` on the process group the stage already
made (DeepSpeed's TorchBackend keeps an initialised torch.distributed group), the model as built
for the other variants, a client SGD with momentum (DeepSpeed's own optimizers are compiled
ops), reduce and allgather buckets of simdl.strategies.zero.CALIBRATION_BUCKET_ELEMENTS, every
other zero_optimization key DeepSpeed's default. On CPU ranks ``DS_ACCELERATOR=cpu`` selects
DeepSpeed's CPU accelerator (gloo without oneCCL's bindings), as validate/deepspeed_worker.py
runs it. Timed like the other variants: ``--iters`` steps after ``--warmup`` untimed ones.
`simdl calibrate` fits DeepSpeed's host time per parameter and per module call to the stage-2
and stage-3 steps, and stage 1's extra pass per parameter to the stage-1 minus stage-2 step of
each model and batch (simdl.calibrate.zero_fit).
"""

from __future__ import annotations

import os
import time

import torch
import torch.nn.functional as F

ZERO_VARIANTS = ("zero2", "zero3", "zero1")
# --quick leaves zero1 out: its cost (stage 1's extra pass, 64 us per parameter on cpu-local's
# host: benchmarks/zero1_vs_zero2_cpu.py) is 4-7 ms of a ResNet step, under the spread of a
# 12-step median on a shared host, and the quick stage already runs out of its budget share
# (simdl.calibrate.run.BUDGET_SHARE) before its last models. zero1 comes last: a stage cut by
# its budget loses it first.
QUICK_ZERO_VARIANTS = ("zero2", "zero3")


def import_deepspeed(ctx):
    """deepspeed, with its CPU accelerator on CPU ranks (deepspeed/accelerator/real_accelerator.py
    reads DS_ACCELERATOR; cpu_accelerator.py reads LOCAL_SIZE for its device count)."""
    if not ctx.is_cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        os.environ.setdefault("LOCAL_SIZE", str(ctx.local_world))
    import deepspeed

    return deepspeed


def ds_config(stage: int, batch: int) -> dict:
    from simdl.strategies.zero import CALIBRATION_BUCKET_ELEMENTS

    return {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10**9,
        # engine.py _do_optimizer_sanity_check (DeepSpeed 0.19.8) refuses a client optimizer that
        # is_zero_supported_optimizer does not list (SGD) unless this is set; every other variant steps with SGD.
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {
            "stage": stage,
            "reduce_bucket_size": CALIBRATION_BUCKET_ELEMENTS,
            "allgather_bucket_size": CALIBRATION_BUCKET_ELEMENTS,
        },
    }


def zero_variant(ctx, variant, model, shape, classes, batch, iters, warmup):
    """Step times of DeepSpeed ZeRO training (``zero1`` / ``zero2`` / ``zero3``)."""
    deepspeed = import_deepspeed(ctx)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=ds_config(int(variant[-1]), batch))
    x = torch.randn(batch, *shape, device=ctx.device)
    y = torch.randint(0, classes, (batch,), device=ctx.device)
    times, warm = [], []
    for i in range(warmup + iters):
        ctx.sync()
        t0 = time.perf_counter()
        engine.backward(F.cross_entropy(engine(x), y))
        engine.step()
        ctx.sync()
        (times if i >= warmup else warm).append(time.perf_counter() - t0)
    extra = {
        "warmup_times_s": warm,
        "deepspeed_version": deepspeed.__version__,
        "optimizer_class": type(engine.optimizer).__name__,
    }
    note = f"DeepSpeed {deepspeed.__version__} ZeRO-{variant[-1]}, client SGD momentum"
    if hasattr(engine, "destroy"):  # removes stage 3's module hooks (engine.py)
        engine.destroy()
    return times, note, [], extra
