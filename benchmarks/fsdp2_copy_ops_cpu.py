"""Probe (not part of calibration): which ops make up the "copies" of a steady FSDP2 step,
how many bytes each moves and at what rate, against what simdl's plan charges for them.

    torchrun --nproc-per-node=2 benchmarks/fsdp2_copy_ops_cpu.py RUN_ID_PREFIX OUT_DIR [STEPS [PROFILED]]
    e.g. RUN_ID_PREFIX = exp1-efficientnet_v2_l-fsdp-none-r2-b32 (a run of validate's local matrix)

Builds and wraps the run's model as validate/train.py does (FSDP2, gloo, one thread per
rank), trains STEPS steps (default 7) on one generated batch and profiles step PROFILED
(default 5: validation's own profiled step is its third, still warming up). Writes
``OUT_DIR/ops<rank>.json``: every step's time and minor-fault bytes, and for the profiled
step the training thread's top-level ops grouped as simdl.calibrate.step_groups groups them,
each op name with its count, seconds and bytes moved (a read and a write of its first input,
from the recorded shapes and dtypes). Rank 0 prints the table.

Why: validation's EfficientNet-V2-L FSDP none step is under-predicted in every sweep
(-12 to -25 %), and its profiled step spends 1.8 s in copies where the plan charges 0.44 s.
``OUT_DIR/ops<rank>.json`` also lists every copy call (name, start in the step, seconds,
first input's bytes) and when the first ``*_backward`` op ran, to split them by phase.

Run on the 2-core VM (AMD EPYC, Zen 3; Firecracker guest), 2026-11-27 15:08-15:20 UTC,
EfficientNet-V2-L, batch 32, 2 ranks, step 5 of 7, seconds per rank (rank 0 / rank 1):

    run                          steady steps (s)     faults/step   fwd copy_       bwd _chunk_cat   bwd copy_
    FSDP none, glibc defaults    5.8-8.2 (4 runs)     250-860 MB    0.08 / 0.06     0.96 / 0.66      0.85 / 0.80
                                                                    (11-16 GB/s)    0.73 / 0.72      0.83 / 0.85
                                                                                    0.61 / 0.53      0.63 / 0.56
    FSDP none, no trimming(*)    6.09, 5.75, 5.61     0-46 MB       0.05 / 0.05     0.15 / 0.17      0.19 / 0.17
    FSDP grad_op, defaults       8.1-8.8              170-480 MB    0.15 / 0.10 (split_with_sizes_copy)
                                                                                    0.20 / 0.62      0.03 / 0.03

    (*) MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=68719476736: glibc's mmap
        threshold as it settles, and no trimming.

simdl (cpu-epyc-milan of 2026-11-27 noon) predicts FSDP none at 6.01 s with 0.44 s of
copies: the forward's local unshard copies (0.94 GB moved) and the backward's copy-in and
reduce-output copy (1.9 GB) at the calibrated 18.1 GB/s, plus 0.28 s for the reduce outputs'
471 MB faulting in again at the calibrated 0.597 ns/B. The forward copies run as priced. The
backward's run at 1.1-1.7 GB/s with glibc's defaults and about 6 GB/s with trimming off:
trimming and the refaults it causes cost 0.8-1.5 s of copies per step, 1.5-3 ns per
faulted byte, three to five times the rate calibration measures on an isolated fill of a fresh buffer
(0.52-0.82 ns/B, whatever the delay between free and refill, 0-20 s, and with another
process computing, copying or faulting alongside). ``perf record -a`` over two steady steps
puts 10 % of all samples in the kernel's ``clear_page_erms`` under ``direct_copy_kernel`` and
``cat_serial_kernel`` -- about 0.67 s of page zeroing per rank per step, 1.3 ns per faulted
byte, against 0.09 ns/B in the isolated fill. The same measurement on other models gives other
rates: ConvNeXt-L none 0.9 ns/B (lab/CAMPAIGN.md, "Page faults"), ViT-B/32 none 0.9 ns/B
(benchmarks/fsdp2_heap_trim_cpu.py). Even without trimming, a few of EfficientNet's 9 MB
units' copies take 43-48 ms on both ranks at once (0.2 s per step): something else on the
VM slows them. /proc/stat over a run: user 67 %, system 22 %, idle 10 %, steal 0.8 %.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MARK = "probe_step"


def _top_level_ops(events, thread: int, t0: int, t1: int):
    """(name, seconds, first input's bytes, group, start s) of the training thread's
    top-level ops in [t0, t1], grouped as simdl.calibrate.step_groups groups them."""
    from simdl.calibrate.step_groups import thread_spans, top_level_ops
    from validate.measure import _tensor_bytes

    events = list(events)
    spans, optimizer = thread_spans(events, t0, t1, thread)
    first_input = {
        (e.start_ns(), e.name()): _tensor_bytes(e.shapes()[0], e.dtypes()[0]) if e.shapes() else 0.0
        for e in events
        if e.start_thread_id() == thread and t0 <= e.start_ns() <= t1
    }
    return [
        (name, (e - s) / 1e9, first_input.get((s, name), 0.0), group, (s - t0) / 1e9)
        for s, e, name, group in top_level_ops(spans, optimizer)
    ]


def main() -> None:
    from validate import measure, train
    from validate.experiments import experiments

    prefix, out = sys.argv[1], Path(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    profiled = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    run = next(r for r in experiments("local") if r.run_id.startswith(prefix))
    torch.set_num_threads(1)  # one core per rank, as validate/train.py runs
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    model, shape, _ = train.build_model(run, device)
    model = train._wrap_spmd(run, model, device, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn((run.batch_size,) + tuple(shape))
    y = torch.randint(0, 10, (run.batch_size,))
    timer = measure.StepTimer()  # step times and minor-fault bytes, as validation records them
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    for i in range(steps):
        if i == profiled:
            prof.start()
        timer.start()
        with record_function(MARK) if i == profiled else nullcontext():
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        timer.stop()
        if i == profiled:
            prof.stop()
    events = prof.profiler.kineto_results.events()
    mark = [e for e in events if e.name() == MARK][-1]
    t0, t1 = mark.start_ns(), mark.start_ns() + mark.duration_ns()
    ops = _top_level_ops(events, mark.start_thread_id(), t0, t1)
    table: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for name, s, b, group, _ in ops:
        row = table[(group, name)]
        row[0] += 1
        row[1] += s
        row[2] += 2.0 * b  # one read and one write of the first input
    times, faults = timer.times, timer.fault_bytes
    rec = {
        "run": run.run_id,
        "rank": rank,
        "step_s": times,
        "fault_bytes": faults,
        "profiled": profiled,
        "copy_calls": [[name, start, s, b] for name, s, b, group, start in ops if group == "copies"],
        "first_backward_s": min((start for name, _, _, _, start in ops if name.endswith("_backward")), default=None),
        "ops": [[g, n, c, s, b] for (g, n), (c, s, b) in sorted(table.items(), key=lambda kv: -kv[1][1])],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ops{rank}.json").write_text(json.dumps(rec, indent=0))
    dist.barrier()
    if rank == 0:
        print(
            f"{run.run_id}: steps {[round(t, 2) for t in times]} s, faults "
            f"{[round(f / 1e6) for f in faults]} MB; profiled step {profiled}"
        )
        by_group: dict[str, float] = defaultdict(float)
        for g, n, c, s, b in rec["ops"]:
            by_group[g] += s
        print("groups (s):", {g: round(s, 3) for g, s in by_group.items()})
        print(f"{'group':<17}{'op':<32}{'count':>6}{'s':>8}{'MB moved':>10}{'GB/s':>7}")
        for g, n, c, s, b in rec["ops"][:25]:
            print(f"{g:<17}{n:<32}{c:>6}{s:>8.3f}{b / 1e6:>10.0f}{b / s / 1e9 if s else 0:>7.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
