"""Command bodies for ``simdl memplot`` and ``simdl plot --memory`` (kept here so cli.py stays small)."""

from __future__ import annotations

from typing import Any

from ..errors import SimdlError

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_path(output: str) -> None:
    """A figure path matplotlib can write: a known suffix, a file (not a folder) in a writable
    directory that exists (simdl.outpaths)."""
    from ..outpaths import check_output_file

    check_output_file(output, "-o", FIGURE_SUFFIXES)


def sim_memory_plot_command(run, output: str) -> int:
    """``simdl plot --memory``: each simulated rank class's memory over its last iteration,
    stacked by category (the source studies' per-rank memory figures)."""
    from ..sim.trace import _label
    from ..units import format_bytes
    from .plot import plot_memory

    check_figure_path(output)
    r = run.result
    curves = {}
    for c in sorted(run.memory):
        m = run.memory[c]
        if len(m.times):
            curves[_label(run.classes[c])] = (m.times - m.times[0], m.levels)
    if not curves:
        raise SimdlError("the simulated run recorded no memory events to plot")
    c = r.config
    title = f"{c.get('model')} {c.get('label')} {c.get('gpus')}x{c.get('gpu')} batch {c.get('batch_size')} (simulated):"
    path = plot_memory(
        curves,
        output,
        title=title,
        capacity_bytes=r.memory_capacity_bytes,
        overhead_bytes=r.memory_breakdown_bytes.get("other", 0.0),
    )
    print(f"wrote {path}: {len(curves)} rank class(es), peak tensors {format_bytes(r.peak_tensor_bytes)}")
    return 0


def allocator_curve(cuda, times):
    """(times, allocated, reserved, bytes outside the allocator) of the replay's steady iteration,
    each op at the time of the timeline event it comes from (``times[0]`` is the start)."""
    import numpy as np

    ev = cuda.event_of_op
    keep = ev >= 0
    t = np.asarray(times)[1 + ev[keep]]
    outside = cuda.parts["cuda_context"] + cuda.parts["nccl_buffers"]
    return t, cuda.allocated[keep], cuda.reserved[keep], outside


def memplot_command(
    kwargs: dict[str, Any], output: str, *, first_iteration: bool = False, cuda_alloc_conf: str | None = None
) -> int:
    """Predict with the analytic engine, then draw each rank role's memory over one iteration.
    ``cuda_alloc_conf``: allocator options in ``PYTORCH_CUDA_ALLOC_CONF`` syntax (else the
    environment variable, else the defaults; :mod:`.allocconf`)."""
    check_figure_path(output)
    from .allocconf import resolve_alloc_conf

    alloc_conf, alloc_source = resolve_alloc_conf(cuda_alloc_conf)
    from dataclasses import replace

    from ..cluster import allocate, load_cluster
    from ..predict import predict
    from ..strategies import StrategyConfig, build_plan, registry
    from ..units import format_bytes
    from ..workload.library import load_workload
    from ..workload.workload import Workload
    from .model import estimate_memory, memory_options, timeline_for
    from .place import analytic_memory_curve
    from .plot import plot_memory

    if kwargs.get("engine", "analytic") != "analytic":
        raise SimdlError("memplot draws the analytic schedule; `simdl plot --memory` draws the simulated one")
    r = predict(**kwargs)  # validates every argument and resolves the defaults
    c = r.config
    table = load_workload(
        c["model"],
        dataset=None if kwargs.get("input_shape") or kwargs.get("num_classes") else c["dataset"],
        input_shape=tuple(int(x) for x in c["input_shape"].split("x")),
        num_classes=c["num_classes"],
        vocab=c.get("vocab_size"),
    )
    wl = Workload(
        table=table,
        batch_size=c["batch_size"],
        optimizer=c["optimizer"],
        precision=c["precision"],
        memory_format=c["memory_format"],
        grad_accumulation=c["grad_accumulation"],
        activation_checkpointing=c["activation_checkpointing"],
    )
    spec = load_cluster(kwargs.get("cluster") or c["cluster"])
    alloc = allocate(replace(spec, cuda=c.get("cuda") or spec.cuda), c["gpus"], kwargs.get("nodes"))
    family = registry.get(c["strategy"])
    knobs = {
        key.field: key.to_field(v)
        for k, key in family.predict_keys.items()
        if (v := c.get(k) if kwargs.get(k) is None else kwargs[k]) is not None and family.applies(k, c["strategy"])
    }
    cfg = StrategyConfig(name=c["strategy"], **knobs)
    plan = build_plan(wl, alloc, cfg)
    opts = replace(memory_options(wl, plan, alloc), first_iteration=first_iteration)
    tl = timeline_for(wl, plan, alloc, opts)
    times, levels = analytic_memory_curve(wl, alloc, plan, tl)
    mem = estimate_memory(wl, plan, alloc, curves=True, allocator=alloc_conf)
    role = family.role
    title = f"{c['model']} {c['label']} {c['gpus']}x{c['gpu']} batch {c['batch_size']}:"
    allocator = None
    if mem.cuda is not None and not first_iteration:
        allocator = {role: allocator_curve(mem.cuda, times)}
    path = plot_memory(
        {role: (times, levels)},
        output,
        title=title,
        capacity_bytes=mem.capacity_bytes,
        overhead_bytes=mem.breakdown["other"],
        allocator=allocator,
    )
    extra = ""
    if mem.cuda is not None:
        extra = (
            f", max allocated {format_bytes(mem.cuda.max_allocated_bytes)}, "
            f"max reserved {format_bytes(mem.cuda.max_reserved_bytes)} ({alloc_source})"
        )
    print(
        f"wrote {path}: peak tensors {format_bytes(mem.peak_tensor_bytes)}{extra}, "
        f"device {format_bytes(mem.peak_bytes)}"
    )
    return 0
