"""One declaration per file section, and the small generic loader that reads it.

A section of a device or cluster file is a frozen dataclass whose fields carry their
declaration (:func:`knob`): the file key (the unit in the key), the reader that checks
and converts the value (:mod:`.key_readers`; :class:`Section` for a nested section),
whether the key is required, and a description. From that one declaration come

* :func:`parse` -- the section from a file's mapping, every problem one
  :class:`~simdl.errors.SimdlError` line naming the file, the key, the value and what is
  accepted (the value checks in :mod:`.readers` word them);
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

from dataclasses import MISSING, dataclass, field, fields
from functools import lru_cache
from typing import Any, Callable, Mapping

from ..errors import SimdlError, unknown
from .key_readers import (
    COUNT,
    FRACTION,
    FRACTION0,
    NONNEG,
    POSITIVE,
    Choice,
    Ctx,
    Custom,
    Flag,
    Int,
    Num,
    Opaque,
    Reader,
    Table,
    Text,
    bounded,
)
from .readers import FrozenMap

# The section modules declare their knobs from this module alone: the key readers are
# re-exported beside the loader.
__all__ = [
    "COUNT",
    "FRACTION",
    "FRACTION0",
    "NONNEG",
    "POSITIVE",
    "Choice",
    "Ctx",
    "Custom",
    "Decl",
    "Flag",
    "Int",
    "Num",
    "Opaque",
    "Reader",
    "Section",
    "Table",
    "Text",
    "bounded",
    "declarations",
    "dump",
    "file_keys",
    "knob",
    "parse",
    "section_schema",
]


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
