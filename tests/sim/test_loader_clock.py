"""The solved data loader (LoaderClock) gives the batch times of the SimPy one (Loader)."""

import numpy as np
import pytest
import simpy

from simdl.sim.clock import LoaderClock
from simdl.sim.ranks import Loader


def _simpy_gets(workers, batch_time, gaps):
    """Times the consumer holds each batch when it asks ``gaps[k]`` after holding batch k-1."""
    env = simpy.Environment()
    loader = Loader(env, workers, batch_time)
    got = []

    def consumer():
        for gap in gaps:
            if gap > 0:
                yield env.timeout(gap)
            ev = loader.get()
            if ev is not None:
                yield ev
            got.append(env.now)

    env.process(consumer())
    env.run(until=1e6)
    return got


@pytest.mark.parametrize("workers", [0, 1, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_same_batch_times_as_the_simpy_store(workers, seed):
    rng = np.random.default_rng(seed)
    batch_time = 1e-3
    # Gaps from much faster to much slower than the loader: empty and full queues both occur.
    gaps = rng.choice([0.0, 1e-4, 5e-4, 2e-3, 8e-3], size=60).tolist()
    want = _simpy_gets(workers, batch_time, gaps)
    clock = LoaderClock(workers, batch_time)
    got, now = [], 0.0
    for gap in gaps:
        request = now + gap if gap > 0 else now
        now = clock.take(request)
        got.append(now)
    assert got == want


def test_no_loader_without_a_batch_time():
    assert LoaderClock(4, 0.0).take(1.0) is None
