"""A model of PyTorch's CUDA caching allocator, and replaying allocation sequences through it.

:mod:`.blocks` (size rules, pools), :mod:`.caching` (``CachingAllocator``, the reference),
:mod:`.expandable` (``expandable_segments:True``), :mod:`.replay` (sequences of
alloc/free/record_stream events and their statistics), :mod:`.fast` (the same replay in
one loop over plain data, without a trace), :mod:`.snapshot` (``torch.cuda.memory._snapshot()``
trace entries).
"""

from .blocks import AllocatorConfig, allocation_size, round_size
from .caching import CachingAllocator, OutOfMemory

__all__ = ["AllocatorConfig", "CachingAllocator", "OutOfMemory", "allocation_size", "round_size"]
