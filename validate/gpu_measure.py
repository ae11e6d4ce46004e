"""Real single-device training steps for :mod:`validate.gpu_check`: time, memory, kernels.

One configuration (model, image size, batch, precision) is built the way simdl's zoo
builds it (:func:`simdl.workload.zoo.build_adapted`, the model its workload table was
traced from, adaptations such as ViT's ``image_size`` recorded), trained with
``torch.optim.SGD(momentum=0.9)`` on one batch of random images made on the device, fp32
or under ``torch.autocast(dtype=torch.bfloat16)``:

* warm-up steps, then timed steps: a CUDA event at each step boundary, the step before
  the last one waited for (one step in flight, as a loop that reads the previous loss),
  ``torch.cuda.synchronize()`` at the end; on a CPU, ``time.perf_counter``;
* ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` since the configuration
  started (its allocator cache emptied first) and the device's used memory from NVML;
* one more step under ``torch.profiler``: every kernel's name, calls, seconds and the op
  that launched it (on a CPU, every op's self time);
* the GPU's clocks, power and temperature just after the timed steps.

A configuration past its own deadline stops between steps (:class:`Stopped`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

from . import gpu_device


class Stopped(Exception):
    """The configuration ran past its deadline; ``done`` says how far it got."""

    def __init__(self, done: str):
        super().__init__(done)
        self.done = done


def build(cfg: dict, device):
    """(model, optimizer, images, labels, adaptation note) on ``device``."""
    import torch

    from simdl.workload.datasets import get_dataset
    from simdl.workload.zoo import build_adapted

    ds = get_dataset(cfg["dataset"])
    torch.manual_seed(0)
    # On meta first: the input shape simdl traced (padded where the model needs it), then the
    # model itself on the device, every parameter initialised by its own constructor.
    _, note, shape = build_adapted(cfg["model"], ds.input_shape, ds.num_classes, device="meta")
    model, _, _ = build_adapted(cfg["model"], shape, ds.num_classes, device=str(device))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(cfg["batch"], *shape, device=device)
    y = torch.randint(0, ds.num_classes, (cfg["batch"],), device=device)
    return model, opt, x, y, note, list(shape)


def _autocast(cfg: dict, device):
    import torch

    if cfg["precision"] == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model, opt, x, y, cfg: dict, device) -> None:
    import torch.nn.functional as F

    opt.zero_grad(set_to_none=True)
    with _autocast(cfg, device):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


class StepClock:
    """Step boundaries: CUDA events (one step kept in flight) or perf_counter on a CPU."""

    def __init__(self, device):
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
            if len(self.marks) >= 2:
                self.marks[-2].synchronize()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def step_times(self) -> list[float]:
        if self.cuda:
            self.torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _check(deadline: float, done: str) -> None:
    if time.time() > deadline:
        raise Stopped(done)


def profile_step(model, opt, x, y, cfg: dict, device) -> dict:
    """One step under torch.profiler: kernels (CUDA) or ops' self time (CPU), by name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    gpu_device.sync(device)
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        train_step(model, opt, x, y, cfg, device)
        gpu_device.sync(device)
    wall = time.perf_counter() - t0
    agg: dict[str, list] = {}
    if device.type == "cuda":
        events = prof.events()
        for e in events:
            if e.device_type == torch.autograd.DeviceType.CUDA:
                a = agg.setdefault(e.name, [0, 0.0, ""])
                a[0] += 1
                a[1] += e.time_range.elapsed_us() / 1e6
        for name, op in _launching_ops(events).items():
            if name in agg:
                agg[name][2] = op
        source = (
            "CUDA kernels and memory operations (torch.profiler, ProfilerActivity.CUDA), seconds each, "
            "with the op that launched most of each kernel's time"
        )
    else:
        for e in prof.key_averages():
            if e.self_cpu_time_total > 0:
                agg[e.key] = [e.count, e.self_cpu_time_total / 1e6, e.key]
        source = "CPU ops' self time (torch.profiler key_averages, self_cpu_time_total)"
    kernels = sorted(([n, c, s, op] for n, (c, s, op) in agg.items()), key=lambda k: -k[2])
    return {"kernels": kernels, "source": source, "profiled_step_s": wall, "kernel_time_s": sum(k[2] for k in kernels)}


def _launching_ops(events) -> dict[str, str]:
    """Kernel name -> the op that launched most of its time. The profiler hands each CPU op
    the kernels its launches ran (``FunctionEvent.kernels``, durations in us): the innermost
    op, e.g. ``aten::cudnn_convolution`` for a cuDNN kernel whose name says only ``sgemm``."""
    share: dict[str, dict[str, float]] = {}
    for e in events:
        for k in getattr(e, "kernels", None) or ():
            by_op = share.setdefault(k.name, {})
            by_op[e.name] = by_op.get(e.name, 0.0) + float(k.duration)
    return {name: max(by_op, key=by_op.get) for name, by_op in share.items()}


def measure(cfg: dict, device, deadline: float, warmup: int, steps: int) -> tuple[dict, dict]:
    """(measured fields, kernel profile) of one configuration; raises :class:`Stopped`."""
    import torch

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model, opt, x, y, note, shape = build(cfg, device)
    out: dict[str, Any] = {"adaptation": note, "input_shape": shape}
    t_build = time.time()
    for i in range(warmup):
        _check(deadline, f"{i} of {warmup} warm-up steps")
        if i == 0:
            out["first_step_at"] = time.time()
        train_step(model, opt, x, y, cfg, device)
    gpu_device.sync(device)
    out["warmup_s"] = time.time() - t_build
    clock = StepClock(device)
    clock.mark()
    for i in range(steps):
        _check(deadline, f"warm-up and {i} of {steps} timed steps")
        out.setdefault("first_step_at", time.time())
        train_step(model, opt, x, y, cfg, device)
        clock.mark()
    times = clock.step_times()
    out["steady_step_times_s"] = times
    out["step_time_s"] = {
        "median": statistics.median(times),
        "mean": statistics.fmean(times),
        "min": min(times),
        "max": max(times),
        "n": len(times),
    }
    out["steps_per_rank"] = warmup + steps + 1
    out["timing"] = (
        "CUDA events at step boundaries, torch.cuda.synchronize at the end"
        if cuda
        else "time.perf_counter at step boundaries"
    )
    if cuda:
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        out["max_memory_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    else:
        out["peak_allocated_bytes"] = None
        out["memory_note"] = "no CUDA allocator on a CPU: allocator peaks are not measured"
    out["device_state"] = gpu_device.state(device)
    _check(deadline, f"warm-up and {steps} timed steps, before the profiled step")
    prof = profile_step(model, opt, x, y, cfg, device)
    out["profiled_step_s"] = prof["profiled_step_s"]
    out["profile_kernel_time_s"] = prof["kernel_time_s"]
    del model, opt, x, y
    return out, prof
