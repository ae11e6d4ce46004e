"""What every section of a calibrated profile writes with: a fitted number as
``{value, kind, source}``, and the parameter-server stage's transports."""

from __future__ import annotations

from typing import Any

# calibration/ps.py's RPC_TRANSPORTS (the stage's scripts are not a package to import from).
_RPC_TRANSPORTS = ("uv",)


def _val(value: float, source: str, kind: str = "calibrated") -> dict[str, Any]:
    v = float(f"{value:.4g}")
    if abs(v) < 1e-6:
        v = 0.0  # a bound reached by the fit, not a measured femtosecond
    return {"value": int(v) if v.is_integer() else v, "kind": kind, "source": source}
