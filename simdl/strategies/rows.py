"""Helpers mapping parameters and modules to rows of the workload table."""

from __future__ import annotations

from functools import lru_cache

from ..workload.table import WorkloadTable


@lru_cache(maxsize=64)
def _first_rows(table: WorkloadTable) -> tuple[int, ...]:
    first: dict[str, int] = {}
    for i, name in enumerate(table.names):
        first.setdefault(name, i)
    out = []
    for p in table.params:
        # A parameter's gradient is complete after the backward of the module's first
        # call (backward runs in reverse). A module never seen as a row (its ops ran in an
        # ancestor's forward, e.g. ViT's class token) belongs to its closest ancestor row.
        name = p.module
        while name not in first and name:
            name = name.rpartition(".")[0]
        out.append(first.get(name, 0))
    return tuple(out)


def first_row_of_params(table: WorkloadTable) -> tuple[int, ...]:
    """For each parameter (registration order), the first table row of its module."""
    return _first_rows(table)
