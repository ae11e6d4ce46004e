"""Probe (not part of calibration): where in a steady FSDP2 step does glibc's heap grow
(fresh pages: faults) and shrink (trimmed back to the OS)?

    torchrun --nproc-per-node=2 benchmarks/fsdp2_heap_trim_cpu.py RUN OUT_DIR [STEPS]
    RUN: a run of validate's local matrix by run-id prefix (vit-vit_b_32-fsdp-none-r2-b32),
    or MODEL:DATASET:BATCH:SHARDING for any zoo model, e.g. a calibration model that no
    validation run uses (convnext_tiny:cifar10:32:none)

Since 2026-12-02 a unit's backward is marked when its input's gradient is computed (a
tensor hook, not a full backward hook, which VGG's in-place ReLUs refuse): the same point,
but the first unit, whose input is the image, has no backward mark.

Builds and wraps the run's model as validate/train.py does (FSDP2, gloo, one thread per
rank), trains STEPS steps (default 8) on one generated batch, and records at every FSDP
unit's forward and backward hooks, after backward, after the optimizer step and after
``zero_grad(set_to_none=True)``: the heap's end (``sbrk(0)``) and the minor page faults so far
(``getrusage`` ``ru_minflt``, 4 KiB pages). Writes ``OUT_DIR/steps<rank>.json``.

Why: simdl.hosts.cpu_glibc ``GlibcCpuHost.refault_limit``. Run on the 2-core VM (AMD EPYC, Zen 3),
2026-11-27, ViT-B/32 FSDP none (HSDP on a 2 x 1 mesh), batch 32, rank 0, step 5 of 8:

    point in the step                  heap end   faults so far   (MB from the step's start)
    forward, all 13 units                  +0.0           0.0
    backward, unit by unit            +16.5 ... +526.8  +16.5 ... +526.7  (+28.3 or +56.7 per unit)
    end of backward                      +583.5         583.5
    optimizer step                       +583.5         583.5
    zero_grad                             +73.2         583.5     (510 MB trimmed)

Every byte the heap grew by in backward was a fault: the sharded gradients (the reduce
outputs, 28.3 MB per encoder block) are allocated at the heap's top and freed together by
zero_grad, which leaves more than the trim threshold free there, so glibc gives it back
and the next step faults it in again. Rank 1 faulted 0-624 MB in the same steps.
The same configuration under validate.run, 2026-11-27: median step 2.189 s with glibc's
defaults (faults 652 / 425 MB per step on the two ranks), 1.704 s with
``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=68719476736`` (no trimming; faults
0 / 0). FSDP full (same model, batch 32) kept faulting 392-482 MB per step with trimming
off: its all-gathers' temporaries, allocated on gloo's threads, are not heap-top memory
of the training thread, and simdl prices them inside the collectives' measured curves.
"""

from __future__ import annotations

import ctypes
import json
import resource
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_libc = ctypes.CDLL("libc.so.6")
_libc.sbrk.restype = ctypes.c_void_p
_libc.sbrk.argtypes = [ctypes.c_long]


def _on_grad(args, fn) -> None:
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is not None and x.requires_grad:
        x.register_hook(lambda g: fn())


def _run(spec: str, experiments):
    """The RunSpec of a local-matrix run id prefix, or of MODEL:DATASET:BATCH:SHARDING."""
    parts = spec.split(":")
    if len(parts) == 4:
        from validate.experiments import RunSpec

        model, dataset, batch, sharding = parts
        return RunSpec("probe", model, dataset, "fsdp", 2, int(batch), 1, 0, 0, sharding=sharding)
    return next(r for r in experiments("local") if r.run_id.startswith(spec))


def main() -> None:
    from validate import train
    from validate.experiments import experiments

    prefix, out = sys.argv[1], Path(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    run = _run(prefix, experiments)
    torch.set_num_threads(1)  # one core per rank, as validate/train.py runs
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    model, shape, _ = train.build_model(run, device)
    log: list[tuple[str, int, int, float]] = []

    def mark(label: str) -> None:
        log.append((label, _libc.sbrk(0), resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()))

    types = set(train.wrap_types(run))
    for name, m in model.named_modules():
        if m is not model and type(m).__name__ in types:
            m.register_forward_pre_hook(lambda mod, a, n=name: mark(f"forward {n}"))
            # A hook on the unit's input fires when its gradient is computed, where a full
            # backward hook would (it refuses units whose first op is in place: VGG's ReLUs).
            m.register_forward_pre_hook(lambda mod, a, n=name: _on_grad(a, lambda: mark(f"backward {n}")))
    model = train._wrap_spmd(run, model, device, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn((run.batch_size,) + tuple(shape))
    y = torch.randint(0, 10, (run.batch_size,))
    rec = []
    for i in range(steps):
        log.clear()
        mark("start")
        F.cross_entropy(model(x), y).backward()
        mark("backward done")
        opt.step()
        mark("optimizer step")
        opt.zero_grad(set_to_none=True)
        mark("zero_grad")
        b0, f0, t0 = log[0][1], log[0][2], log[0][3]
        rec.append(
            {
                "step": i,
                "s": log[-1][3] - t0,
                "faults_MB": (log[-1][2] - f0) * 4096 / 1e6,
                "trace": [(lab, (b - b0) / 1e6, (f - f0) * 4096 / 1e6, t - t0) for lab, b, f, t in log],
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / f"steps{rank}.json").write_text(json.dumps(rec, indent=0))
    print(rank, [(r["step"], round(r["s"], 2), round(r["faults_MB"])) for r in rec])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
