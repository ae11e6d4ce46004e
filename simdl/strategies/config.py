"""Strategy settings: which strategy, its family's typed options, and the collective algorithm.

``StrategyConfig(name="fsdp", sharding="grad_op")`` looks the name up in the registry
(an unknown name raises with the accepted list) and builds the family's options dataclass
(simdl.strategies.options) from the knobs given; a knob the strategy does not take raises,
naming the strategies that do, unless it is left at its own family's default. The options' fields read through the config
(``config.sharding``), so plan builders read their knobs directly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import unknown
from . import registry
from .options import DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES, FSDPOptions, choices, parse_wrap

ALGORITHMS = ("ring", "tree", "auto")
SHARDINGS = choices(FSDPOptions, "sharding")
BACKWARD_PREFETCH = choices(FSDPOptions, "backward_prefetch")


@dataclass(frozen=True, init=False)
class StrategyConfig:
    name: str
    options: Any  # the family's options dataclass
    algorithm: str = "auto"

    def __init__(self, name: str = "ddp", options: Any = None, algorithm: str = "auto", **knobs: Any) -> None:
        spec = registry.get(name)
        if algorithm not in ALGORITHMS:
            raise unknown("collective algorithm", algorithm, ALGORITHMS)
        own = spec.option_fields()
        # A knob of another family left at that family's default says nothing: dropped.
        knobs = {k: v for k, v in knobs.items() if k in own or v != registry.field_default(k)}
        registry.refuse_inapplicable(name, knobs)
        if options is None:
            opts: Any = spec.options(**knobs)
        elif not isinstance(options, spec.options):
            raise TypeError(f"strategy {name!r} takes {spec.options.__name__}, not {type(options).__name__}")
        else:
            opts = dataclasses.replace(options, **knobs) if knobs else options  # type: ignore[type-var]
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "options", opts)
        object.__setattr__(self, "algorithm", algorithm)
        for f in dataclasses.fields(opts):  # read directly (config.sharding), not through __getattr__
            if not hasattr(StrategyConfig, f.name):  # a field named like a property stays in .options
                object.__setattr__(self, f.name, getattr(opts, f.name))

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        options = self.__dict__.get("options")
        if options is None or not hasattr(options, item):
            raise AttributeError(f"strategy {self.__dict__.get('name')!r} has no option {item!r}")
        return getattr(options, item)

    @property
    def spec(self) -> registry.StrategySpec:
        return registry.get(self.name)

    @property
    def label(self) -> str:
        return self.spec.label(self)


def __getattr__(name: str) -> Any:
    if name == "STRATEGY_NAMES":  # read when asked, so that families registered later appear
        return registry.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "StrategyConfig",
    "ALGORITHMS",
    "SHARDINGS",
    "BACKWARD_PREFETCH",
    "DDP_BUCKET_CAP_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "parse_wrap",
]
