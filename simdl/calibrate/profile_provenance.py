"""Provenance of a calibrated profile: which device file a run is measured against, where,
when and on what the run measured, how busy the machine was, and the allocator settings its
ranks ran with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..cluster.host import device_file_for
from ..errors import SimdlError
from ..units import MiB

GPU_NAME_MAP = (  # substring of torch.cuda.get_device_name() -> shipped GPU file
    ("A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100 80GB PCIe", "A100-PCIe-80GB"),
    ("A100-PCIE-80GB", "A100-PCIe-80GB"),
    ("H200", "H200"),
    ("H100 PCIe", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("A10G", "A10G"),
    ("V100", "V100-SXM2"),
)


def gpu_file_for(device: str, caches: dict[str, str] | None = None) -> str:
    """The device file a calibration on ``device`` is measured against: for a host CPU, the
    one whose ``host`` block matches its model name and ``caches`` (simdl.cluster.host)."""
    if device.startswith("cpu"):
        return device_file_for(device, caches)
    for needle, name in GPU_NAME_MAP:
        if needle.lower() in device.lower():
            return name
    raise SimdlError(
        f"no GPU file matches device {device!r}; give --gpu NAME (one of the files in "
        "simdl/cluster/data/gpus) or a path to a GPU YAML with its peaks"
    )


def provenance(stages: dict, settings: dict, run_dir: Path) -> dict[str, Any]:
    headers = [h for st in stages.values() for h in st.headers.values()]
    if not headers:
        raise SimdlError(f"{run_dir}: no measurements found")
    h0 = headers[0]
    loads = [h["loadavg"][0] for h in headers if h.get("loadavg")]
    # When each stage was measured (a resumed run, or a stage measured again, spans days).
    stage_dates = {
        name: min(h["date"] for h in st.headers.values() if h.get("date"))
        for name, st in stages.items()
        if any(h.get("date") for h in st.headers.values())
    }
    dates = sorted(set(stage_dates.values()))
    return {
        "tool": "simdl calibrate",
        "run_dir": str(run_dir),
        "date": dates[0] if dates else h0.get("date"),
        "stage_dates": stage_dates,
        "host": sorted({h["host"] for h in headers}),
        "devices": sorted({h["device"] for h in headers}),
        "backend": h0.get("backend"),
        "versions": h0.get("versions"),
        "ranks": h0.get("world"),
        "nodes": h0.get("nodes"),
        "ranks_per_node": h0.get("local_world"),
        "threads_per_rank": h0.get("threads"),
        "threads_note": h0.get("threads_note") or "",
        "cpu_count": h0.get("cpu_count"),
        # Cache sizes per core (sysfs): with the model name, what tells two hosts apart.
        **({"cpu_caches": h0["cpu_caches"]} if h0.get("cpu_caches") else {}),
        # Family/model/stepping and ISA flags (where the run recorded them): which processor exactly.
        **({"cpu_identity": h0["cpu_identity"]} if h0.get("cpu_identity") else {}),
        # glibc malloc settings the ranks ran with (empty: glibc's defaults).
        **({"allocator_env": h0["allocator_env"]} if h0.get("allocator_env") else {}),
        # Readings at stage starts include this run's own ranks (up to one per core); the
        # reading taken before any rank started is the one that says whether others were busy.
        "loadavg_1min_at_stage_starts_incl_own_ranks": [round(x, 2) for x in loads],
        "loadavg_before": settings.get("loadavg_before", []),
        "machine_busy": _busy(settings, loads, h0),
        # What other processes took of the CPU during each stage (simdl.calibrate.host_load;
        # where the run measured it): the last attempt of each stage, in cores on average.
        **({"others_cores_by_stage": by_stage} if (by_stage := _others_by_stage(run_dir, stages)) else {}),
        "settings": settings,
    }


def _busy_note(prov: dict) -> str:
    """The profile notes' sentence on how busy the machine was (:func:`_busy`)."""
    before = prov.get("loadavg_before") or []
    loads = ", ".join(str(b["loadavg"][0]) for b in before)
    others = [(b.get("host_cpu") or {}).get("others_cores") for b in before]
    if before and all(o is not None for o in others):
        said = (
            f"other processes used {', '.join(f'{o:.2f}' for o in others)} cores over the seconds before the "
            f"ranks started (simdl.calibrate.host_load; 1-min load average {loads})"
        )
        text = (
            f" The machine was busy when calibration started: {said}; timings include contention."
            if prov["machine_busy"]
            else f" The machine was otherwise idle when calibration started: {said}."
        )
    elif before:
        text = (
            " Other processes were using the machine when calibration started (1-min load average "
            "above 0.5 before the ranks started): timings include contention."
            if prov["machine_busy"]
            else f" The machine was otherwise idle when calibration started (1-min load average {loads} "
            "before the ranks started)."
        )
    else:
        text = ""
    from .host_load import BUSY_CORES

    busy = {k: v for k, v in (prov.get("others_cores_by_stage") or {}).items() if v > BUSY_CORES}
    if busy:
        text += (
            " Other processes took CPU during the measurements: "
            + ", ".join(f"{v:.2f} cores on average during the {k} stage" for k, v in busy.items())
            + "; those stages' timings include that contention."
        )
    return text


def _others_by_stage(run_dir: Path, stages) -> dict[str, float]:
    out = {}
    for name in stages:
        try:
            attempts = json.loads((Path(run_dir) / name / "host_cpu.json").read_text())
        except (OSError, ValueError):
            continue
        if attempts and attempts[-1].get("others_cores") is not None:
            out[name] = attempts[-1]["others_cores"]
    return out


def _dates(prov: dict) -> str:
    """The measurement date, or each stage's when they were measured hours apart."""
    sd = prov.get("stage_dates") or {}
    days = {d[:13] for d in sd.values()}
    if len(days) <= 1:
        return str(prov["date"])
    return ", ".join(f"{stage} {d}" for stage, d in sorted(sd.items(), key=lambda kv: kv[1]))


# mallopt(3) environment variables and the host keys they set (bytes in the environment).
_ALLOCATOR_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": "mmap_threshold_MiB", "MALLOC_TRIM_THRESHOLD_": "trim_threshold_MiB"}


def _allocator_thresholds(env: dict[str, str], run: str) -> dict[str, Any]:
    """The host's mmap and trim thresholds where the ranks ran with them set (a setting fixes
    the threshold and turns glibc's dynamic adjustment off: mallopt(3))."""
    out: dict[str, Any] = {}
    for var, key in _ALLOCATOR_THRESHOLDS.items():
        if var in env:
            out[key] = {
                "value": round(int(env[var]) / MiB, 6),
                "kind": "framework",
                "source": f"the ranks' environment in run {run}: {var}={env[var]} (mallopt(3))",
            }
    return out


def _busy(settings: dict, loads: list[float], h0: dict) -> bool:
    """Other processes were busy when the measurements started: they kept more than a quarter
    of a core busy (simdl.calibrate.host_load), or, in runs that did not measure it, the
    1-minute load average was above 0.5 (which lags a minute behind)."""
    from .host_load import BUSY_CORES

    measured = [(b.get("host_cpu") or {}).get("others_cores") for b in settings.get("loadavg_before", [])]
    if measured and all(m is not None for m in measured):
        return max(float(m) for m in measured if m is not None) > BUSY_CORES
    before = [b["loadavg"][0] for b in settings.get("loadavg_before", [])]
    if before:
        return max(before) > 0.5
    return bool(loads and max(loads) > 0.5 + (h0.get("local_world") or 1))
