"""Per-rank GPU memory: peak and breakdown for every strategy."""

from .model import MemoryEstimate, estimate_memory

__all__ = ["MemoryEstimate", "estimate_memory"]
