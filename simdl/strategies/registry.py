"""The strategy registry: one :class:`StrategySpec` per family owns everything strategy-specific.

A spec holds the family's options dataclass, its plan builder, its memory timeline, its
labels and the variants ``recommend`` tries, the ``predict`` keywords that apply to it, what
it adds to a result's config, and optional engine hooks (a closed form the analytic engine
uses instead of its stream schedule). Callers (predict, the CLI, sweep, recommend, the
memory model, calibration, the report) ask the registry and never compare strategy names,
so a new strategy is one module and one :func:`register` call, as torchtitan's
``register_train_spec`` / ``get_train_spec`` do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import SimdlError, unknown
from .options import flag

_SPECS: dict[str, "StrategySpec"] = {}  # family -> spec, in registration order
_BY_NAME: dict[str, "StrategySpec"] = {}  # strategy name -> spec


@dataclass(frozen=True)
class Variants:
    """What recommend knows about the candidates when it asks a spec for its variants."""

    multi_node: bool  # some candidate GPU count spans several nodes
    ps_servers: bool  # the cluster has parameter-server nodes
    allow_stale: bool  # the caller accepts stale (asynchronous) updates


@dataclass(frozen=True)
class PredictKey:
    """A ``predict`` keyword that sets an options field: ``to_field`` converts its value
    (``bucket_cap_mb`` in MiB -> ``bucket_cap_bytes``); ``names``: the strategy names it
    applies to (default: every name of the family); ``default_reason``: echoed under
    ``config["assumed"]`` when the caller leaves it out. A keyword the CLI does not declare
    itself becomes the option ``--key-name`` (``cli_type``, ``help``)."""

    field: str
    to_field: Callable[[Any], Any] = lambda v: v
    names: tuple[str, ...] | None = None
    default_reason: str | None = None
    cli_type: Callable[[str], Any] = str  # parses the CLI option's text (a keyword the CLI does not declare)
    help: str = ""  # the CLI option's help


@dataclass(frozen=True)
class StrategySpec:
    """Everything one strategy family defines. Only ``family``, ``names``, ``options``,
    ``build_plan`` and ``memory_timeline`` are required."""

    family: str
    names: tuple[str, ...]  # what --strategy accepts for this family
    options: type  # frozen dataclass of the family's knobs (simdl.strategies.options)
    build_plan: Callable[..., Any]  # (workload, cluster allocation, StrategyConfig) -> plan
    memory_timeline: Callable[..., Any]  # (workload, plan, MemoryOptions) -> simdl.memory.timeline.Timeline
    # predict keyword -> how it sets the options (the CLI option is the keyword with dashes)
    predict_keys: Mapping[str, PredictKey] = field(default_factory=dict)
    # label -> (strategy name, option overrides), simplest first: what sweep and recommend accept
    labels: Mapping[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    label: Callable[[Any], str] = lambda config: config.name  # a StrategyConfig's label
    variants: Callable[[Variants], tuple[str, ...]] = lambda v: ()  # labels recommend tries by default
    echo: Callable[[Any, Any], Mapping[str, Any]] = lambda config, plan: {}  # added to result.config
    stale: Callable[[str], bool] = lambda name: False  # whether a strategy name trains on stale updates
    role: str = "every rank"  # who the per-rank memory figure describes
    # Workers exchange with servers rather than with each other: each worker has its own
    # step stream and updates carry a staleness (the report shows both).
    client_server: bool = False
    evaluate: Callable[..., Any] | None = None  # analytic closed form: (workload, cluster, plan, rows, rates)
    # NCCL communicators one rank opens (process groups that run collectives), for the device
    # memory their buffers take (simdl.memory.device): plan -> count.
    communicators: Callable[[Any], int] = lambda plan: 0
    # Which framework's host calls and copy kernels simdl.costs.gpu_framework prices on a GPU
    # rank: "reducer" (DDP's C++ reducer), "per_unit" (FSDP2's per-unit hooks and copies) or
    # "" (none priced).
    gpu_framework: str = ""
    # The predict keywords of a step calibration/strategies.py measured, beyond its label's
    # options (how that script sets the family up): label options -> keywords.
    calibration_step: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda options: {}

    def option_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options))

    def applies(self, key: str, name: str) -> bool:
        """Whether predict keyword or options field ``key`` applies to strategy ``name``."""
        pk = self.predict_keys.get(key)
        if pk is not None:
            return pk.names is None or name in pk.names
        return key in self.option_fields()


def register(spec: StrategySpec) -> StrategySpec:
    """Add a family; refuses a family or strategy name that is already taken."""
    if spec.family in _SPECS:
        raise ValueError(f"strategy family {spec.family!r} is already registered")
    taken = [n for n in spec.names if n in _BY_NAME]
    if taken:
        raise ValueError(f"strategy name {taken[0]!r} is already registered by {_BY_NAME[taken[0]].family!r}")
    _SPECS[spec.family] = spec
    for n in spec.names:
        _BY_NAME[n] = spec
    _PREDICT_KEYS.clear()
    return spec


def unregister(family: str) -> None:
    """Remove a family (tests that register a toy strategy clean up with this)."""
    spec = _SPECS.pop(family)
    for n in spec.names:
        _BY_NAME.pop(n, None)
    _PREDICT_KEYS.clear()


def specs() -> tuple[StrategySpec, ...]:
    return tuple(_SPECS.values())


def names() -> tuple[str, ...]:
    """Every strategy name, in registration order."""
    return tuple(_BY_NAME)


def get(name: str) -> StrategySpec:
    """The spec of strategy ``name``; an unknown name raises with the accepted list."""
    spec = _BY_NAME.get(name) if isinstance(name, str) else None
    if spec is None:
        raise unknown("strategy", name, names())
    return spec


def of_plan(plan: Any) -> StrategySpec:
    """The spec that built ``plan`` (its ``family``)."""
    spec = _SPECS.get(getattr(plan, "family", ""))
    if spec is None:
        raise SimdlError(
            f"plan of strategy {getattr(plan, 'strategy', '?')!r} names no registered family; "
            f"accepted: {', '.join(_SPECS)}"
        )
    return spec


def labels() -> tuple[str, ...]:
    """Every label sweep and recommend accept, simplest first."""
    return tuple(lab for s in _SPECS.values() for lab in s.labels)


def split_label(value: str) -> tuple[str, dict[str, Any]]:
    """``'fsdp-grad_op'`` -> ``('fsdp', {'sharding': 'grad_op'})``; a plain name -> ``(name, {})``."""
    if isinstance(value, str):
        if value in _BY_NAME:
            return value, {}
        for s in _SPECS.values():
            if value in s.labels:
                name, over = s.labels[value]
                return name, dict(over)
    accepted = list(names()) + [lab for lab in labels() if lab not in _BY_NAME]
    raise SimdlError(f"strategy: {unknown('strategy', value, accepted)}")


def order(label: str) -> int:
    """A label's place in the simplicity order (the registry's labels, simplest first);
    labels the registry does not list come last."""
    known = labels()
    return known.index(label) if label in known else len(known)


def variants(context: Variants) -> list[str]:
    """The labels recommend ranks by default, over every family."""
    return [lab for s in _SPECS.values() for lab in s.variants(context)]


def is_stale(name: str) -> bool:
    """Whether strategy ``name`` (or label) trains on stale updates."""
    try:
        base, _ = split_label(name)
    except SimdlError:
        return False
    return get(base).stale(base)


def field_default(key: str) -> Any:
    """The default of options field ``key`` in the first family that has it; a sentinel
    (equal to nothing) when no family does."""
    for s in _SPECS.values():
        for f in dataclasses.fields(s.options):
            if f.name == key:
                return f.default
    return _NO_DEFAULT


_NO_DEFAULT = object()


def is_client_server(name: str) -> bool:
    """Whether strategy ``name`` (or label) has workers and servers; False for names no
    family registers (a record of a strategy this simdl does not know)."""
    try:
        base, _ = split_label(name)
    except SimdlError:
        return False
    return get(base).client_server


def cli_options(declared: set[str]) -> list[tuple[str, PredictKey, type]]:
    """Strategy keywords the CLI has no option for yet: each with its declaration and the
    options dataclass of the family that declares it first."""
    out: list[tuple[str, PredictKey, type]] = []
    for s in _SPECS.values():
        for k, key in s.predict_keys.items():
            if k not in declared and k not in (o for o, _, _ in out):
                out.append((k, key, s.options))
    return out


def predict_keys() -> tuple[str, ...]:
    """Every strategy-specific predict keyword, over all families."""
    if not _PREDICT_KEYS:
        _PREDICT_KEYS.extend(dict.fromkeys(k for s in _SPECS.values() for k in s.predict_keys))
    return tuple(_PREDICT_KEYS)


_PREDICT_KEYS: list[str] = []  # predict_keys(), rebuilt after a family is registered or removed


def refuse_inapplicable(name: str, given: Mapping[str, Any]) -> None:
    """One-line error for the first given keyword (or options field) that strategy ``name``
    does not take, naming the strategies that do."""
    spec = get(name)
    for key, value in given.items():
        if value is None or spec.applies(key, name):
            continue
        takers = [n for s in _SPECS.values() for n in s.names if s.applies(key, n)]
        if not takers:
            raise unknown(f"option of strategy {name!r}", key, tuple(spec.predict_keys) + spec.option_fields())
        option = "--" + key.replace("_", "-") if key in predict_keys() else flag(key)
        shown = option if value is True else f"{option} {value!r}"  # a flag is named alone
        raise SimdlError(f"{shown} applies to {', '.join(takers)}; strategy {name!r} does not take it")
