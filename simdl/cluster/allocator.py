"""The host C allocator's thresholds, where a device's memory comes from glibc malloc (CPU ranks).

glibc serves a request at or above ``M_MMAP_THRESHOLD`` with a fresh mmap, unmapped again
at free, and every other request from its heap, which it trims back to the OS (``systrim``)
when a free leaves ``M_TRIM_THRESHOLD`` or more unused at the heap's top. Both thresholds
move at run time: freeing a mapped block of up to ``DEFAULT_MMAP_THRESHOLD_MAX`` (4 MiB x
sizeof(long) = 32 MiB on 64-bit) raises the mmap threshold to that block's size and sets the
trim threshold to twice it (malloc/malloc.c, ``__libc_free``: ``mp_.mmap_threshold =
chunksize (p); mp_.trim_threshold = 2 * mp_.mmap_threshold``; mallopt(3)). A training step
frees buffers of many MiB, so in steady state the thresholds sit at (up to) 32 and 64 MiB.

Memory given back either way faults in again, page by page, when it is next used: that is
what ``host.page_fault_ns_per_byte`` prices. GPU memory (PyTorch's caching allocator keeps
what it frees) pays none of it; a profile without a page-fault cost gets ``None`` here.
"""

from __future__ import annotations

from .allocate import Cluster

GLIBC_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def host_mmap_threshold(cluster: Cluster) -> float:
    """Bytes above which the host's allocator maps each buffer fresh: the profile's
    ``host.mmap_threshold_MiB``, else glibc's steady-state value."""
    given = cluster.spec.host.mmap_threshold_bytes
    return given.value if given else float(GLIBC_MMAP_THRESHOLD_MAX)


def mmap_threshold(cluster: Cluster) -> float | None:
    """:func:`host_mmap_threshold` where page faults are priced; None elsewhere (GPU
    profiles, CPU profiles without ``host.page_fault_ns_per_byte``)."""
    pf = cluster.spec.host.page_fault_per_byte
    if pf is None or pf.value == 0:
        return None
    return host_mmap_threshold(cluster)


def trim_threshold(cluster: Cluster) -> float | None:
    """Bytes of free heap top at which glibc trims the heap: the profile's
    ``host.trim_threshold_MiB`` (ranks run with MALLOC_TRIM_THRESHOLD_), else twice the mmap
    threshold, as the dynamic adjustment sets it (module docstring); None where no faults
    are priced."""
    m = mmap_threshold(cluster)
    if m is None:
        return None
    given = cluster.spec.host.trim_threshold_bytes
    return given.value if given else 2.0 * m
