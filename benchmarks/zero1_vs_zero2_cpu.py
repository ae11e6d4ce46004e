"""Probe (not part of calibration): where DeepSpeed ZeRO-1 and ZeRO-2 spend a step on CPU ranks.

    DS_ACCELERATOR=cpu LOCAL_SIZE=2 OMP_NUM_THREADS=1 PYTHONPATH=<deepspeed's site-packages>:. \\
        torchrun --standalone --nproc-per-node=2 benchmarks/zero1_vs_zero2_cpu.py STAGE [MODEL] [BATCH] [STEPS]

Trains ``MODEL`` (default resnet18, CIFAR-10 shape, one generated batch of ``BATCH`` = 16 per
rank) for ``STEPS`` (default 10) steps under DeepSpeed's ZeRO ``STAGE`` with the ds_config of
validate/deepspeed_cpu.py (reduce and allgather buckets of 5e7 elements, fp32, a client torch
Adam), and prints rank 0's per-step forward / backward / step milliseconds and minor page
faults (``getrusage`` ``ru_minflt``, 4 KiB pages), with the milliseconds and faults inside the
ZeRO optimizer's methods: reduce_gradients (stage 1's loop after backward), its epilogue,
reduce_ipg_grads, average_tensor (the bucket's all-reduce), process_gradients and
update_hook_state_and_maybe_run_epilogue (the gradient hooks), the per-parameter reduction work
reduce_independent_p_g_buckets_and_remove_grads, copy_grads_in_partition, and the hooks'
count_used_parameters_in_backward.

Why: ``strategies.zero.stage1_loop_overhead_us`` (simdl.cluster.strategy_sections) and
simdl.strategies.zero_plan. DeepSpeed 0.19.8 runs the same per-parameter reduction work in both
stages (stage_1_and_2.py: in stage 2's gradient hooks, in stage 1's reduce_gradients loop after
backward); stage 1 makes one pass more: its hooks fire and reduce nothing, and the loop's own
calls. Run on the 2-core Intel Xeon VM (cpu-local's host), rank 0, other jobs sharing the cores,
each figure the smallest over 12-18 steady steps of a run:

    stage 1, ResNet-18 (62 parameters): loop's own calls 3.9 ms, hooks 0.9 ms, reduction work 19.5-21.0 ms
    stage 1, ResNet-34 (110 parameters): loop's own calls 5.1 ms, hooks 1.5 ms
    stage 2, ResNet-18: reduction work 20.3-22.1 ms (in the hooks)

so 64 us per parameter (least squares through 0 over the two models: 4.8 and 6.6 ms). Minor
faults per step were ~49.8k pages in most steps of both stages (runs differ: 21.8k-50.3k), with
no stage faulting more than the other from run to run. Whole steps, stage 1 - stage 2, smallest
step of 9 alternating run pairs (ResNet-18, batch 16): -110 to +130 ms, median +9 ms.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(acc: dict, obj, name: str) -> None:
    """Wrap ``obj.name`` so that its seconds and faults add up in ``acc[name]``."""
    f = getattr(obj, name)

    def g(*a, **k):
        t, r = time.perf_counter(), _faults()
        out = f(*a, **k)
        s = acc.setdefault(name, [0.0, 0])
        s[0] += time.perf_counter() - t
        s[1] += _faults() - r
        return out

    setattr(obj, name, g)


def main(argv: list[str]) -> int:
    import deepspeed
    import torch
    import torch.nn.functional as F

    from simdl.workload.zoo import build_adapted

    stage = int(argv[0])
    model_name = argv[1] if len(argv) > 1 else "resnet18"
    batch = int(argv[2]) if len(argv) > 2 else 16
    steps = int(argv[3]) if len(argv) > 3 else 10
    deepspeed.init_distributed(dist_backend="gloo")
    zero = {"stage": stage}
    if stage:
        zero.update(reduce_bucket_size=50_000_000, allgather_bucket_size=50_000_000)
    cfg = {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1, "steps_per_print": 10**6}
    torch.manual_seed(0)
    model, _, _ = build_adapted(model_name, (3, 32, 32), 10, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config={**cfg, "zero_optimization": zero})
    acc: dict = {}
    for name in (
        "reduce_gradients",
        "overlapping_partition_gradients_reduce_epilogue",
        "reduce_ipg_grads",
        "average_tensor",
        "process_gradients",
        "update_hook_state_and_maybe_run_epilogue",
        "reduce_independent_p_g_buckets_and_remove_grads",
        "copy_grads_in_partition",
    ):
        if hasattr(engine.optimizer, name):
            _timed(acc, engine.optimizer, name)
    zero_module = sys.modules[type(engine.optimizer).__module__]
    if hasattr(zero_module, "count_used_parameters_in_backward"):  # called from each gradient hook
        _timed(acc, zero_module, "count_used_parameters_in_backward")
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    rows = []
    for _ in range(steps):
        acc.clear()
        f0, t0 = _faults(), time.perf_counter()
        loss = F.cross_entropy(engine(x), y)
        f1, t1 = _faults(), time.perf_counter()
        engine.backward(loss)
        f2, t2 = _faults(), time.perf_counter()
        engine.step()
        f3, t3 = _faults(), time.perf_counter()
        row = {
            "fwd_ms": (t1 - t0) * 1e3,
            "bwd_ms": (t2 - t1) * 1e3,
            "step_ms": (t3 - t2) * 1e3,
            "total_ms": (t3 - t0) * 1e3,
        }
        row.update(faults_fwd=f1 - f0, faults_bwd=f2 - f1, faults_step=f3 - f2)
        row.update({k: {"ms": v[0] * 1e3, "faults": v[1]} for k, v in acc.items()})
        rows.append(row)
    if torch.distributed.get_rank() == 0:
        for r in rows:
            print(json.dumps(r, default=lambda v: round(v, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
