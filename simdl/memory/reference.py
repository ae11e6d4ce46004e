"""PyTorch's own memory figures for one training step, to check simdl's timeline against (needs torch).

Two references, both run under ``FakeTensorMode`` on CPU (shapes and dtypes only, no
memory, seconds per model):

* :func:`memtracker_step`: ``torch.distributed._tools.mem_tracker.MemTracker`` over a
  single-rank step (what every DDP rank holds, bar DDP's C++ buckets, which no
  TorchDispatchMode sees).
* :func:`fsdp_memtracker_step`: ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``
  over an FSDP2 (``fully_shard``) step with a fake process group of ``world`` ranks.

The step is what simdl models: ``loss = cross_entropy(model(x), y); loss.backward();
opt.step(); opt.zero_grad()`` (``set_to_none=True``). Two steps run untracked first
(warm-up): they create the optimizer state, FSDP's lazy state and - importantly - fill
DTensor's sharding-propagation cache for every op of the steady-state step (SGD's first
step creates its momentum buffers with per-tensor clones, the later ones use foreach ops). Without that, the propagation's fake *global*
tensors, made under the same FakeTensorMode, are counted by the tracker as optimizer
memory (an artefact worth 9x the sharded parameters for ResNet-18 with foreach SGD; no
GPU ever allocates them). The second step is tracked: it is the steady state whose peak
simdl reports.

"Tensor memory" here = the tracker's ``Total``: the bytes of every live storage, as
``torch.cuda.memory_allocated`` counts them but without the caching allocator's 512-byte
rounding (the trackers round only CUDA tensors, ``_WeakRefInfo._calculate_mem_consumed``;
these run on CPU). Categories are mapped onto simdl's (see :data:`CATEGORY_MAP`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..errors import SimdlError

# Untracked steps before the tracked one: the first creates the optimizer state (SGD's
# momentum buffers by a per-tensor clone), the second runs the steady-state foreach ops
# once, so that DTensor has cached their sharding propagation.
WARMUP_STEPS = 2

# Tracker category (enum member name) -> simdl timeline category.
CATEGORY_MAP = {
    "PARAM": "params",
    "BUFFER": "params",
    "SHARDED_PARAM": "params",
    "UNSHARDED_PARAM": "params",
    "GRAD": "grads",
    "SHARDED_GRAD": "grads",
    "UNSHARDED_GRAD": "grads",
    "OPT": "optimizer",
    "ACT": "activations",
    "INP": "activations",
    "OTH": "activations",
    "TEMP": "temporaries",
    "ALL_GATHER": "comm_buffers",
    "REDUCE_SCATTER": "comm_buffers",
}


@dataclass
class Reference:
    """A tracker's peak: total bytes and the breakdown at that moment."""

    peak_bytes: float
    breakdown: dict[str, float]  # simdl categories
    raw: dict[str, float]  # the tracker's own categories
    timeline: list[float] = field(default_factory=list)  # total after each tracked op (if asked)


def _fold(raw: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in raw.items():
        if k == "Total":
            continue
        c = CATEGORY_MAP.get(k, "other")
        out[c] = out.get(c, 0.0) + float(v)
    return out


def _snapshot(tracker) -> dict[str, float]:
    peak = tracker.get_tracker_snapshot("peak")
    if not peak:
        return {"Total": 0.0}
    (dev,) = peak.values()
    return {getattr(k, "name", str(k)): float(v) for k, v in dev.items()}


def _optimizer(name: str, params, foreach: bool):
    import torch

    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
    if name not in ("sgd", "momentum"):
        raise SimdlError(f"optimizer {name!r} has no torch.optim class to measure against")
    momentum = 0.9 if name == "momentum" else 0.0
    return torch.optim.SGD(params, lr=0.1, momentum=momentum, foreach=foreach)


def _build(model_name: str, input_shape, num_classes: int):
    from ..workload.zoo import build_adapted

    model, _, shape = build_adapted(model_name, tuple(input_shape), num_classes)
    return model, tuple(shape)


def _checkpoint_blocks(model, block_names: list[str]) -> None:
    """Wrap each named block's forward in ``torch.utils.checkpoint`` (non-reentrant)."""
    from torch.utils.checkpoint import checkpoint

    for name in block_names:
        block = model.get_submodule(name)
        forward = block.forward

        def wrapped(*args, _f=forward, **kwargs):
            return checkpoint(_f, *args, use_reentrant=False, **kwargs)

        block.forward = wrapped


def _step(model, opt, x_shape, batch: int, num_classes: int, precision: str):
    import torch
    import torch.nn.functional as F

    x = torch.randn((batch, *x_shape))
    y = torch.zeros(batch, dtype=torch.long)
    ctx: contextlib.AbstractContextManager = contextlib.nullcontext()
    if precision in ("bf16", "fp16-amp"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        ctx = torch.autocast("cpu", dtype=dtype)
    with ctx:
        loss = F.cross_entropy(model(x), y)
    del x, y
    loss.backward()
    del loss
    opt.step()
    opt.zero_grad()


def _record(tracker, timeline: list[float]) -> None:
    orig = tracker._update_peak_stats

    def update(state):
        orig(state)
        total = sum(d.get("Total", 0) for d in tracker._curr_mem_snap.values())
        timeline.append(float(total))

    tracker._update_peak_stats = update


def memtracker_step(
    model_name: str,
    input_shape,
    num_classes: int,
    batch: int,
    optimizer: str = "momentum",
    *,
    foreach: bool = True,
    checkpoint_blocks: list[str] | None = None,
    precision: str = "fp32",
    record: bool = False,
) -> Reference:
    """MemTracker's peak over a steady-state single-rank training step.

    ``foreach=True`` mimics CUDA, where PyTorch picks the foreach optimizer kernels
    (torch/optim/optimizer.py, ``_default_to_fused_or_foreach``); on CPU it would not.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from ..workload.extract import gpu_attention

    model, shape = _build(model_name, input_shape, num_classes)
    if checkpoint_blocks:
        _checkpoint_blocks(model, checkpoint_blocks)
    timeline: list[float] = []
    with FakeTensorMode(allow_non_fake_inputs=True), gpu_attention(any_device=True):
        model = model.to_empty(device="cpu")
        opt = _optimizer(optimizer, model.parameters(), foreach)
        for _ in range(WARMUP_STEPS):  # optimizer state exists, caches are warm (module doc)
            _step(model, opt, shape, batch, num_classes, precision)
        tracker = MemTracker()
        tracker.track_external(model, opt)
        if record:
            _record(tracker, timeline)
        with tracker:
            _step(model, opt, shape, batch, num_classes, precision)
        raw = _snapshot(tracker)
    del torch
    return Reference(raw["Total"], _fold(raw), raw, timeline)


@contextlib.contextmanager
def fake_process_group(world: int):
    """A fake process group of ``world`` ranks (this process is rank 0)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _label_unsharded(tracker, model) -> None:
    """Register the unsharded parameters' (now empty) storages as ``Unsharded Param``.

    FSDP2 re-allocates them with ``storage.resize_`` (``alloc_storage``), which the tracker
    only follows for storages it already knows; otherwise it first meets them as the
    ``out=`` of the all-gather copy-out and files them as ``Activation``. The totals are
    the same either way; this only puts the bytes in the right category.
    """
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = module._get_fsdp_state()._fsdp_param_group
        for fsdp_param in group.fsdp_params if group else ():
            for t in getattr(fsdp_param, "all_gather_outputs", None) or []:
                tracker._update_and_maybe_create_winfos(t, _FSDPRefType.UNSHARDED_PARAM)


def fsdp_memtracker_step(
    model_name: str,
    input_shape,
    num_classes: int,
    batch: int,
    world: int,
    unit_names: list[str],
    optimizer: str = "momentum",
    *,
    sharding: str = "full",
    replicas: int = 1,
    foreach: bool = True,
    checkpoint_blocks: list[str] | None = None,
    precision: str = "fp32",
    record: bool = False,
) -> Reference:
    """FSDPMemTracker's peak over a steady-state FSDP2 step on rank 0 of ``world`` fake ranks.

    ``unit_names``: the modules to ``fully_shard`` (inner first), then the root.
    ``sharding``: full (reshard_after_forward=True), grad_op (False); ``replicas`` > 1
    gives HSDP on a (replicas, world // replicas) mesh (FSDP1's HYBRID_SHARD, and NO_SHARD
    with world // replicas == 1).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from ..workload.extract import gpu_attention

    model, shape = _build(model_name, input_shape, num_classes)
    if checkpoint_blocks:
        _checkpoint_blocks(model, checkpoint_blocks)
    mp = MixedPrecisionPolicy()
    if precision in ("bf16", "fp16-amp"):
        low = torch.bfloat16 if precision == "bf16" else torch.float16
        mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    timeline: list[float] = []
    with fake_process_group(world):
        if replicas > 1:
            mesh = init_device_mesh("cpu", (replicas, world // replicas), mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh("cpu", (world,))
        reshard = sharding in ("full", "hybrid")
        for name in unit_names:
            fully_shard(model.get_submodule(name), mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        with FakeTensorMode(allow_non_fake_inputs=True), gpu_attention(any_device=True):
            model = model.to_empty(device="cpu")
            opt = _optimizer(optimizer, model.parameters(), foreach)
            for _ in range(WARMUP_STEPS):  # see the module doc
                _step(model, opt, shape, batch, num_classes, "fp32")
            tracker = FSDPMemTracker(model, opt)
            if record:
                _record(tracker, timeline)
            with tracker:
                _label_unsharded(tracker, model)
                _step(model, opt, shape, batch, num_classes, "fp32")
            raw = _snapshot(tracker)
    return Reference(raw["Total"], _fold(raw), raw, timeline)


# -- real CPU runs ---------------------------------------------------------------------------
def _live_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (DTensors: their local shards)."""
    seen, total = set(), 0
    for x in tensors:
        x = getattr(x, "_local_tensor", x)
        st = x.untyped_storage()
        if st.data_ptr() in seen or st.nbytes() == 0:
            continue
        seen.add(st.data_ptr())
        total += st.nbytes()
    return total


def measured_step_peak(model, opt, shape, batch: int, num_classes: int) -> tuple[float, list[float]]:
    """Peak bytes a real training step allocates on the CPU, and the allocation curve.

    ``torch.profiler`` with ``profile_memory=True`` records the CPU allocator's
    allocations and frees; :mod:`simdl.memory.measured` pairs them (repairing the frees
    gloo's worker threads make unseen); the step's curve is their live bytes on top of
    what is live before it (parameters, buffers, optimizer state, counted from their
    storages).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from .measured import allocations, live_curve

    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    base = _live_bytes(list(model.parameters()) + list(model.buffers()) + state)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(model, opt, shape, batch, num_classes, "fp32")
    _, curve = live_curve(allocations(prof.profiler.kineto_results))
    if len(curve) == 0:
        return float(base), [float(base)]
    return float(base + max(curve.max(), 0)), [float(base + c) for c in curve]


def real_single_step(model_name: str, input_shape, num_classes: int, batch: int, optimizer: str = "momentum") -> float:
    """Peak allocated bytes of a real single-process CPU training step (after a warm-up step)."""
    import torch

    torch.manual_seed(0)
    model, shape = _build_real(model_name, input_shape, num_classes)
    opt = _optimizer(optimizer, model.parameters(), foreach=False)
    _step(model, opt, shape, batch, num_classes, "fp32")
    return measured_step_peak(model, opt, shape, batch, num_classes)[0]


def _build_real(model_name: str, input_shape, num_classes: int):
    from ..workload.zoo import build_adapted

    model, _, shape = build_adapted(model_name, tuple(input_shape), num_classes, device="cpu")
    model.train()
    return model, tuple(shape)
