"""Device files (``data/gpus/<name>.yaml``): memory, memory bandwidth, dense peak FLOP/s per
precision, the device kind, optional measured efficiency priors, the host processor a CPU
file describes and the fitted kernel model (:mod:`simdl.costs.gpu_profile`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import SimdlError, unknown
from ..provenance import Sourced, read
from .readers import FrozenMap, _check_keys, _fraction, _load_yaml, _put, _resolve, _section

GPU_DIR = Path(__file__).resolve().parent / "data" / "gpus"

#: Precisions a GPU file gives a dense peak for (key ``peak_<p>_TFLOP_per_s``).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Measured efficiency priors a GPU file may carry (fractions of its peaks).
PRIOR_KEYS = (
    "gemm_fp32_fraction",
    "gemm_tf32_fraction",
    "gemm_bf16_fraction",
    "gemm_fp16_fraction",
    "memory_bandwidth_fraction",
)


# --------------------------------------------------------------------------- GPU

_GPU_KEYS = ("name", "kind", "description", "memory_GiB", "memory_bandwidth_GB_per_s",
             *(f"peak_{p}_TFLOP_per_s" for p in PRECISIONS), "priors", "host", "kernels")
# device_memory: read by simdl.memory.device (context, library workspaces, NCCL buffers).
_GPU_KEYS += ("device_memory",)
_GPU_HOST_KEYS = ("model_name", "caches", "source")


# What a device file's ``kind`` may say: the host backend that prices it (simdl.hosts).
DEVICE_KINDS = ("cuda", "cpu")


def is_cpu_device_name(name: str) -> bool:
    """Whether the shipped device file ``name`` says ``kind: cpu`` (False for unknown names)."""
    try:
        return load_gpu(name).is_cpu
    except SimdlError:
        return False


@dataclass(frozen=True)
class GPU:
    """One device type. Numbers are SI: bytes, bytes/s, FLOP/s."""

    name: str
    memory_bytes: Sourced
    memory_bandwidth: Sourced
    peak_flops: FrozenMap  # precision ('fp32','tf32','bf16','fp16') -> Sourced FLOP/s (dense)
    # The device type, from the file's ``kind``: ``cuda`` (a GPU) or ``cpu`` (a host CPU as the
    # device); it picks the host backend (simdl.hosts). A file without it is a GPU.
    kind: str = "cuda"
    priors: FrozenMap = field(default_factory=FrozenMap)  # PRIOR_KEYS -> Sourced fraction
    description: str = ""
    source_path: str = ""
    # Host CPUs: the processor this file describes, as /proc/cpuinfo's model name and the
    # per-core cache sizes sysfs reports (a subset, e.g. {"L1d": "32K", "L2": "512K"}).
    host_model: str = ""
    host_caches: FrozenMap = field(default_factory=FrozenMap)
    # The fitted GPU kernel model (``kernels:`` block, simdl.costs.gpu_profile), or None.
    kernels: Any = None

    def describes_host(self, device: str, caches: Mapping[str, str] | None = None) -> bool:
        """Whether this file's ``host`` block matches a CPU device name (``cpu: <model>``) and,
        where both give them, its cache sizes."""
        if not self.host_model or self.host_model.lower() not in device.lower():
            return False
        return not caches or all(caches.get(k) == v for k, v in self.host_caches.items())

    @property
    def is_cpu(self) -> bool:
        """A host CPU as the device (``kind: cpu``): no side streams, gloo, the ranks of a node share it."""
        return self.kind == "cpu"

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s for ``precision``."""
        try:
            return self.peak_flops[precision].value
        except KeyError:
            raise unknown("precision", precision, PRECISIONS) from None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.description:
            out["description"] = self.description
        _put(out, "memory_GiB", self.memory_bytes)
        _put(out, "memory_bandwidth_GB_per_s", self.memory_bandwidth)
        for p in PRECISIONS:
            _put(out, f"peak_{p}_TFLOP_per_s", self.peak_flops[p])
        if self.priors:
            out["priors"] = {k: v.to_dict(k) for k, v in self.priors.items()}
        if self.host_model:
            out["host"] = {"model_name": self.host_model, "caches": dict(self.host_caches)}
        return out


def _parse_gpu(raw: Mapping[str, Any], where: str, source_path: str) -> GPU:
    _check_keys(raw, _GPU_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SimdlError(f"{where}: name must be a non-empty string, got {name!r}")
    kind = raw.get("kind", "cuda")
    if kind not in DEVICE_KINDS:
        raise SimdlError(f"{where}: kind {kind!r} is not a device type; accepted: {', '.join(DEVICE_KINDS)}")
    peaks = {p: read(raw, f"peak_{p}_TFLOP_per_s", where=where, strictly_positive=True) for p in PRECISIONS}
    priors_raw = _section(raw, "priors", where, required=False) or {}
    _check_keys(priors_raw, PRIOR_KEYS, f"{where}: priors")
    priors = {k: _fraction(priors_raw, k, f"{where}: priors") for k in priors_raw}
    host = _section(raw, "host", where, required=False) or {}
    _check_keys(host, _GPU_HOST_KEYS, f"{where}: host")
    if host and not isinstance(host.get("model_name"), str):
        raise SimdlError(f"{where}: host.model_name must be the processor's model name (a string), "
                         f"got {host.get('model_name')!r}")
    caches = host.get("caches") or {}
    if not isinstance(caches, Mapping):
        raise SimdlError(f"{where}: host.caches must map cache names to sizes (e.g. {{L2: 512K}}), got {caches!r}")
    return GPU(
        name=name,
        memory_bytes=read(raw, "memory_GiB", where=where, strictly_positive=True),
        memory_bandwidth=read(raw, "memory_bandwidth_GB_per_s", where=where, strictly_positive=True),
        peak_flops=FrozenMap(peaks),
        kind=kind,
        priors=FrozenMap(priors),
        description=str(raw.get("description", "") or ""),
        source_path=source_path,
        host_model=host.get("model_name", "") or "",
        host_caches=FrozenMap({str(k): str(v) for k, v in caches.items()}),
        kernels=_parse_kernels(raw, where, peaks, priors),
    )


def _parse_kernels(raw: Mapping[str, Any], where: str, peaks: Mapping[str, Sourced], priors: Mapping[str, Sourced]):
    if raw.get("kernels") is None:
        return None
    from ..costs.gpu_profile import parse_kernels

    bandwidth = read(raw, "memory_bandwidth_GB_per_s", where=where, strictly_positive=True).value
    return parse_kernels(raw["kernels"], where, {p: v.value for p, v in peaks.items()}, bandwidth,
                         {k: v.value for k, v in priors.items()})


def gpu_names() -> tuple[str, ...]:
    """Names of the shipped GPU files."""
    return tuple(sorted(p.stem for p in GPU_DIR.glob("*.yaml")))


@lru_cache(maxsize=None)
def _load_gpu_file(path: str) -> GPU:
    return _parse_gpu(_load_yaml(Path(path)), path, path)


def load_gpu(name_or_path: str | os.PathLike) -> GPU:
    """Load a shipped GPU by name (case-insensitive) or a GPU YAML file by path."""
    path = _resolve(name_or_path, GPU_DIR, "gpu", gpu_names())
    if path.parent.resolve() == GPU_DIR:
        return _load_gpu_file(str(path))  # shipped files are memoised; user files are re-read
    return _parse_gpu(_load_yaml(path), str(path), str(path))
