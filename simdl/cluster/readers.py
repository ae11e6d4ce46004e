"""Generic readers of the cluster and device files' sections: each returns the value in SI
units or raises one :class:`~simdl.errors.SimdlError` line naming the file, the key, the
value and what is accepted."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, overload

from ..errors import SimdlError, unknown
from ..provenance import Sourced, read


class FrozenMap(Mapping[Any, Any]):
    """A read-only, hashable mapping, so that frozen dataclasses holding one hash."""

    __slots__ = ("_d", "_h")

    def __init__(self, items: Mapping[Any, Any] | None = None) -> None:
        self._d = dict(items or {})
        self._h: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(tuple(sorted(self._d.items())))
        return self._h

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"


def _load_yaml(path: Path) -> dict[str, Any]:
    from .safe_yaml import load_yaml_file  # bounded size, depth and alias expansion

    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise SimdlError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    return data


def _check_keys(section: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in section:
        if key not in allowed:
            raise SimdlError(f"{where}: {unknown('key', key, allowed)}")


@overload
def _count(
    raw: Mapping[str, Any],
    key: str,
    where: str,
    *,
    minimum: int = ...,
    default: int | None = ...,
    allow_null: Literal[False] = ...,
) -> int: ...
@overload
def _count(
    raw: Mapping[str, Any], key: str, where: str, *, minimum: int = ..., default: int | None = ..., allow_null: bool
) -> int | None: ...
def _count(
    raw: Mapping[str, Any],
    key: str,
    where: str,
    *,
    minimum: int = 1,
    default: int | None = None,
    allow_null: bool = False,
) -> int | None:
    """A plain integer count (preset shape, not a measured number)."""
    if key not in raw:
        if default is not None or allow_null:
            return default
        raise SimdlError(f"{where}: missing key {key!r}")
    value = raw[key]
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        null = " or null (unlimited)" if allow_null else ""
        raise SimdlError(f"{where}: {key} = {value!r}; accepted: an integer >= {minimum}{null}")
    if value < minimum:
        raise SimdlError(f"{where}: {key} = {value} must be >= {minimum}")
    return value


def _sourced_count(raw: Mapping[str, Any], key: str, where: str) -> Sourced:
    """A sourced count (``{value, kind, source}``) that must be a positive integer."""
    s = read(raw, key, where=where, strictly_positive=True)
    if not float(s.value).is_integer():
        raise SimdlError(f"{where}: {key} = {s.value} must be a whole number")
    return s


@overload
def _fraction(
    raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = ..., required: Literal[True] = ...
) -> Sourced: ...
@overload
def _fraction(
    raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = ..., required: bool
) -> Sourced | None: ...
def _fraction(
    raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = False, required: bool = True
) -> Sourced | None:
    if key not in raw and not required:
        return None
    s = read(raw, key, where=where)
    ok = (0.0 <= s.value < 1.0) if allow_zero else (0.0 < s.value <= 1.0)
    if not ok:
        accepted = "0 <= value < 1" if allow_zero else "0 < value <= 1"
        raise SimdlError(f"{where}: {key} = {s.value}; accepted: a fraction, {accepted}")
    return s


@overload
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: Literal[True] = ...) -> Sourced: ...
@overload
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: bool) -> Sourced | None: ...
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Sourced | None:
    if key not in raw and not required:
        return None
    return read(raw, key, where=where, minimum=0.0)


def _resolve(name_or_path: str | os.PathLike, folder: Path, what: str, names: tuple[str, ...]) -> Path:
    """A preset name (case-insensitive) or a path to a YAML file."""
    text = os.fspath(name_or_path)
    path = Path(text)
    if text.endswith((".yaml", ".yml")) or os.sep in text or path.is_file():
        if path.is_dir():
            raise SimdlError(f"{what} file {text!r} is a directory; accepted: a YAML file")
        if not path.exists():
            raise SimdlError(f"{what} file {text!r} does not exist")
        return path
    lowered = {n.lower(): n for n in names}
    if text.lower() not in lowered:
        raise unknown(what, text, names)
    return folder / f"{lowered[text.lower()]}.yaml"


def _bounded(raw: Mapping[str, Any], key: str, where: str, lo: float, hi: float, meaning: str) -> Sourced | None:
    """An optional sourced number that must lie in [lo, hi]."""
    if key not in raw:
        return None
    s = read(raw, key, where=where)
    if not lo <= s.value <= hi:
        raise SimdlError(f"{where}: {key} = {s.value}; accepted: {lo:g} <= value <= {hi:g} ({meaning})")
    return s


def _number(raw: Mapping[str, Any], key: str, where: str, *, positive: bool = False) -> float:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SimdlError(f"{where}: {key} = {v!r}; accepted: a number")
    if (v <= 0) if positive else (v < 0):
        raise SimdlError(f"{where}: {key} = {v}; accepted: a number {'>' if positive else '>='} 0")
    return float(v)
