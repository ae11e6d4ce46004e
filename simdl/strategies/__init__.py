"""Strategies: workload x cluster allocation x settings -> plan.

Adding a strategy is one module with a ``build_plan(workload, cluster, config)`` and
one line in :data:`REGISTRY` (as torchtitan's register_train_spec does).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Callable

from . import ddp, fsdp, ps
from .config import STRATEGY_NAMES, StrategyConfig
from .plan import PSPlan, SpmdPlan

REGISTRY: dict[str, Callable] = {
    "ddp": ddp.build_plan,
    "fsdp": fsdp.build_plan,
    "ps-sync": ps.build_plan,
    "ps-async": ps.build_plan,
    "ps-ssp": ps.build_plan,
}
assert set(REGISTRY) == set(STRATEGY_NAMES)


def build_plan(workload, cluster, config: StrategyConfig) -> SpmdPlan | PSPlan:
    """The plan for one iteration; memoised, since sweeps ask for the same plan at many batch sizes.

    A plan never depends on the batch size, the dataset size or the epoch count (those
    enter through the cost of the table rows), so they are normalised out of the key.
    """
    key = dataclasses.replace(workload, batch_size=1, train_samples=1, epochs=1)
    return _build_plan(key, cluster, config)


@lru_cache(maxsize=4096)
def _build_plan(workload, cluster, config: StrategyConfig) -> SpmdPlan | PSPlan:
    return REGISTRY[config.name](workload, cluster, config)


__all__ = ["REGISTRY", "StrategyConfig", "SpmdPlan", "PSPlan", "build_plan"]
