"""Timeline helpers of the rank classes: the data loader solved in closed form, and calls
pushed onto the SimPy timeline at an exact time."""

from __future__ import annotations

import heapq

import simpy
from simpy.events import NORMAL

PREFETCH_FACTOR = 2  # torch.utils.data.DataLoader(prefetch_factor=2): batches in flight per worker


class LoaderClock:
    """The same DataLoader as :class:`simdl.sim.ranks.Loader`, solved without timeline events.

    Batch ``k`` is the ``k``-th put into a queue of ``cap`` batches: a worker asks to put a
    batch ``batch_time`` after its previous put went through, and a put into a full queue
    goes through when the consumer takes batch ``k - cap`` (SimPy's ``Store``: puts served
    first come, first served). The consumer holds batch ``k`` at the later of its request
    and the batch's put.
    """

    __slots__ = ("batch_time", "cap", "_ready", "_puts", "_gets")

    def __init__(self, workers: int, batch_time: float):
        n = max(workers, 1)
        self.batch_time = batch_time
        self.cap = PREFETCH_FACTOR * n
        self._ready = [batch_time] * n  # each worker's next put request (a heap)
        self._puts: list[float] = []
        self._gets: list[float] = []

    def take(self, request: float) -> float | None:
        """When the consumer holds its next batch, asked for at ``request`` (None: no loader)."""
        if self.batch_time <= 0:
            return None
        k = len(self._gets)
        while len(self._puts) <= k:
            j = len(self._puts)
            p = heapq.heappop(self._ready)
            done = p if j < self.cap else max(p, self._gets[j - self.cap])
            self._puts.append(done)
            heapq.heappush(self._ready, done + self.batch_time)
        got = max(request, self._puts[k])
        self._gets.append(got)
        return got


def call_at(env: simpy.Environment, when: float, fn) -> None:
    """Run ``fn()`` on the timeline at exactly ``when`` (>= now).

    ``env.timeout(when - now)`` would fire at ``now + (when - now)``, which float rounding
    can move by one ulp; this pushes the event at ``when`` itself, as
    ``simpy.Environment.schedule`` does with ``now + delay`` (SimPy 4, core.py).
    """
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    ev.callbacks.append(lambda _e: fn())
    heapq.heappush(env._queue, (max(when, env.now), NORMAL, next(env._eid), ev))
