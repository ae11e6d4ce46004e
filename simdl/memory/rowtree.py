"""The module-call tree of a workload table, as the memory timeline needs it.

Table rows are module calls in *pre-order* (a container's row comes before its
children's, because rows open at the forward pre-hook). A container's own ops (a
residual add, a concatenation, a layer-scale multiply) mostly run *after* its
children, so the memory timeline orders rows by when their forward *returns*
(post-order): row ``i``'s event sits after the last row of its subtree, inner rows
first. Backward runs that order reversed (autograd frees a node's saved tensors as
soon as the node has run: ``release_variables`` in torch/csrc/autograd/engine.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..workload.table import WorkloadTable

# Row types whose parameters autocast does not cast to 16 bits (norms run in fp32 or
# take fp32 affine parameters; aten/src/ATen/autocast_mode.cpp fp32 / promote lists).
NORM_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "LayerNorm2d", "InstanceNorm2d")


@dataclass(frozen=True, eq=False)
class RowTree:
    end: np.ndarray  # row i's subtree is rows [i, end[i])
    depth: np.ndarray
    post: np.ndarray  # row indices in post-order (forward-return order)
    post_pos: np.ndarray  # position of each row in ``post``
    leaf: np.ndarray  # bool
    prev_leaf: np.ndarray  # previous leaf in pre-order, -1 for the first leaf
    first_leaf: np.ndarray  # first leaf (pre-order) of each row's subtree
    merge: np.ndarray  # bool: non-root container with own kernels (residual add, concat)
    castable: np.ndarray  # bool: own parameters autocast would cast (not a norm)


def _is_inside(name: str, parent: str) -> bool:
    return parent == "" or name.startswith(parent + ".")


@lru_cache(maxsize=128)
def row_tree(table: WorkloadTable) -> RowTree:
    names = table.names
    n = len(names)
    end = np.arange(1, n + 1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    stack: list[int] = []
    for j, name in enumerate(names):
        while stack and not _is_inside(name, names[stack[-1]]):
            end[stack.pop()] = j
        depth[j] = len(stack)
        stack.append(j)
    for i in stack:
        end[i] = n
    leaf = end == np.arange(1, n + 1)
    # Post-order: by the last row of the subtree, deeper (inner) rows first.
    post = np.lexsort((-depth, end - 1))
    post_pos = np.empty(n, dtype=np.int64)
    post_pos[post] = np.arange(n)
    prev_leaf = np.full(n, -1, dtype=np.int64)
    last = -1
    for i in range(n):
        if leaf[i]:
            prev_leaf[i] = last
            last = i
    first_leaf = np.empty(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        first_leaf[i] = i if leaf[i] else first_leaf[i + 1]
    kernels = table.fixed["fwd_kernels"]
    merge = (~leaf) & (kernels > 0) & (np.arange(n) > 0)
    types = table.types
    castable = np.array([t not in NORM_TYPES for t in types], dtype=bool)
    return RowTree(end, depth, post, post_pos, leaf, prev_leaf, first_leaf, merge, castable)


def block_rows(table: WorkloadTable) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of the model's blocks (its FSDP wrap classes), outermost only.

    These are the regions ``--activation-checkpointing`` wraps in ``torch.utils.checkpoint``.
    """
    from ..workload.zoo import DEFAULT_WRAP_TYPES

    types = set(DEFAULT_WRAP_TYPES.get(table.model, ()))
    tree = row_tree(table)
    out: list[tuple[int, int]] = []
    stop = -1
    for i, t in enumerate(table.types):
        if i >= stop and t in types:
            stop = int(tree.end[i])
            out.append((i, stop))
    return out


def block_names(table: WorkloadTable) -> list[str]:
    """Module names of the blocks :func:`block_rows` returns (one per distinct module)."""
    seen: list[str] = []
    for start, _ in block_rows(table):
        name = table.names[start]
        if name not in seen:
            seen.append(name)
    return seen


def recompute_ranges(table: WorkloadTable, start: int, stop: int) -> list[tuple[int, int]]:
    """Checkpointed row ranges inside ``[start, stop)``, in the order backward reaches them.

    Backward runs rows in reverse, so the block latest in forward is recomputed first.
    A strategy adds one forward task per range (``direction="fwd"``) before the backward
    of those rows: activation checkpointing's cost in time.
    """
    out = []
    for a, b in block_rows(table):
        lo, hi = max(a, start), min(b, stop)
        if lo < hi:
            out.append((lo, hi))
    return out[::-1]


def add_recompute(workload, add, deps: tuple[int, ...], start: int, stop: int) -> tuple[int, ...]:
    """Add the recompute tasks of rows ``[start, stop)`` to a plan, after ``deps``.

    ``add(task) -> index`` appends a task. Returns the dependencies the backward of those
    rows must wait for (the last recompute task, or ``deps`` unchanged). A no-op unless
    ``workload.activation_checkpointing``.
    """
    if not workload.activation_checkpointing:
        return deps
    from ..strategies.plan import COMPUTE, Task

    for a, b in recompute_ranges(workload.table, start, stop):
        deps = (add(Task(f"recompute[{a}:{b}]", COMPUTE, "bwd", deps=deps, rows=(a, b), direction="fwd")),)
    return deps
