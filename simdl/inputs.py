"""Checks of the numbers a user gives a prediction, in the user's own terms.

A value is refused with the option's name and the value as given (``--bucket-cap-mb -25``,
not the bytes it becomes), and a non-finite number (nan, inf) never gets in: it would give
a non-finite time, and JSON has no NaN.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import SimdlError


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def check_positive(option: str, value: Any, unit: str = "") -> None:
    """``value`` is None (not given) or a finite number > 0."""
    if value is None:
        return
    if not _number(value) or not math.isfinite(value) or not value > 0:
        shown = f"{value:g}" if _number(value) else repr(value)  # -25, as typed, not -25.0
        raise SimdlError(f"{option} {shown}: accepted: a finite number > 0{' ' + unit if unit else ''}")


def check_prediction_numbers(*, epochs: Any = None, bucket_cap_mb: Any = None) -> None:
    """The numbers of :func:`simdl.predict` that are not counts (counts are checked where used)."""
    check_positive("--epochs", epochs)
    check_positive("--bucket-cap-mb", bucket_cap_mb, "(MiB)")
