"""Stage 3: whole training steps under each strategy, on models of their own.

For each ``--models`` entry (``model:dataset:batch``; defaults below: models and batch
sizes that validation does not use), each variant runs ``--iters`` timed iterations after
``--warmup`` untimed ones, on every rank at once (random data of the dataset's shape, SGD
with momentum, ``zero_grad(set_to_none=True)``):

* ``local``         no communication: every rank trains its own replica (the compute-only
                    baseline).
* ``ddp``           DistributedDataParallel, default buckets (25 MiB cap, 1 MiB first).
* ``fsdp-full``     FSDP2 ``fully_shard`` on every block of the model (the units simdl's
  ``fsdp-grad_op``  plan assumes: simdl.workload.zoo.DEFAULT_WRAP_TYPES) and the root;
  ``fsdp-none``     full = reshard after forward, grad_op = keep, none = a (world x 1)
                    replicate x shard mesh (FSDP2 has no NO_SHARD; HSDP with shards of one).
* ``fsdp1``         FSDP1 FullyShardedDataParallel, first model only (skipped with a note
                    where it does not run: FSDP1 refuses CPU).
* ``ps-sync``       on ``--ps-model`` (mnist_cnn): rank 0 is the parameter server (flat fp32
                    parameters, momentum SGD), the others are workers: push gradients, the
                    server averages and updates, every worker pulls the parameters.
* ``ps-async``      the server applies each push as it arrives and answers that worker.
* ``zero2``         with ``--zero``: DeepSpeed ZeRO stages 2, 3 and (not with ``--quick``)
  ``zero3``         1 (calibration/zero_steps.py).
  ``zero1``

Per iteration the worker-side step time is logged; peak memory is the CUDA allocator's
peak, or the process's peak RSS on CPU (``ru_maxrss``). FSDP variants also log every
collective call of the timed iterations (:class:`CallTimer`): which, its bytes, and the
host clock when the rank entered and left it. On CPU, gloo's work is waited for inside the
call (benchmarks/fsdp2_blocking_cpu.py), so the time in the calls is the step's exposed
communication, and the latest entry over the ranks splits it into waiting for the peers and
the transfer itself (simdl.calibrate.in_step). On CUDA the call only enqueues the work; the
times are kept but not read as communication. Local, DDP and FSDP variants also log the
untimed warm-up steps' times and the process's minor page faults per timed step
(``ru_minflt``): memory the step touched for the first time since the allocator got it
from the OS. After its timed steps, each of these variants runs one more step under
torch.profiler and logs the training thread's time by group of ops (compute, copies,
optimizer, collective calls: simdl.calibrate.step_groups) as ``profiled_step``: how long
the strategies' buffer copies take inside a step. `simdl calibrate` fits from the
DDP/FSDP steps how much slower collectives run inside training than on the idle machine
(simdl.calibrate.overlap).

Run: torchrun --nproc-per-node 2 calibration/strategies.py --out runs/x/strategies
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Model factories (``package.module:factory``) are imported from where `simdl calibrate` runs,
# as in the parent process; torchrun puts only this script's folder on the path.
sys.path.insert(1, os.getcwd())

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import agree, agreed_done, base_parser, finish, plan, release_host_memory, setup, within_budget  # noqa: E402
from zero_steps import QUICK_ZERO_VARIANTS, ZERO_VARIANTS, zero_variant  # noqa: E402

STAGE = "strategies"
SPMD_VARIANTS = ("local", "ddp", "fsdp-full", "fsdp-grad_op", "fsdp-none")
PS_VARIANTS = ("ps-sync", "ps-async")
# Models of the strategy fit: many mid-size FSDP units (convnext_tiny), few (resnet18), many
# small ones (efficientnet_v2_s), large ones (wide_resnet101_2: 507 MB of gradients), one
# 403 MB layer (wide_mlp); none of them, nor these batch sizes, is a validation run.
DEFAULT_MODELS = (
    "resnet18:cifar10:32;convnext_tiny:cifar10:32;efficientnet_v2_s:cifar10:16;"
    "wide_resnet101_2:cifar10:16;wide_mlp:cifar10:16"
)
QUICK_MODELS = "resnet18:cifar10:16;convnext_tiny:cifar10:16"


def build(ctx, model_name: str, dataset: str):
    from simdl.workload.datasets import get_dataset
    from simdl.workload.zoo import build_adapted

    ds = get_dataset(dataset)
    torch.manual_seed(0)
    model, _, shape = build_adapted(model_name, ds.input_shape, ds.num_classes, device="meta")
    model = model.to_empty(device=ctx.device)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    return model, shape, ds.num_classes


def peak_memory(ctx) -> dict:
    if ctx.is_cuda:
        return {"peak_bytes": int(torch.cuda.max_memory_allocated(ctx.device)), "memory_kind": "cuda_max_allocated"}
    return {"peak_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "memory_kind": "ru_maxrss"}


class CallTimer:
    """Times the collectives FSDP2 issues, by wrapping the ``torch.distributed`` functions it
    calls (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: ``all_gather_single``
    and ``reduce_scatter_single`` per unit, ``all_reduce`` across HSDP replicas). A call
    made with ``async_op=True`` is timed to its ``wait()``-free return: FSDP2 makes them
    synchronous on CPU (its ``unshard_async_op`` default and ``foreach_reduce``).

    ``calls``: ``[step, collective, bytes, enter_ns, exit_ns]`` per call while ``step`` is
    not None; ``bytes`` is the collective's full buffer (the all-gather's output)."""

    NAMES = {
        "all_gather_single": "all_gather",
        "all_gather_into_tensor": "all_gather",
        "reduce_scatter_single": "reduce_scatter",
        "reduce_scatter_tensor": "reduce_scatter",
        "all_reduce": "all_reduce",
    }

    def __init__(self):
        self.calls: list[list] = []
        self.step: int | None = None
        self._saved: dict = {}

    def __enter__(self):
        for name, coll in self.NAMES.items():
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            self._saved[name] = fn
            setattr(dist, name, self._wrap(fn, coll))
        return self

    def __exit__(self, *exc):
        for name, fn in self._saved.items():
            setattr(dist, name, fn)
        self._saved.clear()

    def _wrap(self, fn, coll):
        def timed(*args, **kwargs):
            t0 = time.time_ns()
            out = fn(*args, **kwargs)
            t1 = time.time_ns()
            if self.step is not None:
                # The full buffer: an all-gather's output (first argument), a reduce-scatter's
                # input, an all-reduce's tensor.
                if coll == "reduce_scatter":
                    t = kwargs.get("input", args[1] if len(args) > 1 else None)
                else:
                    t = kwargs.get("output_tensor", kwargs.get("tensor", args[0] if args else None))
                nbytes = int(t.numel() * t.element_size()) if isinstance(t, torch.Tensor) else 0
                self.calls.append([self.step, coll, nbytes, t0, t1])
            return out

        return timed


def spmd_variant(ctx, variant, model, shape, classes, batch, iters, warmup, model_name=""):
    """Step times of local / DDP / FSDP training (every rank is a trainer), and one profiled
    step's split by group of ops."""
    note = ""
    if variant == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[ctx.device.index] if ctx.is_cuda else None)
    elif variant.startswith("fsdp-"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from simdl.workload.zoo import DEFAULT_WRAP_TYPES

        sharding = variant.split("-", 1)[1]
        if sharding == "none":
            mesh = init_device_mesh(ctx.device.type, (ctx.world, 1), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(ctx.device.type, (ctx.world,))
        reshard = sharding == "full"
        types = set(DEFAULT_WRAP_TYPES.get(model_name, ()))
        for m in list(model.modules()):
            if m is not model and type(m).__name__ in types:
                fully_shard(m, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    elif variant == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FSDP(
            model,
            auto_wrap_policy=ModuleWrapPolicy({torch.nn.Conv2d, torch.nn.Linear}),
            device_id=ctx.device if ctx.is_cuda else None,
            use_orig_params=True,
        )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *shape, device=ctx.device)
    y = torch.randint(0, classes, (batch,), device=ctx.device)
    times, warm, faults = [], [], []
    timer = CallTimer()

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    with timer if variant.startswith("fsdp-") else contextlib.nullcontext():
        for i in range(warmup + iters):
            timer.step = i - warmup if i >= warmup else None
            ctx.sync()
            f0 = _minor_faults()
            t0 = time.perf_counter()
            step()
            ctx.sync()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
                faults.append(_minor_faults() - f0)
            else:
                warm.append(dt)
        timer.step = None
        groups = profiled_step(ctx, step)
    if variant == "ddp":
        note = "bucket_cap_mb=default (25)"
    return (
        times,
        note,
        timer.calls,
        {
            "warmup_times_s": warm,
            "minor_faults_per_step": faults,
            "page_bytes": resource.getpagesize(),
            "profiled_step": groups,
        },
    )


PROFILED_STEP = "calibration::profiled_step"


def profiled_step(ctx, step) -> dict:
    """One more step, after the timed ones, under torch.profiler (CPU ops; not timed with
    the others, the profiler slows a step down): the training thread's time by group of ops
    (simdl.calibrate.step_groups: compute, copies, optimizer, collective calls) and the
    step's length. `simdl calibrate` sets the strategies' copies in it against their
    idle-machine cost (simdl.calibrate.in_step.CopyFit: FSDP2 packing its collective buffers
    ran about 10x slower in a step than alone on the Xeon, 2026-11-25)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from simdl.calibrate.step_groups import marked_step_groups

    ctx.sync()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(PROFILED_STEP):
            step()
            ctx.sync()
    return marked_step_groups(prof.profiler.kineto_results.events(), PROFILED_STEP)


def _minor_faults() -> int:
    """Minor page faults of this process so far: each is a page touched for the first time
    since the allocator got it from the OS (benchmarks/fsdp2_allocator_cpu.py: glibc gives
    FSDP2's per-step buffers back and faults them in again)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def ps_variant(ctx, variant, model, shape, classes, batch, iters, warmup):
    """Parameter server on rank 0, workers on the other ranks, over send/recv."""
    params = [p for p in model.parameters()]
    numel = sum(p.numel() for p in params)
    flat = torch.cat([p.detach().reshape(-1) for p in params]).to(ctx.device)
    workers = list(range(1, ctx.world))
    total = warmup + iters
    times: list[float] = []
    if ctx.rank == 0:
        buf = torch.zeros_like(flat)
        grads = [torch.empty_like(flat) for _ in workers]
        if variant == "ps-sync":
            for _ in range(total):
                reqs = [dist.irecv(g, w) for g, w in zip(grads, workers)]
                for r in reqs:
                    r.wait()
                g = torch.stack(grads).mean(0)
                buf.mul_(0.9).add_(g)
                flat.add_(buf, alpha=-0.01)
                reqs = [dist.isend(flat, w) for w in workers]
                for r in reqs:
                    r.wait()
        else:
            g = torch.empty_like(flat)
            for _ in range(total * len(workers)):
                src = dist.recv(g)  # any worker, in arrival order
                buf.mul_(0.9).add_(g)
                flat.add_(buf, alpha=-0.01)
                dist.send(flat, src)
        return times, f"server rank 0, {len(workers)} worker(s), {numel} parameters"
    x = torch.randn(batch, *shape, device=ctx.device)
    y = torch.randint(0, classes, (batch,), device=ctx.device)
    gflat = torch.empty_like(flat)
    for i in range(total):
        ctx.sync()
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        torch.cat([p.grad.reshape(-1) for p in params], out=gflat)
        dist.send(gflat, 0)
        dist.recv(flat, 0)
        with torch.no_grad():
            off = 0
            for p in params:
                n = p.numel()
                p.copy_(flat[off : off + n].view_as(p))
                off += n
        ctx.sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times, f"worker of server rank 0, {numel} parameters"


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--models", default=None, help=f"model:dataset:batch;... (default {DEFAULT_MODELS})")
    p.add_argument("--ps-model", default="mnist_cnn:mnist:32")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--variants", default=",".join(SPMD_VARIANTS + ("fsdp1",) + PS_VARIANTS + ZERO_VARIANTS))
    p.add_argument("--zero", action="store_true", help="also DeepSpeed ZeRO steps (deepspeed imports)")
    args = p.parse_args()
    ctx = setup(args, STAGE)
    iters = args.iters or (12 if args.quick else 25)
    wanted = [v for v in args.variants.split(",") if v]
    zero = (QUICK_ZERO_VARIANTS if args.quick else ZERO_VARIANTS) if args.zero else ()
    runs = []
    for k, item in enumerate((args.models or (QUICK_MODELS if args.quick else DEFAULT_MODELS)).split(";")):
        name, dataset, batch = item.rsplit(":", 2)
        runs += [(v, name, dataset, int(batch)) for v in SPMD_VARIANTS if v in wanted]
        if k == 0 and "fsdp1" in wanted:
            runs.append(("fsdp1", name, dataset, int(batch)))
        runs += [(v, name, dataset, int(batch)) for v in zero if v in wanted]
    if ctx.world >= 2 and args.ps_model:
        name, dataset, batch = args.ps_model.rsplit(":", 2)
        runs += [(v, name, dataset, int(batch)) for v in PS_VARIANTS if v in wanted]
    keys = [f"{v}/{name}/{batch}" for v, name, _, batch in runs]
    plan(ctx, keys)
    done = agreed_done(ctx)
    stopped = False
    for (v, name, dataset, batch), key in zip(runs, keys):
        if key in done:
            continue
        if not within_budget(ctx, 1.0):
            stopped = True
            break
        model, shape, classes = build(ctx, name, dataset)
        if ctx.is_cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        dist.barrier()
        ok, err = True, ""
        try:
            calls, extra = [], {}
            if v.startswith("ps"):
                times, note = ps_variant(ctx, v, model, shape, classes, batch, iters, args.warmup)
            elif v in ZERO_VARIANTS:
                times, note, calls, extra = zero_variant(ctx, v, model, shape, classes, batch, iters, args.warmup)
            else:
                times, note, calls, extra = spmd_variant(ctx, v, model, shape, classes, batch, iters, args.warmup, name)
        except Exception as e:  # noqa: BLE001 - e.g. FSDP1 without CUDA, deepspeed failing: log and go on
            ok, err, times, note, calls, extra = False, f"{type(e).__name__}: {e}"[:300], [], "", [], {}
        if not agree(ctx, ok):
            ctx.log.measurement(
                key,
                kind="strategy",
                variant=v,
                model=name,
                dataset=dataset,
                batch=batch,
                skipped=True,
                error=err or "failed on another rank",
            )
            continue
        med = sorted(times)[len(times) // 2] if times else None
        ctx.log.measurement(
            key,
            kind="strategy",
            variant=v,
            model=name,
            dataset=dataset,
            batch=batch,
            iters=iters,
            warmup=args.warmup,
            step_times_s=times,
            step_s=med,
            role=("server" if v.startswith("ps") and ctx.rank == 0 else "worker"),
            note=note,
            **peak_memory(ctx),
            **extra,
            **({"collective_calls": calls, "calls_block": not ctx.is_cuda} if calls else {}),
        )
        del model
        release_host_memory(ctx)
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
