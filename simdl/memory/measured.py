"""Live tensor bytes of a real CPU run from ``torch.profiler``'s allocation events (needs torch).

``torch.profiler.profile(profile_memory=True)`` reports every allocation and free of the
CPU allocator as a ``[memory]`` event with its address and signed size. The running sum
of the sizes is the live bytes -- *if* every free is reported. It is not, under gloo:

c10's ``ProfiledCPUMemoryReporter::Delete`` (c10/core/CPUAllocator.cpp) reports a free
only when the *freeing* thread has the profiler's thread-local state. gloo's worker
threads have it while they run a collective (``ProcessGroupGloo::AsyncWork::execute``
installs the caller's ``ThreadLocalState``) but not afterwards, when the worker drops its
reference to the finished work. Whenever that reference is the last one, the work's
buffers are freed unseen. The clone that ``ProcessGroupGloo::reduce_scatter_tensor_coalesced``
makes of every reduce-scatter input (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp) is
such a buffer: measured here on 2-rank FSDP2 steps, 1-2 of ViT-B/32's 13 units per step
lose their free, which way the race goes changes from step to step, and a running sum
since the profiler started climbs by tens of MB per step (the ~30% over-measurement of
the first FSDP validation runs).

:func:`live_curve` therefore pairs each allocation with the free of the same address.
An allocation whose free never appears is taken as freed when the outermost profiler
range around its allocation on its thread ends (below the measured-step marker): for the
reduce-scatter clone that is the FSDP post-backward hook whose ``wait()`` released it,
which is where the same clone's free *is* seen in the steps where the race goes the
other way. Frees of allocations the profiler never saw (made before it started, or on a
thread without its state: RPC receive threads) are dropped, so the curve only holds
what it saw being allocated. Allocations still live at the end of the profile are live.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Allocation:
    """One allocation of the CPU allocator, with its free (if the profiler saw it)."""

    start_ns: int
    end_ns: int | None  # None: still live when the profile ended
    nbytes: int
    repaired: bool  # the free was not reported; end_ns is the end of the enclosing range


def _outer_range_end(node, stop_names: tuple[str, ...]) -> int | None:
    """End time of the outermost ancestor of ``node`` that is not a step marker."""
    best = None
    p = node.parent
    while p is not None:
        if p.name in stop_names:
            break
        best = p
        p = p.parent
    return best.end_time_ns if best is not None else None


def allocations(
    profiler_result,
    device: str = "cpu",
    step_markers: tuple[str, ...] = (),
    collective_input_ops: tuple[str, ...] | None = None,
) -> list[Allocation]:
    """Paired allocations of ``device`` from ``prof.profiler.kineto_results`` (see module doc).

    ``collective_input_ops``: ops whose still-open output is taken as a collective's input freed
    unseen (default ``_COLLECTIVE_INPUT_OPS``); a run where that op builds long-lived buffers
    instead passes ``()``."""
    input_ops = _COLLECTIVE_INPUT_OPS if collective_input_ops is None else collective_input_ops
    from torch._C._profiler import _EventType

    events = []
    stack = list(profiler_result.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.typed[0] == _EventType.Allocation:
            a = n.typed[1]
            if a.device.type == device:
                events.append((n.start_time_ns, a.alloc_size, a.ptr, n))
    events.sort(key=lambda e: (e[0], e[1] < 0))
    open_: dict[int, tuple[int, int, object]] = {}
    out: list[Allocation] = []

    for t, size, ptr, node in events:
        if size > 0:
            if ptr in open_:  # the address came back without a reported free: freed before t
                t0, size0, node0 = open_.pop(ptr)
                end = _outer_range_end(node0, step_markers)
                out.append(Allocation(t0, min(end, t) if end is not None else t, size0, True))
            open_[ptr] = (t, size, node)
        elif size < 0:
            prev = open_.pop(ptr, None)
            if prev is not None:
                out.append(Allocation(prev[0], t, prev[1], False))
    # Still open at the end: live (the model's parameters, the optimizer state, ...).
    # An allocation that its allocating range outlived was freed unseen (module doc).
    last = events[-1][0] if events else 0
    for t0, size, node in open_.values():
        end = _outer_range_end(node, step_markers)
        if end is not None and end < last and _freed_unseen(node, input_ops):
            out.append(Allocation(t0, end, size, True))
        else:
            out.append(Allocation(t0, None, size, False))
    return out


# Ops whose output is handed to a collective and may be released by the backend's thread:
# c10d's broadcast_coalesced (torch/csrc/distributed/c10d/comm.cpp; DDP's initial
# _sync_module_states and its per-forward buffer broadcast) flattens each bucket with
# flatten_dense_tensors and broadcasts the flat tensor; gloo's AsyncWork holds it too, and
# when the worker thread drops the last reference the free goes unreported. Seen on 2-rank
# DDP mnist_cnn steps: in about half the runs one rank keeps a phantom params-sized buffer.
_COLLECTIVE_INPUT_OPS = ("aten::flatten_dense_tensors",)


def _freed_unseen(node, input_ops: tuple[str, ...] = _COLLECTIVE_INPUT_OPS) -> bool:
    """An allocation inside a c10d collective op whose free was never reported: the
    backend's own buffer (gloo's reduce-scatter clone), released with its work; or the
    output of an op that builds a collective's input (``_COLLECTIVE_INPUT_OPS``)."""
    p = node.parent
    while p is not None:
        if p.name.startswith("c10d::") or p.name.startswith("gloo:") or p.name in input_ops:
            return True
        p = p.parent
    return False


def live_curve(allocs: list[Allocation]) -> tuple[np.ndarray, np.ndarray]:
    """(times in ns, live bytes after each event), frees before allocations at one instant."""
    if not allocs:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    t = np.asarray([a.start_ns for a in allocs] + [a.end_ns for a in allocs if a.end_ns is not None], dtype=np.int64)
    d = np.asarray([a.nbytes for a in allocs] + [-a.nbytes for a in allocs if a.end_ns is not None], dtype=float)
    order = np.lexsort((d, t))  # at equal times frees (negative) first
    return t[order], np.cumsum(d[order])


def peak_between(times: np.ndarray, live: np.ndarray, t0: int, t1: int) -> tuple[float, float]:
    """(live bytes when ``t0`` starts, peak live bytes in [t0, t1])."""
    if len(times) == 0:
        return 0.0, 0.0
    k0 = int(np.searchsorted(times, t0, side="left"))
    start = float(live[k0 - 1]) if k0 > 0 else 0.0
    k1 = int(np.searchsorted(times, t1, side="right"))
    inside = live[k0:k1]
    return start, float(max(start, inside.max())) if len(inside) else start
