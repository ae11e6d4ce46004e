"""JSON Schemas of simdl's data files, from their one declaration (:mod:`.declare`), and a small
validator of the subset of JSON Schema they use.

Three kinds of file (``simdl schema KIND`` prints one; point an editor's YAML language server
at it):

* ``device`` -- a device file (``data/gpus/<name>.yaml``, :class:`~.device.GPU`);
* ``cluster`` -- a cluster preset (``data/clusters/<name>.yaml``, :class:`~.spec.ClusterSpec`);
* ``profile`` -- a calibrated cluster profile as ``simdl calibrate`` writes it: a cluster
  file that also carries its ``calibration`` provenance (``lab/profiles/*.yaml``).

A cluster or profile file that starts with ``extends:`` gives only the keys that differ, so
for it nothing is required (the schema's ``if``/``then``); the loader checks the merged file.
Rules that tie keys together (a mesh's wiring against its bandwidth, ``nodes`` against
``max_nodes``, the inter-node efficiencies of a multi-node preset) are the loader's: the
schema says what each key accepts on its own.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from ..errors import SimdlError

KINDS = ("cluster", "device", "profile")
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of one kind of file (:data:`KINDS`)."""
    from .declare import section_schema
    from .device import GPU
    from .spec import ClusterSpec

    if kind not in KINDS:
        raise SimdlError(f"schema kind {kind!r} is not known; accepted: {', '.join(KINDS)}")
    if kind == "device":
        return {"$schema": DRAFT, "title": "simdl device file", **section_schema(GPU)}
    full, partial = section_schema(ClusterSpec), section_schema(ClusterSpec, partial=True)
    if kind == "profile":
        full = {**full, "required": [*full.get("required", []), "calibration"]}
    title = "simdl cluster profile (written by simdl calibrate)" if kind == "profile" else "simdl cluster preset"
    return {
        "$schema": DRAFT,
        "title": title,
        "description": full.get("description", ""),
        "$defs": {"full": full, "extends": partial},
        "if": {"type": "object", "required": ["extends"]},
        "then": {"$ref": "#/$defs/extends"},
        "else": {"$ref": "#/$defs/full"},
    }


def schema_text(kind: str) -> str:
    return json.dumps(schema(kind), indent=2) + "\n"


# --------------------------------------------------------------------------- validator

_TYPES = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
}


def validate(instance: Any, root: Mapping[str, Any]) -> list[str]:
    """Where ``instance`` breaks ``root`` (empty: it conforms), one line each. Covers the
    keywords these schemas use: type, enum, properties, required, additionalProperties,
    propertyNames, minProperties, items, minItems, maxItems, the numeric bounds, multipleOf,
    pattern, anyOf, if/then/else and local ``$ref``."""
    errors: list[str] = []
    _check(instance, root, root, "$", errors)
    return errors


def _check(v: Any, s: Mapping[str, Any], root: Mapping[str, Any], at: str, errors: list[str]) -> None:
    if "$ref" in s:
        target: Any = root
        for part in s["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        _check(v, target, root, at, errors)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[t](v) for t in types):
            errors.append(f"{at}: {v!r} is not of type {' or '.join(types)}")
            return
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{at}: {v!r} is not one of {s['enum']}")
    if "anyOf" in s and not any(not validate_with(v, sub, root, at) for sub in s["anyOf"]):
        errors.append(f"{at}: {v!r} matches none of the accepted forms")
    if "if" in s:
        branch = "then" if not validate_with(v, s["if"], root, at) else "else"
        if branch in s:
            _check(v, s[branch], root, at, errors)
    if _TYPES["number"](v):
        _check_number(v, s, at, errors)
    if isinstance(v, str) and "pattern" in s and not re.search(s["pattern"], v):
        errors.append(f"{at}: {v!r} does not match {s['pattern']!r}")
    if isinstance(v, list):
        _check_array(v, s, root, at, errors)
    if isinstance(v, Mapping):
        _check_object(v, s, root, at, errors)


def validate_with(v: Any, s: Mapping[str, Any], root: Mapping[str, Any], at: str) -> list[str]:
    errors: list[str] = []
    _check(v, s, root, at, errors)
    return errors


def _check_number(v: float, s: Mapping[str, Any], at: str, errors: list[str]) -> None:
    for key, bad in (
        ("minimum", lambda b: v < b),
        ("maximum", lambda b: v > b),
        ("exclusiveMinimum", lambda b: v <= b),
        ("exclusiveMaximum", lambda b: v >= b),
        ("multipleOf", lambda b: not float(v / b).is_integer()),
    ):
        if key in s and bad(s[key]):
            errors.append(f"{at}: {v!r} breaks {key} {s[key]!r}")


def _check_array(v: list, s: Mapping[str, Any], root: Mapping[str, Any], at: str, errors: list[str]) -> None:
    if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
        errors.append(f"{at}: {len(v)} items; accepted: {s.get('minItems', 0)} to {s.get('maxItems', 'any')}")
    if "items" in s:
        for i, item in enumerate(v):
            _check(item, s["items"], root, f"{at}[{i}]", errors)


def _check_object(v: Mapping, s: Mapping[str, Any], root: Mapping[str, Any], at: str, errors: list[str]) -> None:
    props = s.get("properties", {})
    for key in s.get("required", ()):
        if key not in v:
            errors.append(f"{at}: missing key {key!r}")
    if len(v) < s.get("minProperties", 0):
        errors.append(f"{at}: {len(v)} keys; accepted: at least {s['minProperties']}")
    for key, item in v.items():
        where = f"{at}.{key}"
        if "propertyNames" in s and isinstance(key, str):
            _check(key, s["propertyNames"], root, f"{where} (key)", errors)
        if key in props:
            _check(item, props[key], root, where, errors)
        elif s.get("additionalProperties") is False:
            errors.append(f"{at}: unknown key {key!r}")
        elif isinstance(s.get("additionalProperties"), Mapping):
            _check(item, s["additionalProperties"], root, where, errors)
