"""FSDP units: which modules a wrap policy turns into separately sharded units.

A unit owns the parameters of its module's subtree minus those of nested units; the
root unit owns whatever no other unit claims (stem, head, class tokens). Units are
what FSDP all-gathers and reduce-scatters as one flat buffer.

Policies:
- ``block``: wrap every module whose class is one of the model's block classes
  (``simdl.workload.zoo.DEFAULT_WRAP_TYPES``), as ModuleWrapPolicy / per-block
  ``fully_shard`` calls do (torchtitan shards each transformer block this way).
- ``size:N``: torch.distributed.fsdp.wrap.size_based_auto_wrap_policy, bottom-up: a
  module is wrapped when the parameters not yet wrapped in its subtree reach N.
- ``none``: a single unit (the root).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..workload.table import WorkloadTable
from .config import parse_wrap

# torch/distributed/fsdp/wrap.py: size_based_auto_wrap_policy(min_num_params=int(1e8)).
SIZE_POLICY_DEFAULT_MIN_PARAMS = int(1e8)


@dataclass(frozen=True)
class Unit:
    name: str  # module name; "" is the root
    numel: int
    n_tensors: int
    param_numels: tuple[int, ...] = ()  # each parameter's numel, registration order


@dataclass(frozen=True)
class Units:
    units: tuple[Unit, ...]  # in order of first forward use; the root first
    row_unit: np.ndarray  # unit index of each table row
    note: str

    @property
    def largest_numel(self) -> int:
        return max(u.numel for u in self.units)


def _parent(name: str) -> str:
    return name.rpartition(".")[0] if name else ""


def _wrapped_modules(table: WorkloadTable, policy: str, min_params: int) -> tuple[list[str], str]:
    if policy == "none":
        return [], "one unit (no wrapping)"
    if policy == "block":
        from ..workload.zoo import DEFAULT_WRAP_TYPES

        types = set(DEFAULT_WRAP_TYPES.get(table.model, ()))
        if types:
            names = [m.name for m in table.modules if m.name and m.type in types]
            # Nested blocks are their own units; FSDP handles nesting the same way.
            return names, f"wrap {', '.join(sorted(types))} as units"
        policy, min_params = "size", SIZE_POLICY_DEFAULT_MIN_PARAMS
    # size policy, bottom-up over the module tree
    remaining: dict[str, int] = {}
    wrapped: list[str] = []
    for m in reversed(table.modules):  # named_modules lists parents before children
        remaining[m.name] = remaining.get(m.name, 0) + m.params
        if m.name and remaining[m.name] >= min_params:
            wrapped.append(m.name)
            remaining[m.name] = 0
        if m.name:
            parent = _parent(m.name)
            remaining[parent] = remaining.get(parent, 0) + remaining[m.name]
    return wrapped, f"size-based wrap, min {min_params:,} parameters per unit"


@lru_cache(maxsize=256)
def fsdp_units(table: WorkloadTable, wrap: str) -> Units:
    policy, min_params = parse_wrap(wrap)
    wrapped, note = _wrapped_modules(table, policy, min_params)
    wrapped_set = set(wrapped)

    def owner(module: str) -> str:
        name = module
        while name:
            if name in wrapped_set:
                return name
            name = _parent(name)
        return ""

    numel: dict[str, int] = {"": 0}
    tensors: dict[str, int] = {"": 0}
    sizes: dict[str, list[int]] = {"": []}
    for p in table.params:
        u = owner(p.module)
        numel[u] = numel.get(u, 0) + p.numel
        tensors[u] = tensors.get(u, 0) + 1
        sizes.setdefault(u, []).append(p.numel)
    order: list[str] = [""]
    row_owner = [owner(n) for n in table.names]
    for u in row_owner:
        if u not in order and u in numel:
            order.append(u)
    # Units with parameters that never ran (unused modules) still get sharded.
    order += [u for u in numel if u not in order]
    index = {u: i for i, u in enumerate(order)}
    row_unit = np.array([index.get(u, 0) for u in row_owner], dtype=np.int64)
    units = tuple(Unit(u, numel.get(u, 0), tensors.get(u, 0), tuple(sizes.get(u, ()))) for u in order)
    return Units(units, row_unit, note)
