"""Device files (``data/gpus/<name>.yaml``): memory, memory bandwidth, dense peak FLOP/s per
precision, the device kind, optional measured efficiency priors, the host processor a CPU
file describes and the fitted kernel model (:mod:`simdl.costs.gpu_profile`)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import SimdlError, unknown
from ..provenance import Sourced
from .declare import FRACTION, POSITIVE, Choice, Custom, Opaque, Section, Table, Text, dump, knob, parse
from .readers import FrozenMap, _load_yaml, _resolve

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


# What a device file's ``kind`` may say: the host backend that prices it (simdl.hosts).
DEVICE_KINDS = ("cuda", "cpu")


def is_cpu_device_name(name: str) -> bool:
    """Whether the shipped device file ``name`` says ``kind: cpu`` (False for unknown names)."""
    try:
        return load_gpu(name).is_cpu
    except SimdlError:
        return False


def _caches(value: Any, where: str, ctx: Any) -> FrozenMap:
    if value is None:
        return FrozenMap()
    if not isinstance(value, Mapping):
        raise SimdlError(f"{where} = {value!r}; accepted: a mapping of cache names to sizes (e.g. {{L2: 512K}})")
    return FrozenMap({str(k): str(v) for k, v in value.items()})


@dataclass(frozen=True)
class HostProcessor:
    """The processor a CPU device file describes, as the host reports it."""

    model_name: str = knob("model_name", Text(nonempty=True), "/proc/cpuinfo's model name", required=True)
    caches: FrozenMap = knob(
        "caches",
        Custom(_caches, lambda v, owner: dict(v), {"type": "object", "additionalProperties": {"type": "string"}}),
        "per-core cache sizes as sysfs reports them, a subset (e.g. {L1d: 32K, L2: 512K})",
        default=FrozenMap(),
    )
    source: str = knob("source", Text(), "where the model name and sizes come from", default="", dump_default=False)


def _kernels(value: Any, where: str, ctx: Mapping[str, Any]) -> Any:
    if value is None:
        return None
    from ..costs.gpu_profile import parse_kernels

    return parse_kernels(
        value,
        where.rsplit(": kernels", 1)[0],
        {p: v.value for p, v in ctx["peak_flops"].items()},
        ctx["memory_bandwidth"].value,
        {k: v.value for k, v in ctx["priors"].items()},
    )


@dataclass(frozen=True)
class GPU:
    """One device type. Numbers are SI: bytes, bytes/s, FLOP/s."""

    name: str = knob("name", Text(nonempty=True), "the device's name", required=True)
    memory_bytes: Sourced = knob("memory_GiB", POSITIVE, "device memory", required=True)
    memory_bandwidth: Sourced = knob("memory_bandwidth_GB_per_s", POSITIVE, "device memory bandwidth", required=True)
    peak_flops: FrozenMap = knob(
        "peak_{}_TFLOP_per_s", POSITIVE, "dense peak FLOP/s of each precision", each=PRECISIONS, required=True
    )
    kind: str = knob(
        "kind",
        Choice(DEVICE_KINDS),
        """the device type: cuda (a GPU) or cpu (a host CPU as the
                     device); it picks the host backend (simdl.hosts). Absent: cuda""",
        default="cuda",
    )
    priors: FrozenMap = knob("priors", Table(FRACTION, PRIOR_KEYS), "measured efficiency priors, fractions of peak")
    description: str = knob("description", Text(), "what the file describes", default="", dump_default=False)
    source_path: str = ""
    host: HostProcessor | None = knob(
        "host",
        Section(HostProcessor),
        """CPU device files: the processor they
                                      describe, by which calibration and validation recognise the host""",
    )
    # The fitted kernel model, or None; its block as written (for to_dict) outside equality.
    kernels: Any = knob(
        "kernels",
        Custom(_kernels, lambda v, owner: copy.deepcopy(owner.kernels_raw), {"type": "object"}),
        "the fitted GPU kernel model, read by simdl.costs.gpu_profile",
    )
    kernels_raw: Any = field(default=None, compare=False, repr=False)
    device_memory: Any = knob(
        "device_memory",
        Opaque(),
        """context, library workspaces and NCCL buffers,
                              read by simdl.memory.device""",
        compare=False,
    )

    @staticmethod
    def _finish(values: dict[str, Any], raw: Mapping[str, Any], where: str, ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {**values, "source_path": ctx.get("source_path", where), "kernels_raw": raw.get("kernels")}

    @property
    def host_model(self) -> str:
        return self.host.model_name if self.host else ""

    @property
    def host_caches(self) -> FrozenMap:
        return self.host.caches if self.host else FrozenMap()

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
        return dump(self)


def _parse_gpu(raw: Mapping[str, Any], where: str, source_path: str) -> GPU:
    return parse(GPU, raw, where, {"source_path": source_path})


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
