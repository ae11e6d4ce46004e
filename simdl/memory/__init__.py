"""Per-rank GPU memory: allocation timeline, peak and breakdown for every strategy.

Submodules: :mod:`.timeline` (events per rank), :mod:`.model` (peak, breakdown),
:mod:`.sequence` (the tensors the step allocates, in order), :mod:`.allocator` (PyTorch's
CUDA caching allocator), :mod:`.cuda` and :mod:`.device` (GPU memory as nvidia-smi shows
it), :mod:`.place` (event times on a schedule), :mod:`.maxbatch`, :mod:`.plot`
(matplotlib, imported only there) and :mod:`.reference` (PyTorch's trackers; torch).
Names are resolved lazily so that importing this package stays cheap and free of
import cycles with :mod:`simdl.strategies`.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "MemoryEstimate": "model",
    "estimate_memory": "model",
    "timeline_for": "model",
    "MemoryOptions": "timeline",
    "Timeline": "timeline",
    "build_timeline": "timeline",
    "CATEGORIES": "timeline",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(name)
