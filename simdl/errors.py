"""User-facing errors.

Every error a user can cause by bad input is a :class:`SimdlError`. The CLI prints
its message on one line and exits with status 2, with no traceback; the Python API
lets it propagate. Messages name the bad value and what is accepted.
"""

from __future__ import annotations

from typing import Iterable


class SimdlError(ValueError):
    """Bad input: the message names the value and what is accepted."""


def unknown(kind: str, value: object, accepted: Iterable[str]) -> SimdlError:
    """Build the error for an unknown name, with close matches when there are any.

    >>> str(unknown("model", "vgg61", ["vgg16", "resnet50"]))
    "unknown model 'vgg61' (did you mean 'vgg16'?); accepted: resnet50, vgg16"
    """
    import difflib  # only on the error path

    names = sorted(accepted)
    close = difflib.get_close_matches(str(value), names, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return SimdlError(f"unknown {kind} {value!r}{hint}; accepted: {', '.join(names)}")


def require(condition: bool, message: str) -> None:
    """Raise :class:`SimdlError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise SimdlError(message)
