"""How the calibration summary writes its numbers: signed and absolute percentages, sizes
in binary units, ratios."""

from __future__ import annotations


def pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def abs_pct(x) -> str:
    return "n/a" if x is None else f"{abs(x):.1%}"


def size(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{n:.0f} B"


def ratio(x) -> str:
    return "-" if x is None else f"{x:.2f}x"
