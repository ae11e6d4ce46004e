"""Memory in figures as ``simdl predict`` prints it: the same categories, names and totals.

The CLI's breakdown (``Result.memory_breakdown_bytes``, :data:`simdl.result.MEMORY_CATEGORIES`)
counts the running op's temporaries under ``activations`` (simdl.memory.model.estimate_memory);
a figure drawn from the allocation timeline (:data:`simdl.memory.timeline.CATEGORIES`) folds
them the same way, so its legend names what the text output names.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..result import MEMORY_CATEGORIES
from ..units import format_bytes

FOLDED = {"temporaries": "activations"}  # timeline category -> the CLI category it is counted in


def label(category: str) -> str:
    """The name the CLI prints for a category: ``comm_buffers`` -> ``comm buffers``."""
    return category.replace("_", " ")


def cli_levels(levels: np.ndarray, categories: Sequence[str]) -> dict[str, np.ndarray]:
    """Timeline levels (one column per ``categories``) summed into the CLI's tensor categories,
    in the CLI's order (``other`` is not a tensor and has no column)."""
    levels = np.asarray(levels, dtype=float)
    out = {c: np.zeros(len(levels)) for c in MEMORY_CATEGORIES if c != "other"}
    for i, c in enumerate(categories):
        out[FOLDED.get(c, c)] += levels[:, i]
    return out


def peak_line(result) -> str:
    """The CLI's memory figure in words: ``peak memory 531 MiB (tensors 112 MiB + other 419 MiB)``."""
    other = result.memory_breakdown_bytes.get("other", result.peak_memory_bytes - result.peak_tensor_bytes)
    return (
        f"peak memory {format_bytes(result.peak_memory_bytes)} (tensors {format_bytes(result.peak_tensor_bytes)}"
        f" + other {format_bytes(other)})"
    )
