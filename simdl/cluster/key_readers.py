"""The readers of one file key each: how its value is checked, converted, written back and
described in the JSON Schema.

A :class:`Reader` is what a :func:`~.declare.knob` declares for its key: :class:`Num` (a
sourced number in the unit of its key), :class:`Int`, :class:`Text`, :class:`Flag`,
:class:`Choice`, :class:`Opaque` (a mapping another module reads), :class:`Custom` (its own
parser, writer and schema) and :class:`Table` (names to values of one reader). A nested
section's reader, :class:`~.declare.Section`, lives beside the loader it calls. Every
problem is one :class:`~simdl.errors.SimdlError` line naming the file, the key, the value
and what is accepted (the value-level checks in :mod:`.readers` word them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import SimdlError, unknown
from ..provenance import KINDS, Sourced, read
from ..units import split_key
from .readers import FrozenMap, _bounded, _count, _fraction, _nonneg, _sourced_count

Ctx = Mapping[str, Any]


class Reader:
    """How one key's value is checked, converted, written back and described."""

    accepted = ""

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> Any:
        raise NotImplementedError

    def dump(self, value: Any, key: str, owner: Any) -> Any:
        return copy.deepcopy(value)

    def schema(self, key: str) -> dict[str, Any]:
        return {}


# --------------------------------------------------------------------------- sourced numbers


@dataclass(frozen=True)
class Num(Reader):
    """A sourced number ``{value, kind, source}`` in the unit of its key. ``rule``: ``nonneg``
    (>= 0), ``positive`` (> 0), ``fraction`` (0 < v <= 1), ``fraction0`` (0 <= v < 1),
    ``count`` (a whole number > 0) or ``bounded`` (lo <= v <= hi, unitless keys only)."""

    rule: str = "nonneg"
    lo: float = 0.0
    hi: float = 0.0
    meaning: str = ""

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> Sourced | None:
        if self.rule == "fraction":
            return _fraction(raw, key, where)
        if self.rule == "fraction0":
            return _fraction(raw, key, where, allow_zero=True)
        if self.rule == "count":
            return _sourced_count(raw, key, where)
        if self.rule == "bounded":
            return _bounded(raw, key, where, self.lo, self.hi, self.meaning)
        if self.rule == "positive":
            return read(raw, key, where=where, strictly_positive=True)
        return _nonneg(raw, key, where)

    def dump(self, value: Sourced, key: str, owner: Any) -> dict[str, Any]:
        return value.to_dict(key)

    def schema(self, key: str) -> dict[str, Any]:
        table: dict[str, dict[str, Any]] = {
            "nonneg": {"minimum": 0},
            "positive": {"exclusiveMinimum": 0},
            "fraction": {"exclusiveMinimum": 0, "maximum": 1},
            "fraction0": {"minimum": 0, "exclusiveMaximum": 1},
            "count": {"exclusiveMinimum": 0, "multipleOf": 1},
            "bounded": {"minimum": self.lo, "maximum": self.hi},
        }
        bounds = table[self.rule]
        unit = split_key(key)[1]
        return {
            "type": "object",
            "required": ["value", "kind", "source"],
            "properties": {
                "value": {"type": "number", **bounds, **({"description": f"in {unit}"} if unit else {})},
                "kind": {"enum": list(KINDS)},
                "source": {"type": "string", "pattern": r"\S"},
            },
        }


NONNEG, POSITIVE, FRACTION, FRACTION0, COUNT = (
    Num("nonneg"),
    Num("positive"),
    Num("fraction"),
    Num("fraction0"),
    Num("count"),
)


def bounded(lo: float, hi: float, meaning: str) -> Num:
    return Num("bounded", lo, hi, meaning)


# --------------------------------------------------------------------------- plain values


@dataclass(frozen=True)
class Int(Reader):
    """A plain integer (a preset's shape, not a measured number); ``null`` only if allowed."""

    minimum: int = 1
    allow_null: bool = False

    @property
    def accepted(self) -> str:  # type: ignore[override]
        return f"an integer >= {self.minimum}" + (" or null (unlimited)" if self.allow_null else "")

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> int | None:
        return _count(raw, key, where, minimum=self.minimum, allow_null=self.allow_null)

    def schema(self, key: str) -> dict[str, Any]:
        if self.allow_null:
            return {"anyOf": [{"type": "integer", "minimum": self.minimum}, {"type": "null"}]}
        return {"type": "integer", "minimum": self.minimum}


@dataclass(frozen=True)
class Text(Reader):
    """A string; ``nonempty``: not blank; null reads as the empty string."""

    nonempty: bool = False

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> str:
        value = raw[key]
        if value is None and not self.nonempty:
            return ""
        if not isinstance(value, str) or (self.nonempty and not value.strip()):
            what = "a non-empty string" if self.nonempty else "a string"
            raise SimdlError(f"{where}: {key} = {value!r}; accepted: {what}")
        return value.strip()

    def schema(self, key: str) -> dict[str, Any]:
        return {"type": "string", "pattern": r"\S"} if self.nonempty else {"type": ["string", "null"]}


@dataclass(frozen=True)
class Flag(Reader):
    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> bool:
        value = raw[key]
        if not isinstance(value, bool):
            raise SimdlError(f"{where}: {key} = {value!r}; accepted: true or false")
        return value

    def schema(self, key: str) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Choice(Reader):
    """One of a fixed list of names (``options`` may be a callable, read when needed)."""

    options: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(self.options() if callable(self.options) else self.options)

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> str:
        value = raw[key]
        if value not in self.names():
            raise SimdlError(f"{where}: {key} = {value!r}; accepted: {', '.join(self.names())}")
        return value

    def schema(self, key: str) -> dict[str, Any]:
        return {"enum": list(self.names())}


@dataclass(frozen=True)
class Opaque(Reader):
    """A mapping kept as written, read by another module (named in the knob's description)."""

    shape: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> Any:
        value = raw[key]
        if value is not None and not isinstance(value, Mapping):
            raise SimdlError(f"{where}: {key} = {value!r}; accepted: a mapping")
        return dict(value or {})  # the loader's own copy of the file; to_dict copies it out

    def schema(self, key: str) -> dict[str, Any]:
        return dict(self.shape)


@dataclass(frozen=True)
class Custom(Reader):
    """A value with its own parser, writer and schema (regime tables, mesh wiring, ...)."""

    parser: Callable[[Any, str, Ctx], Any] = lambda value, where, ctx: value
    writer: Callable[[Any, Any], Any] = lambda value, owner: value
    shape: Mapping[str, Any] = field(default_factory=dict)

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> Any:
        return self.parser(raw[key], f"{where}: {key}", ctx)

    def dump(self, value: Any, key: str, owner: Any) -> Any:
        return self.writer(value, owner)

    def schema(self, key: str) -> dict[str, Any]:
        return dict(self.shape)


@dataclass(frozen=True)
class Table(Reader):
    """A mapping of names (``names``) to values of one reader, as a FrozenMap."""

    reader: Reader = NONNEG
    names: tuple[str, ...] = ()

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> FrozenMap:
        value = raw[key]
        if value is None:
            return FrozenMap()
        if not isinstance(value, Mapping):
            raise SimdlError(f"{where}: {key} must be a mapping, got {value!r}")
        for k in value:
            if k not in self.names:
                raise SimdlError(f"{where}: {key}: {unknown('key', k, self.names)}")
        return FrozenMap({k: self.reader.parse(value, k, f"{where}: {key}", ctx) for k in value})

    def dump(self, value: Mapping[str, Any], key: str, owner: Any) -> Any:
        return {k: self.reader.dump(v, k, owner) for k, v in value.items()}

    def schema(self, key: str) -> dict[str, Any]:
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: self.reader.schema(k) for k in self.names},
        }
