"""JSON that is JSON: no NaN or Infinity ever reaches simdl's output.

``json.dumps`` writes ``NaN`` and ``Infinity`` by default, which RFC 8259 does not allow
and most parsers refuse. simdl writes with ``allow_nan=False``; a non-finite number is a
bug or an input that slipped past the checks, and it ends as one line naming where it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import SimdlError


def _non_finite_path(obj: Any, path: str = "", depth: int = 0) -> str | None:
    if depth > 64:
        return None
    if isinstance(obj, float) and not math.isfinite(obj):
        return path or "(top)"
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _non_finite_path(v, f"{path}.{k}" if path else str(k), depth + 1)
            if found:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _non_finite_path(v, f"{path}[{i}]", depth + 1)
            if found:
                return found
    return None


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` with ``allow_nan=False``; a non-finite value raises :class:`SimdlError`
    naming its key path."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):
            raise
        where = _non_finite_path(obj) or "a value"
        raise SimdlError(f"the output holds a non-finite number at {where}; refusing to write invalid JSON") from None
