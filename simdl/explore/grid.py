"""The parameters of a sweep: which keys exist, how text becomes values, how a grid expands.

A sweep is a Cartesian product of *axes*. Every key is one of

* a keyword of :func:`simdl.predict` (``model``, ``strategy``, ``gpus``, ``batch_size``,
  ``precision``, ``sharding``, ...; read from its signature, so a keyword added to
  ``predict`` is sweepable at once, typed by its annotation);
* a simulator option (``jitter``, ``seed``, ``iterations``, ``warmup``) or
  ``straggler_factor`` (rank 0's compute slowed by F, the sweepable form of
  ``--straggler rank=0,factor=F``); these need ``engine=sim``;
* a cluster override of :mod:`simdl.explore.whatif` (``intra_bandwidth_GB_per_s``,
  ``nic_Gb_per_s``, ``nics_per_node``, ...), which derives a what-if cluster in memory.

``strategy`` also takes the labels results print: ``fsdp-full``, ``fsdp-grad_op``,
``fsdp-hybrid``, ``fsdp-none`` set ``strategy=fsdp`` and the sharding at once, so that
DDP and the FSDP variants share one axis without meaningless DDP x sharding rows.

On the command line a value list is comma-separated (``--gpus 1,2,4,8``); ``default``
leaves a key unset for that point (``--set nodes=default,2``). Bad keys and values are one
:class:`~simdl.errors.SimdlError` line naming the key and what is accepted.
"""

from __future__ import annotations

import inspect
import itertools
import math
from functools import lru_cache
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..errors import SimdlError, unknown
from .whatif import CLUSTER_KEYS

#: Simulator-only options a sweep accepts, with their types.
SIM_KEYS: dict[str, type] = {"straggler_factor": float, "jitter": str, "seed": int, "iterations": int, "warmup": int}
SIM_HELP = {
    "straggler_factor": "rank 0's compute takes F x as long (simulator only; 1 = no straggler)",
    "jitter": "random compute-time factor DIST:SPREAD, e.g. lognormal:0.1 (simulator only)",
    "seed": "seed of the jitter draws (simulator only)",
    "iterations": "iterations to simulate (simulator only)",
    "warmup": "warm-up iterations excluded (simulator only)",
}
#: Keys that only the simulator reads; with the analytic engine they would be silently ignored.
SIM_ONLY = tuple(SIM_KEYS)
#: Cluster overrides that take numbers (``gpu`` takes a name).
_NUMERIC_CLUSTER_KEYS = tuple(k for k in CLUSTER_KEYS if k != "gpu")
#: Refuse grids beyond this many points: a typo (``--gpus 1,...,1024`` x ten axes) should not hang.
MAX_CONFIGS = 5_000_000


def predict_keys() -> dict[str, type]:
    """``simdl.predict``'s keywords and their value types: its named parameters (from its
    signature), then the strategy keywords the registry declares (typed by their options field)."""
    from ..predict import predict
    from ..strategies import registry
    from ..strategies.options import value_type

    out: dict[str, type] = {}
    for name, p in inspect.signature(predict).parameters.items():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        ann = str(p.annotation)
        # Annotations are strings (from __future__ import annotations): 'int | None', 'float', ...
        if "bool" in ann:
            out[name] = bool
        elif ann.startswith("int"):
            out[name] = int
        elif ann.startswith("float"):
            out[name] = float
        else:
            out[name] = str
    for k, key, options in registry.cli_options(set(out)):
        declared = key.cli_type if isinstance(key.cli_type, type) else str
        out[k] = value_type(options, key.field) if declared is str else declared
    return out


def accepted_keys() -> dict[str, type]:
    """Every key a sweep accepts, with its value type."""
    keys = dict(predict_keys())
    keys.update(SIM_KEYS)
    keys.update({k: float for k in _NUMERIC_CLUSTER_KEYS})
    keys["nics_per_node"] = int
    keys["gpu"] = str
    return keys


def describe_keys() -> str:
    """A table of the accepted keys for ``simdl sweep --list-keys``."""
    from ..strategies import registry

    also = [lab for lab in registry.labels() if lab not in registry.names()]
    lines = [f"predict keywords (as simdl predict; strategy also takes {', '.join(also)}):"]
    lines += [f"  {k:<26} {t.__name__}" for k, t in predict_keys().items()]
    lines.append("simulator options (need engine=sim):")
    lines += [f"  {k:<26} {SIM_HELP[k]}" for k in SIM_KEYS]
    lines.append("cluster overrides (a what-if variant of the cluster, built in memory):")
    lines += [f"  {k:<26} {v}" for k, v in CLUSTER_KEYS.items()]
    return "\n".join(lines)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def coerce(key: str, text: str, kind: type) -> Any:
    """One value from command-line text."""
    t = text.strip()
    if t == "":
        raise SimdlError(f"--set {key}: empty value in the list")
    if t.lower() == "default":
        return None
    if kind is bool:
        if t.lower() in _TRUE:
            return True
        if t.lower() in _FALSE:
            return False
        raise SimdlError(f"--set {key}={t}: accepted: true or false")
    if kind is int:
        try:
            return int(t)
        except ValueError:
            try:
                f = float(t)  # 1e3, 64.0
            except ValueError:
                f = math.nan
            if f.is_integer():
                return int(f)
            raise SimdlError(f"--set {key}={t}: {t!r} is not an integer") from None
    if kind is float:
        try:
            return int(t)  # keep 100 an integer (it prints as 100, not 100.0)
        except ValueError:
            pass
        try:
            v = float(t)
        except ValueError:
            raise SimdlError(f"--set {key}={t}: {t!r} is not a number") from None
        if not math.isfinite(v):
            raise SimdlError(f"--set {key}={t}: {t!r} is not a finite number")
        return v
    return t


def parse_values(key: str, text: str) -> list[Any]:
    """``'1,2,4'`` -> ``[1, 2, 4]`` typed for ``key``."""
    keys = accepted_keys()
    if key not in keys:
        raise SimdlError(f"--set: {unknown('key', key, keys)}")
    values = [coerce(key, part, keys[key]) for part in text.split(",")]
    return values


def parse_set(items: Iterable[str]) -> dict[str, list[Any]]:
    """``['batch_size=32,64', 'nic_Gb_per_s=100']`` -> ``{'batch_size': [32, 64], 'nic_Gb_per_s': [100.0]}``."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SimdlError(f"--set {item!r}: accepted: key=v1,v2,... (see simdl sweep --list-keys)")
        if key in out:
            raise SimdlError(f"--set {key}: given twice; put all its values in one comma list")
        out[key] = parse_values(key, text)
    return out


def _as_axis(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple, range)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays, pandas Index
        v = value.tolist()
        return v if isinstance(v, list) else [v]
    return [value]


def _check_value(key: str, value: Any) -> None:
    """Catch the mistakes that would otherwise fill a whole sweep with identical error rows."""
    if value is None:
        return
    if key == "strategy":
        split_strategy(value)
    elif key in _NUMERIC_CLUSTER_KEYS:
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        latency = key.endswith("latency_us")
        if not number or not (value >= 0 if latency else value > 0):
            raise SimdlError(f"{key}={value!r}: accepted: a number {'>=' if latency else '>'} 0")
    elif key in ("sharding", "precision", "memory_format", "optimizer", "algorithm", "engine"):
        from ..predict import ENGINES
        from ..strategies.config import ALGORITHMS, SHARDINGS
        from ..workload.workload import MEMORY_FORMATS, OPTIMIZERS, PRECISIONS

        accepted = {
            "sharding": SHARDINGS,
            "precision": PRECISIONS,
            "memory_format": MEMORY_FORMATS,
            "optimizer": OPTIMIZERS,
            "algorithm": ALGORITHMS,
            "engine": ENGINES,
        }[key]
        if value not in accepted:
            raise SimdlError(f"{key}: {unknown(key, value, accepted)}")
    elif key in ("gpus", "batch_size", "nodes", "grad_accumulation", "ps_servers"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SimdlError(f"{key}={value!r}: accepted: an integer >= 1")


def split_strategy(value: str) -> tuple[str, str | None]:
    """``'fsdp-grad_op'`` -> ``('fsdp', 'grad_op')``; ``'ddp'`` -> ``('ddp', None)``: a label's
    strategy name and its sharding (the registry's labels, simdl.strategies.registry)."""
    name, over = split_label(value)
    return name, over.get("sharding")


def split_label(value: str) -> tuple[str, dict[str, Any]]:
    """A strategy label -> (strategy name, the predict keywords the label fixes)."""
    from ..strategies import registry

    return registry.split_label(value)


class Grid:
    """Axes (key -> values) in the order given; iterating yields one parameter dict per point."""

    def __init__(self, axes: Mapping[str, Any]) -> None:
        keys = accepted_keys()
        self.axes: dict[str, list[Any]] = {}
        for key, value in axes.items():
            if key not in keys:
                raise SimdlError(unknown("sweep key", key, keys))
            values = _as_axis(value)
            if not values:
                raise SimdlError(f"{key}: an empty list of values")
            for v in values:
                _check_value(key, v)
            self.axes[key] = values
        if len(self) > MAX_CONFIGS:
            raise SimdlError(
                f"the grid has {len(self):,} configurations; accepted: at most {MAX_CONFIGS:,} "
                "(split it, or run it in pieces with --executor dask|ray)"
            )

    @property
    def swept(self) -> list[str]:
        """Keys with more than one value."""
        return [k for k, v in self.axes.items() if len(v) > 1]

    def __len__(self) -> int:
        return math.prod(len(v) for v in self.axes.values())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        keys = list(self.axes)
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            yield dict(zip(keys, combo))


def to_call(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One grid point -> (``predict`` kwargs, cluster overrides); unset (None) keys are dropped."""
    kwargs: dict[str, Any] = {}
    over: dict[str, Any] = {}
    label_options: dict[str, Any] = {}
    for k, v in params.items():
        if v is None:
            continue
        if k in CLUSTER_KEYS:
            over[k] = v
        elif k == "strategy":
            kwargs["strategy"], label_options = split_label(v)
        elif k == "straggler_factor":
            kwargs["straggler"] = f"rank=0,factor={v:g}"
        else:
            kwargs[k] = v
    kwargs.update(label_options)  # 'fsdp-full' says the sharding; it wins over a sharding axis
    _drop_inapplicable(kwargs)
    sim_given = [k for k in SIM_ONLY if params.get(k) is not None]
    if sim_given and kwargs.get("engine", "analytic") != "sim":
        raise SimdlError(f"{sim_given[0]} needs engine=sim (the analytic engine has no per-rank timeline)")
    return kwargs, over


@lru_cache(maxsize=1)
def default_strategy() -> str:
    """The strategy ``predict`` uses when none is given (read from its signature)."""
    from ..predict import predict

    return inspect.signature(predict).parameters["strategy"].default


def _drop_inapplicable(kwargs: dict[str, Any]) -> None:
    """Leave out of one point the strategy keywords its strategy does not take (a sharding
    axis on a DDP point): the point is the same configuration without them."""
    from ..strategies import registry

    name = kwargs["strategy"] if "strategy" in kwargs else default_strategy()
    spec = registry.get(name)
    for k in registry.predict_keys():
        if k in kwargs and not spec.applies(k, name):
            del kwargs[k]


def sim_keys_without_sim(axes: Mapping[str, Sequence[Any]]) -> str | None:
    """The first simulator-only key of a grid in which no point uses the simulator."""
    engines = set(_as_axis(axes.get("engine", "analytic")))
    if "sim" in engines:
        return None
    for k in SIM_ONLY:
        if k in axes and any(v is not None for v in _as_axis(axes[k])):
            return k
    return None
