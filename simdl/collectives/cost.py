"""Latency-bandwidth (alpha-beta) costs of collectives over a ring or a tree.

For ``n`` ranks, a buffer of ``m`` bytes, a per-step latency ``alpha`` (s) and a
per-rank link bandwidth ``b`` (bytes/s, the bottleneck link of the ring):

  ring all-reduce       2(n-1) alpha + 2 (n-1)/n * m / b
  ring all-gather       (n-1) alpha  +   (n-1)/n * m / b      (m = gathered output)
  ring reduce-scatter   (n-1) alpha  +   (n-1)/n * m / b      (m = input)
  ring broadcast        (n-1) alpha  +             m / b      (pipelined chain)
  tree all-reduce       2 log2(n) alpha + 2 m / b             (pipelined reduce + broadcast)
  tree broadcast        log2(n) alpha   +   m / b
  send/recv             alpha + m / b

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (IJHPCA 2005), and NCCL's performance notes (nccl-tests doc/PERFORMANCE.md),
whose *bus bandwidth* is ``m / t`` times the factor :func:`bus_bytes_factor` returns:
the bandwidth a ring needs per link, which is why a collective's measured bus
bandwidth can be compared with a link's bandwidth directly.
"""

from __future__ import annotations

import math

from ..errors import unknown

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv")


def bus_bytes_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor (doc/PERFORMANCE.md)."""
    if n <= 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, send/recv


def collective_time(
    collective: str,
    nbytes: float,
    n: int,
    bandwidth: float,
    alpha: float,
    algorithm: str = "ring",
) -> float:
    """Seconds for one collective of ``nbytes`` over ``n`` ranks; 0 when n == 1."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    if algorithm == "auto":
        return min(
            collective_time(collective, nbytes, n, bandwidth, alpha, "ring"),
            collective_time(collective, nbytes, n, bandwidth, alpha, "tree"),
        )
    tree = algorithm == "tree"
    if collective == "all_reduce":
        if tree:
            return 2.0 * math.ceil(math.log2(n)) * alpha + 2.0 * nbytes / bandwidth
        return 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * nbytes / bandwidth
    if collective in ("all_gather", "reduce_scatter"):
        # NCCL implements these only as rings.
        return (n - 1) * alpha + (n - 1) / n * nbytes / bandwidth
    if collective in ("broadcast", "reduce"):
        if tree:
            return math.ceil(math.log2(n)) * alpha + nbytes / bandwidth
        return (n - 1) * alpha + nbytes / bandwidth
    if collective == "send_recv":
        return alpha + nbytes / bandwidth
    raise unknown("collective", collective, COLLECTIVES)
