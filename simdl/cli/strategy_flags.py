"""CLI options of the strategy keywords the CLI does not declare itself, from their declarations.

A registered family's keyword (``StrategySpec.predict_keys``) that sets an options field of
the same name gets its parser, metavar and help from that field: its type (``int``, ``float``,
``bool``, ``Literal`` choices, ``Optional`` of those), the docstring under it
(:func:`simdl.catalog.field_docs`) and its default. A keyword that declares ``cli_type`` or
``help`` itself keeps them. The help text is read from the source only when a help
message is printed (``Parser.format_help``), not on every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from functools import partial
from typing import Any, Callable, Literal

from .options import choices_metavar, number

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def boolean(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false (accepted: {', '.join(_TRUE + _FALSE)})")


def whole(text: str) -> int:
    """An integer, written as one or in exponent form (5e8, as ds_config files write bucket sizes)."""
    try:
        return int(text)
    except ValueError:
        pass
    value = number(text)
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    return int(value)


def _chooser(choices: tuple[Any, ...]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(map(str, choices))}")
        return text

    return parse


def _parser(kind: Any) -> tuple[Callable[[str], Any], str | None]:
    """(parser, metavar) for a field type; ``Optional[X]`` parses as ``X``."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) is typing.Union and type(None) in args:
        kind = next(a for a in args if a is not type(None))
    if typing.get_origin(kind) is Literal:
        choices = typing.get_args(kind)
        return _chooser(choices), choices_metavar(choices)
    if kind is bool:
        return boolean, "{true,false}"
    if kind is int:
        return whole, "N"
    if kind is float:
        return number, "X"
    return str, None


def _help(options: type, name: str, names: tuple[str, ...] | None) -> str:
    from ..catalog import field_docs

    doc = " ".join(field_docs(options).get(name, "").split())
    default = next((f.default for f in dataclasses.fields(options) if f.name == name), dataclasses.MISSING)
    parts = [doc.rstrip(".")] if doc else []
    if default is not dataclasses.MISSING and default is not None:
        parts.append(f"default {default}")
    if names:
        parts.append("for " + ", ".join(names))
    return "; ".join(parts).replace("%", "%%")


def add_strategy_flags(group: argparse._ArgumentGroup, declared: set[str]) -> None:
    """Add ``--key-name`` for every registered strategy keyword not in ``declared``."""
    from ..strategies import registry

    for key, spec, options in registry.cli_options(declared):
        kwargs: dict[str, Any] = {"dest": key, "default": None, "help": spec.help}
        hints = typing.get_type_hints(options)
        if spec.cli_type is str and spec.field in hints:
            kwargs["type"], metavar = _parser(hints[spec.field])
            if metavar:
                kwargs["metavar"] = metavar
        else:
            kwargs["type"] = spec.cli_type
        action = group.add_argument("--" + key.replace("_", "-"), **kwargs)
        if not spec.help and spec.field in hints:  # read from the source only when help is printed
            action.lazy_help = partial(_help, options, spec.field, spec.names)  # type: ignore[attr-defined]


def fill_lazy_help(actions) -> None:
    """Give the actions :func:`add_strategy_flags` left a ``lazy_help`` their help text."""
    for action in actions:
        lazy = getattr(action, "lazy_help", None)
        if lazy is not None and not action.help:
            action.help = lazy()
