"""Strategies: workload x cluster allocation x settings -> plan.

Each family (DDP, FSDP, parameter server) is one module that ends with one
:func:`~simdl.strategies.registry.register` call: its :class:`~simdl.strategies.registry.StrategySpec`
owns its options, plan builder, memory timeline, labels, variants and engine hooks
(as torchtitan's register_train_spec does). Nothing outside this package names a strategy.
"""

from __future__ import annotations

import dataclasses

from ..cluster.linkfree import LinkFreeMemo
from . import ddp, fsdp, ps, registry, zero  # noqa: E402,F401 -- each registers its family
from .config import StrategyConfig
from .plan import PSPlan, SpmdPlan
from .registry import StrategySpec, register


def build_plan(workload, cluster, config: StrategyConfig) -> SpmdPlan | PSPlan:
    """The plan for one iteration; memoised, since sweeps ask for the same plan at many batch sizes.

    A plan never depends on the batch size, the dataset size or the epoch count (those
    enter through the cost of the table rows), so they are normalised out of the key; nor
    on the cluster's links (:mod:`simdl.cluster.linkfree`), so clusters that differ only
    in links share one plan.
    """
    from ..cluster.linkfree import link_free_key

    key = dataclasses.replace(workload, batch_size=1, train_samples=1, epochs=1)
    return _build_plan((key, link_free_key(cluster), config), key, cluster, config)


def _build(workload, cluster, config: StrategyConfig) -> SpmdPlan | PSPlan:
    return config.spec.build_plan(workload, cluster, config)


_build_plan = LinkFreeMemo(_build)


__all__ = ["registry", "register", "StrategySpec", "StrategyConfig", "SpmdPlan", "PSPlan", "build_plan"]
