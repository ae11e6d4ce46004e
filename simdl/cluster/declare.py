"""One declaration per file section, and the small generic loader that reads it.

A section of a device or cluster file is a frozen dataclass whose fields carry their
declaration (:func:`knob`): the file key (the unit in the key), the reader that checks
and converts the value, whether the key is required, and a description. From that one
declaration come

* :func:`parse` -- the section from a file's mapping, every problem one
  :class:`~simdl.errors.SimdlError` line naming the file, the key, the value and what is
  accepted (the readers in :mod:`.readers` word them);
* :func:`dump` -- the file form again (``parse(dump(x)) == x``);
* :func:`section_schema` -- a JSON Schema of the section (:mod:`.schema` assembles the
  files' schemas from these).

A *family* knob (``each=``) is one field for several keys (``matmul_<precision>``): the
key is a template with ``{}``, and the field a :class:`~.readers.FrozenMap` from name to
value. A section class may define ``_finish(values, raw, where, ctx)`` for rules that tie
keys together (returning the constructor's keyword arguments) and ``_dump_fix(out)`` for
keys its file form leaves out.
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
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
class Section(Reader):
    """A nested declared section; ``null`` reads as absent. ``ctx`` picks what it is told."""

    cls: type = object
    ctx: Callable[[Ctx], Ctx] = lambda ctx: {}
    null_default: bool = False  # null reads as the section with nothing given, not as absent

    def parse(self, raw: Mapping[str, Any], key: str, where: str, ctx: Ctx) -> Any:
        value = raw[key]
        if value is None and self.null_default:
            value = {}
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise SimdlError(f"{where}: {key} must be a mapping, got {value!r}")
        return parse(self.cls, value, f"{where}: {key}", self.ctx(ctx))

    def dump(self, value: Any, key: str, owner: Any) -> Any:
        return dump(value)

    def schema(self, key: str) -> dict[str, Any]:
        return section_schema(self.cls)


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


# --------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Decl:
    key: str
    reader: Reader
    doc: str
    required: bool | Callable[[Ctx], bool] = False
    each: tuple[str, ...] = ()
    dump_default: bool = True  # False: the file form leaves the value out when it is the default
    absent: Any = None  # the value of an optional key that is not given

    def keys(self) -> tuple[str, ...]:
        return tuple(self.key.format(n) for n in self.each) if self.each else (self.key,)


def knob(
    key: str,
    reader: Reader,
    doc: str,
    *,
    required: bool | Callable[[Ctx], bool] = False,
    each: tuple[str, ...] = (),
    default: Any = None,
    factory: Callable[[], Any] | None = None,
    dump_default: bool = True,
    compare: bool = True,
    positional: bool = False,
) -> Any:
    """A dataclass field declared as file key ``key`` (see the module docstring). ``positional``:
    the constructor requires the field although the file may leave it out (``default`` then)."""
    meta = {"decl": Decl(key, reader, " ".join(doc.split()), required, each, dump_default, default)}
    if each or isinstance(reader, Table) or factory is not None:
        return field(default_factory=factory or FrozenMap, metadata=meta, compare=compare)
    if required is True or positional:
        return field(metadata=meta, compare=compare)
    return field(default=default, metadata=meta, compare=compare)


@lru_cache(maxsize=None)
def declarations(cls: type) -> tuple[tuple[str, Decl], ...]:
    """(field name, declaration) of a section class, in field order."""
    return tuple((f.name, f.metadata["decl"]) for f in fields(cls) if "decl" in f.metadata)


@lru_cache(maxsize=None)
def file_keys(cls: type) -> tuple[str, ...]:
    """Every key a section accepts (its class's ``EXTRA_KEYS`` too: keys read elsewhere)."""
    return tuple(k for _, d in declarations(cls) for k in d.keys()) + tuple(getattr(cls, "EXTRA_KEYS", ()))


@lru_cache(maxsize=None)
def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


def _required(d: Decl, ctx: Ctx) -> bool:
    return d.required(ctx) if callable(d.required) else d.required


def parse(cls: type, raw: Mapping[str, Any], where: str, ctx: Ctx | None = None) -> Any:
    """The section ``cls`` read from ``raw``; ``ctx``: what enclosing sections tell it."""
    allowed = file_keys(cls)
    for key in raw:
        if key not in allowed:
            raise SimdlError(f"{where}: {unknown('key', key, allowed)}")
    seen: dict[str, Any] = dict(ctx or {})
    values: dict[str, Any] = {}
    for name, d in declarations(cls):
        if d.each:
            present = [(n, d.key.format(n)) for n in d.each if d.key.format(n) in raw]
            if _required(d, seen) and len(present) < len(d.each):
                missing = next(k for k in d.keys() if k not in raw)
                raise SimdlError(f"{where}: missing key {missing!r}")
            values[name] = FrozenMap({n: d.reader.parse(raw, k, where, seen) for n, k in present})
        elif d.key in raw:
            values[name] = d.reader.parse(raw, d.key, where, seen)
        elif _required(d, seen):
            accepted = f"; accepted: {d.reader.accepted}" if d.reader.accepted else ""
            raise SimdlError(f"{where}: missing key {d.key!r}{accepted}")
        elif name not in _defaults(cls):
            values[name] = d.absent
        seen[name] = values[name] if name in values else _defaults(cls).get(name)
    finish = getattr(cls, "_finish", None)
    if finish is not None:
        values = finish(values, raw, where, dict(ctx or {}))
    return cls(**values)


def dump(obj: Any) -> dict[str, Any]:
    """The file form of a declared section (keys in declaration order; absent values left out)."""
    out: dict[str, Any] = {}
    cls: Any = type(obj)
    defaults = _defaults(cls)
    for name, d in declarations(cls):
        value = getattr(obj, name)
        if value is None and d.required is True:
            out[d.key] = None  # a required key whose value may be null (max_nodes)
            continue
        if value is None or (not d.dump_default and value == defaults.get(name, MISSING)):
            continue
        if d.each:
            for n, v in value.items():
                out[d.key.format(n)] = d.reader.dump(v, d.key.format(n), obj)
        elif not (isinstance(d.reader, Table) and not value):
            out[d.key] = d.reader.dump(value, d.key, obj)
    fix = getattr(obj, "_dump_fix", None)
    return fix(out) if fix is not None else out


def section_schema(cls: type, *, partial: bool = False) -> dict[str, Any]:
    """JSON Schema of a declared section; ``partial``: nothing required (a file that ``extends``)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for _, d in declarations(cls):
        for key in d.keys():
            sub = d.reader.schema(key)
            if isinstance(d.reader, Section) and partial:
                sub = section_schema(d.reader.cls, partial=True)
            note = "" if d.required in (True, False) else " Required where the enclosing file says so."
            props[key] = {**sub, "description": d.doc + note} if d.doc or note else sub
            if d.required is True and not partial:
                required.append(key)
    for key in getattr(cls, "EXTRA_KEYS", ()):
        props.setdefault(key, {"description": getattr(cls, "EXTRA_KEYS_DOC", {}).get(key, "")})
    for key, (sub, description) in getattr(cls, "MOVED_KEYS", {}).items():
        props[key] = {**sub, "description": description}
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out
