"""simdl.memory.measured: pairing the profiler's allocation events, repairing unreported frees.

The event tree is hand-made (the shape ``experimental_event_tree()`` returns), so the
gloo race that loses a free (module doc of simdl.memory.measured) is reproduced exactly.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.torch


class Node:
    def __init__(self, name, start, end=None, parent=None, alloc=None):
        from torch._C._profiler import _EventType

        self.name, self.start_time_ns, self.end_time_ns = name, start, end if end is not None else start
        self.parent, self.children = parent, []
        if parent is not None:
            parent.children.append(self)
        kind = _EventType.Allocation if alloc else _EventType.TorchOp
        fields = (
            SimpleNamespace(ptr=alloc[0], alloc_size=alloc[1], device=SimpleNamespace(type="cpu")) if alloc else None
        )
        self.typed = (kind, fields)


def _mem(parent, t, ptr, size):
    return Node("[memory]", t, parent=parent, alloc=(ptr, size))


class Result:
    def __init__(self, roots):
        self.roots = roots

    def experimental_event_tree(self):
        return self.roots


def test_unreported_free_is_repaired_at_the_end_of_the_enclosing_range():
    from simdl.memory.measured import allocations, live_curve, peak_between

    step = Node("validate::measured_step", 0, 1000)
    params = _mem(None, -10, 0xA, 4000)  # live throughout (allocated before the step)
    hook = Node("FSDP::post_backward_reduce", 100, 300, parent=step)
    rs = Node("c10d::_reduce_scatter_base_", 110, 120, parent=hook)
    _mem(rs, 111, 0xB, 800)  # gloo's clone: freed on the worker thread, unreported
    _mem(hook, 105, 0xC, 400)
    _mem(hook, 290, 0xC, -400)  # an ordinary free, reported
    later = Node("aten::empty", 500, 510, parent=step)
    _mem(later, 501, 0xD, 100)
    _mem(later, 509, 0xD, -100)
    _mem(None, 600, 0xE, -50)  # free of something allocated before profiling: dropped
    allocs = allocations(Result([params, step]), step_markers=("validate::measured_step",))
    clone = next(a for a in allocs if a.nbytes == 800)
    assert clone.repaired and clone.end_ns == 300  # the hook's end, not the step's
    t, live = live_curve(allocs)
    start, peak = peak_between(t, live, 0, 1000)
    assert start == 4000 and peak == 5200
    assert live[-1] == 4000  # back to the parameters: nothing leaks into the next step


def test_an_address_reused_without_a_free_closes_the_first_allocation():
    from simdl.memory.measured import allocations

    root = Node("aten::clone", 0, 50)
    _mem(root, 1, 0xB, 800)
    second = Node("[memory]", 20, alloc=(0xB, 800))  # the allocator handed the address out again
    allocs = sorted(allocations(Result([root, second])), key=lambda a: a.start_ns)
    assert allocs[0].repaired and allocs[0].end_ns == 20  # min(range end 50, reuse at 20)
    assert allocs[1].end_ns is None and not allocs[1].repaired


def test_flattened_broadcast_input_freed_by_gloo_is_repaired():
    """DDP's initial broadcast_coalesced flattens the parameters; gloo's thread may free the
    flat buffer unseen. It must not stay live through the steps (a phantom params-sized
    buffer on one rank in about half of the 2-rank DDP runs)."""
    from simdl.memory.measured import allocations, live_curve, peak_between

    params = _mem(None, -10, 0xA, 4000)
    flat = Node("aten::flatten_dense_tensors", 0, 20)
    cat = Node("aten::cat", 1, 19, parent=flat)
    _mem(cat, 2, 0xF, 4000)  # the flat copy; its free is never reported
    step = Node("validate::measured_step", 100, 1000)
    act = Node("aten::empty", 200, 210, parent=step)
    _mem(act, 201, 0xD, 100)
    _mem(act, 209, 0xD, -100)
    allocs = allocations(Result([params, flat, step]), step_markers=("validate::measured_step",))
    buf = next(a for a in allocs if a.start_ns == 2)
    assert buf.repaired and buf.end_ns == 20
    t, live = live_curve(allocs)
    assert peak_between(t, live, 100, 1000)[1] == 4100
    # an ordinary allocation whose free is never seen (a parameter) stays live
    assert next(a for a in allocs if a.start_ns == -10).end_ns is None
