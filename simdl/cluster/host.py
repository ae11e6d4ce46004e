"""Which machine a measurement was made on, and whether a calibrated profile describes it.

A calibrated CPU profile (``cpu-local``) holds this host's gloo curves, op-class
bandwidths and copy rates: it predicts runs on *the machine it was measured on*. The
workplace's VMs keep their hostname (``vm``) when the processor under them changes (the
shipped ``cpu-local`` profiles were measured on an Intel Xeon; on 2026-11-25 the same VM
reported an AMD EPYC), so the hostname cannot tell. The processor's model name, its core
count and its cache sizes can; validation compares them before it predicts a run with a
profile (``validate.run``), and records them with every run.

Plain Python (``/proc/cpuinfo``, ``/sys/devices/system/cpu``): no torch.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The processor's model name (``/proc/cpuinfo``'s ``model name``), else platform's guess."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_label(model: str) -> str:
    """How a profile's provenance names a CPU device: ``cpu: <model name>``."""
    return f"cpu: {model}"


def cpu_device_name(cpuinfo: Path = CPUINFO) -> str:
    """This host's CPU as calibration names it in a profile's provenance."""
    return cpu_label(cpu_model(cpuinfo))


def cache_sizes(cache_dir: Path = CACHE_DIR) -> dict[str, str]:
    """Cache sizes one core sees, as the kernel reports them (``{"L1d": "48K", "L2": "1024K", ...}``);
    empty where sysfs does not say."""
    out: dict[str, str] = {}
    try:
        entries = sorted(cache_dir.glob("index*"))
    except OSError:
        return out
    for d in entries:
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return out


def cpu_fingerprint() -> dict[str, Any]:
    """What identifies this host's processor for a calibration: model, cores, caches."""
    return {"cpu_model": cpu_model(), "cpu_count": os.cpu_count() or 1, "caches": cache_sizes()}


def profile_devices(spec) -> list[str]:
    """Device names a calibrated profile was measured on (``calibration.provenance.devices``);
    empty for a preset built from published figures."""
    prov = ((getattr(spec, "calibration", None) or {}).get("provenance") or {})
    devs = prov.get("devices") or []
    return [str(d) for d in (devs if isinstance(devs, list) else [devs])]


def host_mismatch(spec, device: str | None = None) -> str | None:
    """Why ``spec`` does not describe this host's CPU, or None when it does (or cannot say).

    Only CPU profiles are checked: a GPU profile predicts the GPUs it names, whatever host
    runs simdl. A profile without calibration provenance (a preset) is not checked."""
    devs = [d for d in profile_devices(spec) if d.startswith("cpu:")]
    if not devs:
        return None
    here = device or cpu_device_name()
    if here in devs:
        return None
    return (f"profile {spec.name} was calibrated on {', '.join(repr(d) for d in devs)}; "
            f"this host is {here!r}")


def preset_for_this_host(device: str | None = None) -> str | None:
    """The shipped CPU preset calibrated on this host's processor with one rank per device
    slot (``cpu-local``, not its ``-x4`` sibling, which validation picks by rank count), or
    None when no shipped profile was measured on this processor."""
    import re

    from .spec import CLUSTER_DIR, load_cluster

    here = device or cpu_device_name()
    for path in sorted(CLUSTER_DIR.glob("cpu-*.yaml")):
        if re.search(r"-x\d+$", path.stem):
            continue
        if here in profile_devices(load_cluster(str(path))):
            return path.stem
    return None
