"""Stage 2: forward and backward time of every row of a model's workload table.

For each model (a zoo model on a dataset, so its shipped workload table applies) and two
or more batch sizes, on every rank at once (ranks that share a device -- CPU cores, or
one GPU -- compete as they do in training):

* per-row times, with hooks. Forward: pre/post hooks on every module give each call's
  inclusive time; a row's own time is that minus its child calls' (the same booking as
  the table: a row owns the ops that run inside it and in no child). Backward: every
  autograd node is assigned to the module call that created it (its sequence number lies
  in the call's range, innermost call wins; parameter leaves go to their module's first
  call, as :mod:`simdl.workload.extract` books them), and node pre-hooks/hooks time it;
  the engine's gap before a node is booked to the node's row. The loss and anything
  outside a module go to the root row ``""``.
* the whole step without hooks (forward incl. loss, backward), the number a held-out
  check compares against.
* microbenchmarks (GEMM, convolution, elementwise, a tiny op): achievable FLOP/s,
  bandwidth and per-op overhead per op class; large streaming ops (the optimizer step,
  whole-tensor copies) and fresh vs reused buffers above the allocator's mmap threshold
  (page-fault cost).

Times are device-synchronised (CUDA) around each timed region; the fastest of the repeats
for microbenchmarks, medians for rows; every whole step is recorded, with the fastest
(``step_fwd_s``, ``step_bwd_s``), and the fitter rescales the rows to the repeat
``simdl.calibrate.compute.STEP_ANCHOR`` picks (the median one since 2026-11-28).

Run: torchrun --nproc-per-node 2 calibration/compute.py --out runs/x/compute
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Model factories (``package.module:factory``) are imported from where `simdl calibrate` runs,
# as in the parent process; torchrun puts only this script's folder on the path.
sys.path.insert(1, os.getcwd())

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import agreed_done, base_parser, finish, plan, setup, timed, within_budget  # noqa: E402

STAGE = "compute"
# model:dataset:batches;...  Fit set first, held-out model last (it is predicted, not fitted).
DEFAULT_MODELS = "mnist_cnn:mnist:16,64;resnet18:cifar10:4,16;vgg16:cifar10:2,8;densenet121:cifar10:4,8"
QUICK_MODELS = "mnist_cnn:mnist:8,32;resnet18:cifar10:4,8;vgg16:cifar10:2,4;densenet121:cifar10:2,4"

UINT64_MAX = 2**64 - 1


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class RowTimer:
    """Per-row forward/backward seconds of one training step (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, sync):
        self.model = model
        self.sync = sync
        self.names = {m: n for n, m in model.named_modules()}
        self.handles = []
        for m in model.modules():
            self.handles.append(m.register_forward_pre_hook(self._pre))
            self.handles.append(m.register_forward_hook(self._post))
        self.reset()

    def reset(self) -> None:
        self.rows: list[dict] = []
        self.stack: list[int] = []
        self.called: dict[torch.nn.Module, int] = {}

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def _pre(self, module, args):
        self.sync()
        idx = len(self.rows)
        self.called.setdefault(module, idx)
        self.rows.append(
            {
                "name": self.names[module],
                "type": type(module).__name__,
                "t0": time.perf_counter(),
                "child": 0.0,
                "fwd": 0.0,
                "bwd": 0.0,
                "seq0": torch._C._autograd._get_sequence_nr(),
                "seq1": None,
                "parent": self.stack[-1] if self.stack else None,
            }
        )
        self.stack.append(idx)

    def _post(self, module, args, output):
        self.sync()
        t1 = time.perf_counter()
        idx = self.stack.pop()
        row = self.rows[idx]
        incl = t1 - row["t0"]
        row["fwd"] = incl - row["child"]
        row["seq1"] = torch._C._autograd._get_sequence_nr()
        if row["parent"] is not None:
            self.rows[row["parent"]]["child"] += incl

    def label_graph(self, loss: torch.Tensor) -> None:
        """Assign every autograd node of ``loss``'s graph to a row and hook it for timing."""
        owner_of_param = {}
        for module, idx in self.called.items():
            for p in module.parameters(recurse=False):
                owner_of_param[id(p)] = idx
        # Calls in start order; ranges nest, so the innermost call holding a sequence
        # number is the last-starting call whose [seq0, seq1) contains it.
        ranges = [(r["seq0"], r["seq1"], i) for i, r in enumerate(self.rows)]
        self.last = 0.0
        seen = set()
        todo = [loss.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if hasattr(node, "variable"):  # AccumulateGrad: the parameter's module
                label = owner_of_param.get(id(node.variable), 0)
            else:
                seq = node._sequence_nr()
                label = 0
                for s0, s1, i in ranges:
                    if s0 <= seq < s1:
                        label = i  # later (inner) calls overwrite earlier (outer) ones
            node.register_prehook(self._bwd_pre(label))
            node.register_hook(self._bwd_post(label))
            todo.extend(n for n, _ in node.next_functions)

    def _bwd_pre(self, label):
        def pre(grad_outputs):
            self.sync()
            now = time.perf_counter()
            self.rows[label]["bwd"] += now - self.last  # engine gap before this node
            self.last = now

        return pre

    def _bwd_post(self, label):
        def post(grad_inputs, grad_outputs):
            self.sync()
            now = time.perf_counter()
            self.rows[label]["bwd"] += now - self.last
            self.last = now

        return post


def model_step(model, x, y, timer: RowTimer | None, sync):
    """One fwd+bwd; returns (fwd_s, bwd_s, per-row list or None)."""
    for p in model.parameters():
        p.grad = None
    if timer is not None:
        timer.reset()
    sync()
    t0 = time.perf_counter()
    out = model(x)
    loss = F.cross_entropy(out, y)
    sync()
    t1 = time.perf_counter()
    rows = None
    if timer is not None:
        # The loss ran outside every module: the root row owns it (as in the table).
        timer.rows[0]["fwd"] += t1 - (timer.rows[0]["t0"] + timer.rows[0]["fwd"] + timer.rows[0]["child"])
        timer.label_graph(loss)
        sync()
        t1 = time.perf_counter()
        timer.last = t1
    loss.backward()
    sync()
    t2 = time.perf_counter()
    if timer is not None:
        timer.rows[0]["bwd"] += t2 - timer.last  # after the last node
        rows = [(r["name"], r["type"], r["fwd"], r["bwd"]) for r in timer.rows]
    return t1 - t0 if timer is None else sum(r[2] for r in rows), t2 - t1, rows


def measure_model(ctx, name: str, dataset: str, batch: int, repeats: int, rows: bool = True) -> dict:
    from simdl.workload.datasets import get_dataset
    from simdl.workload.zoo import build_adapted

    ds = get_dataset(dataset)
    torch.manual_seed(0)
    model, _, shape = build_adapted(name, ds.input_shape, ds.num_classes, device="meta")
    model = model.to_empty(device=ctx.device)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    model.train()
    x = torch.randn(batch, *shape, device=ctx.device)
    y = torch.randint(0, ds.num_classes, (batch,), device=ctx.device)
    model_step(model, x, y, None, ctx.sync)  # warm-up (allocator, oneDNN/cuDNN choice)
    plain_f, plain_b = [], []
    for _ in range(repeats):
        f, b, _ = model_step(model, x, y, None, ctx.sync)
        plain_f.append(f)
        plain_b.append(b)
    # Every unhooked step is kept, and the fastest (timeit's rule) named; the fitter rescales
    # the per-row medians to the repeat simdl.calibrate.compute.STEP_ANCHOR picks.
    best = min(range(repeats), key=lambda i: plain_f[i] + plain_b[i])
    whole = {
        "model": name,
        "dataset": dataset,
        "input_shape": list(shape),
        "batch": batch,
        "repeats": repeats,
        "step_fwd_s": plain_f[best],
        "step_bwd_s": plain_b[best],
        "step_fwd_all_s": plain_f,
        "step_bwd_all_s": plain_b,
    }
    if not rows:
        return whole
    timer = RowTimer(model, ctx.sync)
    per_rep = []
    try:
        model_step(model, x, y, timer, ctx.sync)  # warm-up with hooks
        for _ in range(repeats):
            per_rep.append(model_step(model, x, y, timer, ctx.sync)[2])
    finally:
        timer.remove()
    names = [r[0] for r in per_rep[0]]
    types = [r[1] for r in per_rep[0]]
    fwd = [_median([rep[i][2] for rep in per_rep]) for i in range(len(names))]
    bwd = [_median([rep[i][3] for rep in per_rep]) for i in range(len(names))]
    return {
        **whole,
        "hooked_fwd_s": sum(fwd),
        "hooked_bwd_s": sum(bwd),
        "rows": {"name": names, "type": types, "fwd_s": fwd, "bwd_s": bwd},
    }


def micro_benchmarks(quick: bool, device) -> list[tuple[str, dict, object]]:
    """(key, description, zero-arg callable) for GEMM, conv, elementwise and tiny ops."""
    out = []
    with torch.device(device):
        _micro(quick, out, cuda=torch.device(device).type == "cuda")
    return out


def _cuda_micro(out: list) -> None:
    """Sizes that fill a data-centre GPU, and bf16 GEMMs on its tensor cores (op class
    gemm_bf16, fitted on its own): the CPU sizes below finish in microseconds there, under
    the launch cost. Operands are random (zeros run faster on tensor cores)."""
    for n in (2048, 4096, 8192):
        a, b = torch.randn(n, n), torch.randn(n, n)
        out.append(
            (
                f"gemm/{n}",
                {"op_class": "gemm", "flops": 2.0 * n**3, "bytes": 3.0 * 4 * n * n},
                (lambda a=a, b=b: torch.mm(a, b)),
            )
        )
        ah, bh = a.bfloat16(), b.bfloat16()
        out.append(
            (
                f"gemm_bf16/{n}",
                {"op_class": "gemm_bf16", "flops": 2.0 * n**3, "bytes": 3.0 * 2 * n * n},
                (lambda a=ah, b=bh: torch.mm(a, b)),
            )
        )
    for bt, c, hw in ((32, 128, 56), (32, 256, 28), (64, 512, 14)):
        x = torch.randn(bt, c, hw, hw)
        conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        out.append(
            (
                f"conv3x3/{bt}x{c}x{hw}x{hw}",
                {
                    "op_class": "conv",
                    "flops": 2.0 * bt * c * c * 9 * hw * hw,
                    "bytes": 4.0 * (2 * bt * c * hw * hw + c * c * 9),
                },
                (lambda x=x, conv=conv: conv(x)),
            )
        )
    for numel in (1 << 22, 1 << 25, 1 << 28):
        a, b = torch.randn(numel), torch.randn(numel)
        out.append(
            (
                f"add/{numel}",
                {"op_class": "elementwise", "flops": 0.0, "bytes": 12.0 * numel},
                (lambda a=a, b=b: torch.add(a, b)),
            )
        )
    t = torch.randn(16)
    out.append(("tiny/add16", {"op_class": "launch", "flops": 0.0, "bytes": 0.0}, (lambda t=t: t + 1)))


def _micro(quick: bool, out: list, cuda: bool = False) -> None:
    if cuda and quick:
        # Quick on a GPU: the sizes that reach its rates; the CPU's per-call convolution and
        # page-fault benchmarks measure host costs a GPU's caching allocator does not pay.
        _cuda_micro(out)
        _stream_micro(quick, out, faults=False)
        return
    for n in (256, 512, 1024) if quick else (128, 256, 512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        out.append(
            (
                f"gemm/{n}",
                {"op_class": "gemm", "flops": 2.0 * n**3, "bytes": 3.0 * 4 * n * n},
                (lambda a=a, b=b: torch.mm(a, b)),
            )
        )
    for bt, c, hw in ((8, 64, 16), (8, 128, 8)) if quick else ((8, 64, 32), (8, 64, 16), (8, 128, 8), (8, 256, 4)):
        x = torch.randn(bt, c, hw, hw)
        conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        flops = 2.0 * bt * c * c * 9 * hw * hw
        nbytes = 4.0 * (2 * bt * c * hw * hw + c * c * 9)
        out.append(
            (
                f"conv3x3/{bt}x{c}x{hw}x{hw}",
                {"op_class": "conv", "flops": flops, "bytes": nbytes},
                (lambda x=x, conv=conv: conv(x)),
            )
        )
    for numel in (1 << 16, 1 << 20, 1 << 23) if quick else (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24):
        a, b = torch.randn(numel), torch.randn(numel)
        out.append(
            (
                f"add/{numel}",
                {"op_class": "elementwise", "flops": 0.0, "bytes": 12.0 * numel},
                (lambda a=a, b=b: torch.add(a, b)),
            )
        )
        out.append(
            (
                f"relu/{numel}",
                {"op_class": "elementwise", "flops": 0.0, "bytes": 8.0 * numel},
                (lambda a=a: torch.relu(a)),
            )
        )
    t = torch.randn(16)
    out.append(("tiny/add16", {"op_class": "launch", "flops": 0.0, "bytes": 0.0}, (lambda t=t: t + 1)))
    # Tiny convolutions, forward and both backward gradients (3 calls, as a model's conv row
    # costs in the roofline): their time is the fixed cost per convolution call (oneDNN's
    # set-up; 181 us on the Zen 3 EPYC at 2 ranks, calibrate-20261126T130810Z), which the
    # roofline fit may hold fixed (simdl.calibrate.fit.HOLD_CONV_CALL).
    for bt, c, hw, k in ((4, 32, 2, 3), (4, 64, 1, 3), (4, 128, 2, 1), (8, 32, 4, 3)):
        x = torch.randn(bt, c, hw, hw, requires_grad=True)
        conv = torch.nn.Conv2d(c, c, k, padding=k // 2, bias=False)
        g = torch.randn(bt, c, hw, hw)
        flops = 3 * 2.0 * bt * c * c * k * k * hw * hw
        nbytes = 4.0 * 3 * (2 * bt * c * hw * hw + c * c * k * k)
        out.append(
            (
                f"conv_call/{bt}x{c}x{hw}x{hw}/k{k}",
                {"op_class": "conv_call", "flops": flops, "bytes": nbytes, "calls": 3},
                (lambda x=x, conv=conv, g=g: torch.autograd.grad(conv(x), (x, conv.weight), g)),
            )
        )
    _stream_micro(quick, out)


class _Lazy:
    """A benchmark whose tensors are made at its first call (and dropped after it is
    measured), so that the big buffers of the stream benchmarks are never all alive. They
    are made on the device that was the default when the benchmark was declared (the
    ``torch.device`` context of :func:`micro_benchmarks`), not the CPU of the later call."""

    def __init__(self, make):
        self.make = make
        self.device = torch.get_default_device()
        self.fn = None

    def __call__(self):
        if self.fn is None:
            with torch.device(self.device):
                self.fn = self.make()
        return self.fn()

    def release(self):
        self.fn = None


def _sgd_step(numel: int, tensors: int):
    def make():
        params = [torch.nn.Parameter(torch.randn(numel)) for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn(numel)
        # PyTorch's choice for the device (foreach on CUDA, a per-tensor loop on CPU), as in training.
        opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
        opt.step()  # creates the momentum buffers
        return opt.step

    return _Lazy(make)


def _stream_micro(quick: bool, out: list, faults: bool = True) -> None:
    """Large streaming ops (issue 5): the optimizer step and whole-tensor copies, to fit the
    stream bandwidth and per-call cost of simdl.strategies.optimizer_step and FSDP/DDP
    copies; and fresh vs reused buffers above glibc's 32 MiB mmap threshold, whose time
    difference is the page-fault cost per byte."""
    # 16 Mi parameters in tensors of different sizes (the same bytes, more or fewer calls),
    # plus a larger set: working sets of 192-384 MiB, far beyond the caches, as a model's are.
    sgd = (
        ((1 << 22, 4), (1 << 16, 256), (1 << 24, 2))
        if quick
        else ((1 << 24, 1), (1 << 22, 4), (1 << 20, 16), (1 << 18, 64), (1 << 16, 256), (1 << 14, 1024), (1 << 24, 2))
    )
    for numel, tensors in sgd:
        # momentum SGD per tensor: buf.mul_(m).add_(g); p.add_(buf): 8 passes, 3 calls
        # (simdl.strategies.optimizer_step.PASSES / FOREACH_CALLS)
        out.append(
            (
                f"stream/sgd_momentum/{numel}x{tensors}",
                {"op_class": "stream", "bytes": 8.0 * 4 * numel * tensors, "calls": 3 * tensors},
                _sgd_step(numel, tensors),
            )
        )
    for numel in (1 << 24, 1 << 26) if quick else (1 << 23, 1 << 24, 1 << 25, 1 << 26):

        def make(numel=numel):
            a, b = torch.empty(numel), torch.randn(numel)
            return lambda: a.copy_(b)

        out.append((f"stream/copy/{numel}", {"op_class": "stream", "bytes": 2.0 * 4 * numel, "calls": 1}, _Lazy(make)))
    for numel in ((1 << 24,) if quick else (1 << 24, 1 << 25, 1 << 26)) if faults else ():  # 64, 128, 256 MiB

        def reuse(numel=numel):
            a = torch.empty(numel)
            return lambda: a.fill_(1.0)

        out.append((f"fault/reuse/{numel}", {"op_class": "fault_reuse", "bytes": 4.0 * numel}, _Lazy(reuse)))
        out.append(
            (
                f"fault/fresh/{numel}",
                {"op_class": "fault_fresh", "bytes": 4.0 * numel},
                (lambda numel=numel: torch.empty(numel).fill_(1.0)),
            )
        )


def probe(ctx, spec: str, repeats: int) -> None:
    """The same whole steps as the compute stage measures (same build, warm-up and repeats;
    validate/probe.py books them as the fitter does), for the machine's speed now against
    when it was calibrated."""
    for item in spec.split(";"):
        name, dataset, batches = item.rsplit(":", 2)
        for b in batches.split(","):
            rec = measure_model(ctx, name, dataset, int(b), repeats, rows=False)
            ctx.log.measurement(f"model/{name}/{dataset}/{b}", kind="probe", **rec)
    finish(ctx)


def main() -> None:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--models", default=None, help=f"model:dataset:b1,b2;... (default {DEFAULT_MODELS})")
    p.add_argument(
        "--fit-models",
        type=int,
        default=None,
        metavar="K",
        help="the first K entries of --models (the roofline's fit set and held-out model) are "
        "measured before the microbenchmarks, the others after them (default: all)",
    )
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument(
        "--probe",
        action="store_true",
        help="only the whole unhooked steps of --models, no rows and no microbenchmarks: "
        "validate.probe re-measures a point of a profile's compute stage with it",
    )
    args = p.parse_args()
    if args.probe and not args.models:
        p.error("--probe needs --models model:dataset:batch[;...], the points to measure again")
    ctx = setup(args, STAGE)
    if args.probe:
        probe(ctx, args.models, args.repeats or 5)
        return
    spec = args.models or (QUICK_MODELS if args.quick else DEFAULT_MODELS)
    repeats = args.repeats or (3 if args.quick else 5)
    items = spec.split(";")
    n_fit = len(items) if args.fit_models is None else max(0, min(args.fit_models, len(items)))
    runs = [[], []]  # before / after the microbenchmarks
    for i, item in enumerate(items):
        name, dataset, batches = item.rsplit(":", 2)
        for b in batches.split(","):
            runs[i >= n_fit].append((name, dataset, int(b)))
    micro = micro_benchmarks(ctx.quick, ctx.device)
    # Order: the tiny-op launch and conv-call costs (which the roofline fit may hold fixed), the fit models' rows,
    # then the other microbenchmarks and models. A short --time-budget thus still yields a
    # roofline fit: with the microbenchmarks first, a slow host spent a quick calibration's
    # whole compute share (0.4 x 30 s) on them and measured no model (CI, 2026-11-26).
    launch = [m for m in micro if m[1]["op_class"] in ("launch", "conv_call")]
    jobs = (
        [("micro", m) for m in launch]
        + [("model", r) for r in runs[0]]
        + [("micro", m) for m in micro if m not in launch]
        + [("model", r) for r in runs[1]]
    )
    keys = [f"micro/{j[0]}" if kind == "micro" else "model/{}/{}/{}".format(*j) for kind, j in jobs]
    plan(ctx, keys)
    done = agreed_done(ctx)
    stopped = False
    for (kind, job), k in zip(jobs, keys):
        if k in done:
            continue
        if not within_budget(ctx, 1.0 if kind == "micro" else 2.0):
            stopped = True
            break
        if kind == "micro":
            key, desc, fn = job
            fn()
            per = max(1e-7, min(timed(ctx, fn, 1)))
            inner = max(1, int(0.01 / per))
            times = [t / inner for t in timed(ctx, lambda: [fn() for _ in range(inner)], 5 if not ctx.quick else 3)]
            ctx.log.measurement(
                k, kind="micro", name=key, **desc, time_s=min(times), times_s=times, calls_per_sample=inner
            )
            if isinstance(fn, _Lazy):
                fn.release()
        else:
            name, dataset, batch = job
            rec = measure_model(ctx, name, dataset, batch, repeats)
            ctx.log.measurement(k, kind="model", **rec)
    finish(ctx, stopped_by_budget=stopped)


if __name__ == "__main__":
    main()
