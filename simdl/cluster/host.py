"""Which machine a measurement was made on, and whether a calibrated profile describes it.

A calibrated CPU profile (``cpu-local``) holds this host's gloo curves, op-class
bandwidths and copy rates: it predicts runs on *the machine it was measured on*. The
workplace's VMs keep their hostname (``vm``) when the processor under them changes (the
shipped ``cpu-local`` profile was measured on an Intel Xeon; the same VM later reported an
AMD EPYC), so the hostname cannot tell. Nor can the model name alone: the VM has reported
``AMD EPYC`` on three processors (lab/records/index.json: L1d 48K / L2 1024K, L1d 32K / L2
1024K, and L1d 32K / L2 512K without AVX-512, CPU family 25 model 1), whose peaks differ by
2x. The model name with the cache sizes can; validation
compares them before it predicts a run with a profile (``validate.run``), and records them
with every run.

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


# Instruction-set flags that change a CPU's peak FLOP/s (FMA width, AVX-512, bf16, AMX) or
# tell processor generations apart (vnni): which of them /proc/cpuinfo lists is recorded.
ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")


# glibc malloc's environment settings (mallopt(3): MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_,
# ...; GLIBC_TUNABLES glibc.malloc.*). They decide whether an FSDP2 step on CPU faults its
# gradients in again every step (simdl.hosts.cpu_glibc.GlibcCpuHost.refault_limit), which moved ViT
# FSDP none steps by 0.4-1.1 s on the Zen 4 (benchmarks/fsdp2_refault_cost_cpu.py), so a
# run records them.
ALLOCATOR_ENV_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES")


def allocator_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The C allocator's settings in the environment (empty: glibc's defaults)."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(ALLOCATOR_ENV_PREFIXES)}


def allocator_env_text(env: dict[str, str]) -> str:
    """``K=V`` pairs of :func:`allocator_env`'s settings, sorted; empty for glibc's defaults."""
    return " ".join(f"{k}={v}" for k, v in sorted(env.items()))


def cpu_identity(cpuinfo: Path = CPUINFO) -> dict[str, Any]:
    """Vendor, family, model and stepping of the first processor in ``/proc/cpuinfo`` and the
    :data:`ISA_FLAGS` it lists; empty where the file is missing (not Linux). The model name
    alone has named three processors here (module docstring); family/model and the flags tell
    a Zen 3 (family 25 model 1, AVX2) from a Zen 5 (AVX-512) with the same name."""
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping"}
    out: dict[str, Any] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in fields:
                    out[fields[key]] = int(value) if value.isdigit() else value
                elif key == "flags":
                    have = set(value.split())
                    out["isa"] = [f for f in ISA_FLAGS if f in have]
    except OSError:
        return {}
    return out


def cpu_fingerprint() -> dict[str, Any]:
    """What identifies this host's processor for a calibration: model, cores, caches, and
    family/model/stepping with the ISA flags (:func:`cpu_identity`)."""
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
        "caches": cache_sizes(),
        "identity": cpu_identity(),
    }


def _provenance(spec) -> dict:
    """A calibrated profile's ``calibration.provenance`` (empty for a preset)."""
    return (getattr(spec, "calibration", None) or {}).get("provenance") or {}


def profile_devices(spec) -> list[str]:
    """Device names a calibrated profile was measured on (``calibration.provenance.devices``);
    empty for a preset built from published figures."""
    devs = _provenance(spec).get("devices") or []
    return [str(d) for d in (devs if isinstance(devs, list) else [devs])]


def profile_caches(spec) -> dict[str, str]:
    """Cache sizes of the processor a calibrated profile was measured on
    (``calibration.provenance.cpu_caches``); empty when it does not record them."""
    caches = _provenance(spec).get("cpu_caches") or {}
    return {str(k): str(v) for k, v in caches.items()} if isinstance(caches, dict) else {}


def _caches_text(caches: dict[str, str]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(caches.items()))


def host_mismatch(spec, device: str | None = None, caches: dict[str, str] | None = None) -> str | None:
    """Why ``spec`` does not describe this host's CPU, or None when it does (or cannot say).

    The processor's model name must be one the profile was measured on, and where both the
    profile and the host report cache sizes, they must agree (one model name has covered
    several processors here: module docstring). ``device`` and ``caches`` default to this
    host's; a caller that names a ``device`` without ``caches`` compares the name only.
    Only CPU profiles are checked: a GPU profile predicts the GPUs it names, whatever host
    runs simdl. A profile without calibration provenance (a preset) is not checked."""
    devs = [d for d in profile_devices(spec) if d.startswith("cpu:")]
    if not devs:
        return None
    if caches is None:
        caches = cache_sizes() if device is None else {}
    here = device or cpu_device_name()
    if here not in devs:
        return f"profile {spec.name} was calibrated on {', '.join(repr(d) for d in devs)}; this host is {here!r}"
    theirs = profile_caches(spec)
    if caches and theirs and caches != theirs:
        return (
            f"profile {spec.name} was calibrated on a {here!r} with caches {_caches_text(theirs)}; "
            f"this host's {here!r} has {_caches_text(caches)} (another processor of that name)"
        )
    return None


def device_file_for(device: str, caches: dict[str, str] | None = None) -> str:
    """The shipped device file (``gpus/cpu*.yaml``) of a CPU named ``device`` (``cpu: <model>``)
    with per-core ``caches`` (as :func:`cache_sizes` reports them): the file whose ``host``
    block matches both; else, when the caches are unknown or match no file, the first file
    (by name) whose model name matches; else ``cpu``. The caches decide because the VM
    reports one model name on several processors (module docstring) whose peaks differ
    (cpu-epyc: Zen 5, 332 GFLOP/s; cpu-epyc-milan: Zen 3, 157 GFLOP/s)."""
    from .spec import gpu_names, load_gpu

    files = [g for g in (load_gpu(n) for n in gpu_names()) if g.is_cpu]
    by_name = [g for g in files if g.describes_host(device)]
    exact = [g for g in by_name if caches and g.describes_host(device, caches)]
    chosen = exact or by_name
    return chosen[0].name if chosen else "cpu"


def preset_for_this_host(
    device: str | None = None,
    caches: dict[str, str] | None = None,
    environ: dict[str, str] | None = None,
    folders: list[Path] | tuple[Path, ...] | None = None,
) -> str | None:
    """The shipped CPU preset calibrated on this host's processor (:func:`host_mismatch`),
    preferably one calibrated under this process's malloc settings (:func:`allocator_mismatch`:
    on the Zen 4 the same runs took up to 40 % less time with glibc's heap kept than with its
    defaults), then one with one rank per device slot (``cpu-local``, not its
    ``-x4`` sibling, which validation picks by rank count); a ``-x<N>`` profile when it is
    the only one of this processor (its N slots serve runs of N ranks or fewer); None when no
    profile in ``folders`` was measured on this processor. A full calibration before a
    ``--quick`` one (fewer sizes, models and repeats: simdl.calibrate.run_settings), which
    serves only where it is the one profile of its kind. Among several of one kind, the latest
    calibration (``calibration.provenance.date``): the host's speed drifts by tens of percent
    between days (lab/CAMPAIGN.md, "The same processor a week earlier"), so the newest
    describes it best. ``device`` and ``caches`` as in :func:`host_mismatch`; ``environ``
    (default ``os.environ``) as in :func:`allocator_env`. ``folders``: where to look for
    ``cpu-*.yaml`` profiles (default: the shipped presets; validation adds the calibrations
    kept in the repository's ``lab/profiles/``). A shipped preset is returned by name, any
    other profile by its path."""
    import re

    from .spec import CLUSTER_DIR, load_cluster

    matches = []
    paths = [p for folder in (folders or (CLUSTER_DIR,)) for p in sorted(Path(folder).glob("cpu-*.yaml"))]
    for path in paths:
        spec = load_cluster(str(path))
        if profile_devices(spec) and host_mismatch(spec, device, caches) is None:
            multi_rank = bool(re.search(r"-x\d+$", path.stem))
            other_malloc = allocator_mismatch(spec, environ) is not None
            shipped = path.parent.resolve() == Path(CLUSTER_DIR).resolve()
            quick = bool((_provenance(spec).get("settings") or {}).get("quick"))
            matches.append((other_malloc, multi_rank, quick, profile_date(spec), path.stem if shipped else str(path)))
    matches.sort(key=lambda m: Path(m[4]).stem)
    matches.sort(key=lambda m: m[3], reverse=True)  # stable: newest first, then by name
    matches.sort(key=lambda m: m[:3])  # this malloc setting, one rank per slot, a full calibration
    return matches[0][4] if matches else None


def profile_allocator_env(spec) -> dict[str, str]:
    """The malloc settings a calibrated profile's ranks ran with (``calibration.provenance.
    allocator_env``; empty means glibc's defaults, or a profile that did not record them)."""
    return {str(k): str(v) for k, v in (_provenance(spec).get("allocator_env") or {}).items()}


def allocator_mismatch(spec, environ: dict[str, str] | None = None) -> str | None:
    """Why ``spec``'s compute times were measured under other malloc settings than
    ``environ``'s (default ``os.environ``), or None when they agree or the profile is not a
    calibrated CPU profile. The settings moved the same run on the Zen 4 by up to 40 %: glibc's
    heap trimming re-faults FSDP's gradients every step and slows DDP's steps as well
    (lab/CAMPAIGN.md, "The ViT FSDP none gap is glibc's heap trimming")."""
    if not any(d.startswith("cpu:") for d in profile_devices(spec)):
        return None
    theirs, here = profile_allocator_env(spec), allocator_env(environ)
    if theirs == here:
        return None
    default = "glibc's default malloc settings"
    return (
        f"profile {spec.name} was timed with {allocator_env_text(theirs) or default}; "
        f"these ranks with {allocator_env_text(here) or default}"
    )


def profile_date(spec) -> str:
    """When a calibrated profile's run started (``calibration.provenance.date``, ISO 8601 in
    UTC as ``simdl calibrate`` writes it); empty when it does not say."""
    return str(_provenance(spec).get("date") or "")
