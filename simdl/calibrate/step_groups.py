"""Where a profiled training step's time went, by group of ops (needs a torch.profiler trace).

Calibration's strategy stage (calibration/strategies.py) and validation runs
(validate/measure.py) profile a steady-state step with ``torch.profiler`` and split the time
of the training thread's top-level ops into groups, so that a prediction's split of a step
(``Result.step_split_s``: compute, copies, optimizer, ...) can be checked and fitted, not only
its sum:

* ``optimizer``: ops inside the optimizer step (torch.optim wraps every step in
  ``record_function("Optimizer.step#<Class>.step")``);
* ``copies``: ops that only move bytes (:data:`COPY_OPS`): FSDP2 packing and unpacking its
  flat collective buffers (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:
  ``_chunk_cat`` for the reduce-scatter input, ``split_with_sizes_copy`` /
  ``_foreach_copy_`` around the all-gather, ``copy_`` of the reduced gradients) and DDP
  filling its buckets, but also a model's own copies (``.contiguous()``);
* ``collective_calls``: ``c10d::`` ops the training thread ran (a blocking call's whole
  time, an asynchronous call's issue only);
* ``compute``: every other ``aten::`` op.

Time outside every op (Python, hooks, waits) is in no group.
"""

from __future__ import annotations

from typing import Any, Iterable

COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::_chunk_cat",
        "aten::cat",
        "aten::split_with_sizes_copy",
        "aten::_foreach_copy_",
        "aten::clone",
    }
)
OPTIMIZER_RANGE = "Optimizer.step#"
GROUPS = ("compute", "copies", "optimizer", "collective_calls")


def top_level_ops(
    spans: list[tuple[int, int, str]], optimizer: list[tuple[int, int]]
) -> list[tuple[int, int, str, str]]:
    """(start ns, end ns, name, group) of the top-level ops (not nested in another op of the
    list), in time order, each with its group (module docstring). ``spans``: (start ns, end
    ns, name) of ``aten::`` and ``c10d::`` ops on the training thread; ``optimizer``: (start
    ns, end ns) of its optimizer-step ranges."""
    out = []
    end = None
    for s, e, name in sorted(spans, key=lambda x: (x[0], -x[1])):
        if end is not None and s < end:
            continue  # nested in the previous top-level op
        end = e
        if any(a <= s < b for a, b in optimizer):
            group = "optimizer"
        elif name.startswith("c10d::"):
            group = "collective_calls"
        elif name in COPY_OPS:
            group = "copies"
        else:
            group = "compute"
        out.append((s, e, name, group))
    return out


def busy_groups(spans: list[tuple[int, int, str]], optimizer: list[tuple[int, int]]) -> dict[str, float]:
    """Seconds of top-level ops by group (:func:`top_level_ops`)."""
    out = dict.fromkeys(GROUPS, 0.0)
    for s, e, _, group in top_level_ops(spans, optimizer):
        out[group] += (e - s) / 1e9
    return out


def thread_spans(
    events: Iterable[Any], t0: int, t1: int, thread: int
) -> tuple[list[tuple[int, int, str]], list[tuple[int, int]]]:
    """(op spans, optimizer ranges) of ``thread`` that start in [t0, t1] ns, from kineto
    events (``prof.profiler.kineto_results.events()``): the input of :func:`busy_groups`.
    Spans are clipped at ``t1``; ``aten::`` ops with ``wait`` in their name are left out
    (waiting is not work)."""
    spans: list[tuple[int, int, str]] = []
    optimizer: list[tuple[int, int]] = []
    for e in events:
        s = e.start_ns()
        if s < t0 or s > t1 or e.start_thread_id() != thread:
            continue
        name = e.name()
        if name.startswith(OPTIMIZER_RANGE):
            optimizer.append((s, s + e.duration_ns()))
        elif name.startswith("c10d::") or (name.startswith("aten::") and "wait" not in name):
            spans.append((s, min(s + e.duration_ns(), t1), name))
    return spans, optimizer


def last_range(events: list[Any], mark: str) -> tuple[int, int, int]:
    """(start ns, end ns, thread) of the last range named ``mark`` (a ``record_function``
    around one step); RuntimeError when the profile has none."""
    marks = [e for e in events if e.name() == mark]
    if not marks:
        raise RuntimeError(f"no {mark} range in the profile")
    m = marks[-1]
    return m.start_ns(), m.start_ns() + m.duration_ns(), m.start_thread_id()


def marked_step_groups(events: Iterable[Any], mark: str) -> dict[str, Any]:
    """The groups of the last range named ``mark``: ``{"length_s": ..., "busy_by_group_s":
    {...}}``, on the thread that opened the range."""
    events = list(events)
    t0, t1, thread = last_range(events, mark)
    spans, optimizer = thread_spans(events, t0, t1, thread)
    return {
        "length_s": (t1 - t0) / 1e9,
        "busy_by_group_s": {k: round(v, 6) for k, v in busy_groups(spans, optimizer).items()},
    }
