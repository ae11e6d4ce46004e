"""GPU and cluster descriptions, loaded from the YAML files in ``simdl/cluster/data``.

A *GPU file* (``data/gpus/<name>.yaml``) describes one device type: memory,
memory bandwidth, dense peak FLOP/s per precision and optional measured
efficiency priors. A *cluster preset* (``data/clusters/<name>.yaml``) names a
GPU and describes how many sit in a node, how they are linked inside the node
and across nodes, optional parameter-server nodes, efficiency factors, memory
overheads and the host CPU.

Every hardware number in these files is ``{value, kind, source}`` with the unit
in the key (see :mod:`simdl.provenance`); this module converts them once, on
load, to SI (:class:`~simdl.provenance.Sourced` values in bytes, seconds,
bytes/s, FLOP/s) and validates them. Any problem is one
:class:`~simdl.errors.SimdlError` line that names the file, the key, the value
and what is accepted.

Only the *shape* of a preset (``gpus_per_node``, ``nodes``, ``max_nodes``,
``ps_servers.count``) and the NVLink mesh wiring (``intra_node.mesh.links``) are
plain integers: they describe configuration, not a measured quantity. Counts
that are hardware facts with possible doubt (``nics_per_node``, ``cpu_cores``)
are sourced like any other number.

A preset file may start with ``extends: <preset>`` and give only the keys that
differ (mappings merge key by key); the variants of the study-2 cluster use it.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, overload


from ..collectives.cost import COLLECTIVES
from ..collectives.regimes import Regime, RegimeCurve, RegimeModel
from ..errors import SimdlError, unknown
from ..provenance import KINDS, Sourced, read
from ..units import GB
from ..workload.op_classes import MEMORY_CLASSES

DATA_DIR = Path(__file__).resolve().parent / "data"
GPU_DIR = DATA_DIR / "gpus"
CLUSTER_DIR = DATA_DIR / "clusters"

#: Precisions a GPU file gives a dense peak for (key ``peak_<p>_TFLOP_per_s``).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Intra-node link types. ``nvlink``: direct GPU-GPU NVLink bundles (a mesh);
#: ``nvswitch``: every GPU has one port bundle to a non-blocking switch;
#: ``pcie``: GPUs talk through a PCIe switch; ``shm``: processes on one host.
LINK_TYPES = ("nvlink", "nvswitch", "pcie", "shm")
#: Measured efficiency priors a GPU file may carry (fractions of its peaks).
PRIOR_KEYS = (
    "gemm_fp32_fraction",
    "gemm_tf32_fraction",
    "gemm_bf16_fraction",
    "gemm_fp16_fraction",
    "memory_bandwidth_fraction",
)


# --------------------------------------------------------------------------- helpers


class FrozenMap(Mapping[Any, Any]):
    """A read-only, hashable mapping, so that frozen dataclasses holding one hash."""

    __slots__ = ("_d", "_h")

    def __init__(self, items: Mapping[Any, Any] | None = None) -> None:
        self._d = dict(items or {})
        self._h: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(tuple(sorted(self._d.items())))
        return self._h

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _load_yaml(path: Path) -> dict[str, Any]:
    from .safe_yaml import load_yaml_file  # bounded size, depth and alias expansion

    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise SimdlError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    return data


def _check_keys(section: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in section:
        if key not in allowed:
            raise SimdlError(f"{where}: {unknown('key', key, allowed)}")


@overload
def _section(raw: Mapping[str, Any], key: str, where: str, *, required: Literal[True] = ...) -> dict[str, Any]: ...
@overload
def _section(raw: Mapping[str, Any], key: str, where: str, *, required: bool) -> dict[str, Any] | None: ...
def _section(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> dict[str, Any] | None:
    if key not in raw or raw[key] is None:
        if required:
            raise SimdlError(f"{where}: missing key {key!r}")
        return None
    value = raw[key]
    if not isinstance(value, Mapping):
        raise SimdlError(f"{where}: {key} must be a mapping, got {value!r}")
    return dict(value)


@overload
def _count(raw: Mapping[str, Any], key: str, where: str, *, minimum: int = ...,
           default: int | None = ..., allow_null: Literal[False] = ...) -> int: ...
@overload
def _count(raw: Mapping[str, Any], key: str, where: str, *, minimum: int = ...,
           default: int | None = ..., allow_null: bool) -> int | None: ...
def _count(raw: Mapping[str, Any], key: str, where: str, *, minimum: int = 1,
           default: int | None = None, allow_null: bool = False) -> int | None:
    """A plain integer count (preset shape, not a measured number)."""
    if key not in raw:
        if default is not None or allow_null:
            return default
        raise SimdlError(f"{where}: missing key {key!r}")
    value = raw[key]
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        null = " or null (unlimited)" if allow_null else ""
        raise SimdlError(f"{where}: {key} = {value!r}; accepted: an integer >= {minimum}{null}")
    if value < minimum:
        raise SimdlError(f"{where}: {key} = {value} must be >= {minimum}")
    return value


def _sourced_count(raw: Mapping[str, Any], key: str, where: str) -> Sourced:
    """A sourced count (``{value, kind, source}``) that must be a positive integer."""
    s = read(raw, key, where=where, strictly_positive=True)
    if not float(s.value).is_integer():
        raise SimdlError(f"{where}: {key} = {s.value} must be a whole number")
    return s


@overload
def _fraction(raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = ...,
              required: Literal[True] = ...) -> Sourced: ...
@overload
def _fraction(raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = ...,
              required: bool) -> Sourced | None: ...
def _fraction(raw: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = False,
              required: bool = True) -> Sourced | None:
    if key not in raw and not required:
        return None
    s = read(raw, key, where=where)
    ok = (0.0 <= s.value < 1.0) if allow_zero else (0.0 < s.value <= 1.0)
    if not ok:
        accepted = "0 <= value < 1" if allow_zero else "0 < value <= 1"
        raise SimdlError(f"{where}: {key} = {s.value}; accepted: a fraction, {accepted}")
    return s


def _positive(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Sourced | None:
    if key not in raw and not required:
        return None
    return read(raw, key, where=where, strictly_positive=True)


@overload
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: Literal[True] = ...) -> Sourced: ...
@overload
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: bool) -> Sourced | None: ...
def _nonneg(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> Sourced | None:
    if key not in raw and not required:
        return None
    return read(raw, key, where=where, minimum=0.0)


def _put(out: dict[str, Any], key: str, value: Sourced | None) -> None:
    if value is not None:
        out[key] = value.to_dict(key)


def _resolve(name_or_path: str | os.PathLike, folder: Path, what: str, names: tuple[str, ...]) -> Path:
    """A preset name (case-insensitive) or a path to a YAML file."""
    text = os.fspath(name_or_path)
    path = Path(text)
    if text.endswith((".yaml", ".yml")) or os.sep in text or path.is_file():
        if path.is_dir():
            raise SimdlError(f"{what} file {text!r} is a directory; accepted: a YAML file")
        if not path.exists():
            raise SimdlError(f"{what} file {text!r} does not exist")
        return path
    lowered = {n.lower(): n for n in names}
    if text.lower() not in lowered:
        raise unknown(what, text, names)
    return folder / f"{lowered[text.lower()]}.yaml"


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


# --------------------------------------------------------------------------- cluster parts

_INTRA_KEYS = ("link", "bandwidth_GB_per_s", "latency_us", "pcie_GB_per_s", "pcie_latency_us", "mesh")
_MESH_KEYS = ("per_link_GB_per_s", "links", "source")


@dataclass(frozen=True)
class Mesh:
    """Wiring of an NVLink mesh: bonded link counts between local GPU pairs."""

    per_link: Sourced  # bytes/s per direction of one NVLink
    links: tuple[tuple[int, int, int], ...]  # (local gpu a, local gpu b, number of links), a < b
    source: str

    def pair_links(self, a: int, b: int) -> int:
        lo, hi = min(a, b), max(a, b)
        for x, y, n in self.links:
            if (x, y) == (lo, hi):
                return n
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_link_GB_per_s": self.per_link.to_dict("per_link_GB_per_s"),
            "links": [list(t) for t in self.links],
            "source": self.source,
        }


@dataclass(frozen=True)
class Link:
    """The intra-node interconnect. ``bandwidth`` is per GPU per direction: the rate a
    ring step out of one GPU can use (for a mesh: the GPU's total NVLink egress)."""

    link: str
    bandwidth: Sourced  # bytes/s
    latency: Sourced  # s, one GPU-to-GPU transfer inside the node
    pcie_bandwidth: Sourced  # bytes/s per direction of each GPU's PCIe link (to host and NICs)
    pcie_latency: Sourced  # s, GPU to NIC (or host) across PCIe
    mesh: Mesh | None = None  # only for link == 'nvlink'; None = fully connected, equal shares

    def pair_bandwidth(self, a: int, b: int, gpus_per_node: int) -> float:
        """Direct bandwidth between local GPUs ``a`` and ``b`` (mesh only; else the port rate)."""
        if self.link != "nvlink":
            return self.bandwidth.value
        if self.mesh is None:
            return self.bandwidth.value / max(1, gpus_per_node - 1)
        return self.mesh.pair_links(a, b) * self.mesh.per_link.value

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"link": self.link}
        _put(out, "bandwidth_GB_per_s", self.bandwidth)
        _put(out, "latency_us", self.latency)
        if self.link not in ("pcie", "shm"):
            _put(out, "pcie_GB_per_s", self.pcie_bandwidth)
            _put(out, "pcie_latency_us", self.pcie_latency)
        if self.mesh is not None:
            out["mesh"] = self.mesh.to_dict()
        return out


_INTER_KEYS = ("nic_Gb_per_s", "nics_per_node", "latency_us")


@dataclass(frozen=True)
class Network:
    """The inter-node network as seen from one node (the ``inter_node`` section)."""

    nic_bandwidth: Sourced  # bytes/s per NIC per direction
    nics_per_node: Sourced  # count
    latency: Sourced  # s, NIC to NIC through the network

    @property
    def nics(self) -> int:
        return int(self.nics_per_node.value)

    @property
    def node_bandwidth(self) -> float:
        """All NICs of one node together, bytes/s per direction."""
        return self.nic_bandwidth.value * self.nics

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "nic_Gb_per_s", self.nic_bandwidth)
        _put(out, "nics_per_node", self.nics_per_node)
        _put(out, "latency_us", self.latency)
        return out


_PS_KEYS = ("count", "nic_Gb_per_s", "latency_us", "cpu_cores", "update_bandwidth_GB_per_s",
            "worker_link_Gb_per_s", "receive_fault_ns_per_byte", "response_copy_ns_per_byte")


@dataclass(frozen=True)
class PSServers:
    """CPU parameter-server nodes (one NIC each)."""

    count: int
    nic_bandwidth: Sourced  # bytes/s per direction
    latency: Sourced  # s, one-way worker-to-server latency
    cpu_cores: Sourced
    update_bandwidth: Sourced  # bytes/s of host memory traffic the optimizer update streams through
    # Optional, from simdl calibrate's RPC measurements (calibration/ps.py, fitted by
    # simdl.calibrate.ps.PSFit; used by simdl.analytic.engine.ps_transfer_times). None: the
    # worker side is its node's link and a transfer has no costs besides the link's.
    worker_link: Sourced | None = None  # bytes/s one worker's push or pull reaches alone
    receive_fault: Sourced | None = None  # s per byte of a message received above the mmap threshold
    response_copy: Sourced | None = None  # s per byte the server copies a pull's answer

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        _put(out, "nic_Gb_per_s", self.nic_bandwidth)
        _put(out, "latency_us", self.latency)
        _put(out, "cpu_cores", self.cpu_cores)
        _put(out, "update_bandwidth_GB_per_s", self.update_bandwidth)
        for key, v in (("worker_link_Gb_per_s", self.worker_link), ("receive_fault_ns_per_byte", self.receive_fault),
                       ("response_copy_ns_per_byte", self.response_copy)):
            if v is not None:
                _put(out, key, v)
        return out


# The collectives FSDP2 issues synchronously (simdl.strategies.fsdp.collectives_block).
BLOCKING_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
_EFF_KEYS = ("matmul", "memory_bandwidth", "kernel_launch_us", "collective_bandwidth_intra",
             "collective_bandwidth_inter", "collective_latency_intra_us", "collective_latency_inter_us",
             "collective_overhead_us", "comm_compute_interference",
             *(f"collective_bandwidth_factor_{c}" for c in ("all_gather", "reduce_scatter", "broadcast", "send_recv")),
             *(f"matmul_{p}" for p in PRECISIONS), "matmul_call_overhead_us", "collective_regimes_intra",
             "collective_regimes_subgroups",
             "stream_bandwidth", "stream_call_overhead_us", "copy_bandwidth", "copy_in_step_factor",
             "collective_load_factor", "collective_load_factor_all_reduce", "collective_load_half_size_MiB",
             "collective_load_overhead_us", "fsdp_unit_overhead_us", "compute_jitter",
             *(f"collective_blocking_factor_{c}" for c in BLOCKING_COLLECTIVES), "collective_blocking_wait",
             *(f"memory_bandwidth_{c}" for c in MEMORY_CLASSES), "compute_memory_overlap",
             *(f"call_overhead_{c}_us" for c in MEMORY_CLASSES), "conv_weight_grad_bandwidth")


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak that real kernels and collectives reach, and fixed overheads (s)."""

    matmul: Sourced
    memory_bandwidth: Sourced
    kernel_launch: Sourced  # s per kernel
    collective_bandwidth_intra: Sourced  # bus bandwidth / intra link bandwidth
    collective_latency_intra: Sourced  # s per ring step inside a node
    collective_bandwidth_inter: Sourced | None = None  # bus bandwidth / NIC bandwidth per node
    collective_latency_inter: Sourced | None = None  # s per ring step when the ring crosses nodes
    collective_overhead: Sourced | None = None  # s fixed per collective call (a 0-byte collective)
    # Seconds added per second that compute and communication run concurrently (0 = free
    # overlap, the engine's default; 1 = they serialise; > 1 = each slows the other down, as
    # gloo's threads and the compute do on the same CPU cores). Fitted by `simdl calibrate`.
    comm_compute_interference: Sourced | None = None
    # Optional per-collective bus bandwidth relative to all_reduce's (default 1): gloo's
    # all_gather / reduce_scatter run at a fraction of its all_reduce. collective -> Sourced.
    collective_bandwidth_factors: FrozenMap = field(default_factory=FrozenMap)
    # Optional matmul efficiency per peak precision (key ``matmul_<fp32|tf32|bf16|fp16>``);
    # ``matmul`` applies to the precisions not given. precision -> Sourced fraction.
    matmul_by_precision: FrozenMap = field(default_factory=FrozenMap)
    # Optional fixed seconds per matmul/convolution call (forward, and each backward gradient),
    # added to kernel_launch: large for oneDNN on CPU. Fitted by `simdl calibrate`.
    matmul_call_overhead: Sourced | None = None
    # Optional piecewise alpha-beta costs of collectives inside a node (calibrated gloo:
    # bandwidth changes with message size). Where a collective has a curve it replaces
    # bandwidth x factor, latency and overhead above (simdl.collectives.regimes).
    collective_regimes_intra: RegimeModel | None = None
    # Optional regime curves of groups smaller than a node, by group size (int -> RegimeModel):
    # measured with every such group of the node calling at once, as FSDP2's hybrid shard
    # and replicate groups do (calibration/collectives.py, scopes sub<d>). Where a size has
    # a curve for a collective it replaces collective_regimes_intra's for that group size:
    # on a CPU host the concurrent groups share cores and memory, and gloo's all-gather
    # copies the whole output whatever the group, so a 2-rank group costs more than the
    # node's curve scaled by the ring's factors says (benchmarks/gloo_group_size_cpu.py).
    collective_regimes_subgroups: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of the memory bandwidth that large streaming tensor ops reach (the
    # optimizer step, FSDP's copy-in/copy-out, DDP's bucket copies): they move whole
    # parameter-sized tensors, unlike the activation traffic of a table row that
    # ``memory_bandwidth`` describes. Default: ``memory_bandwidth``. Fitted by `simdl calibrate`.
    stream_bandwidth: Sourced | None = None
    # Optional seconds per call of such an op (per tensor: PyTorch's CPU optimizer loops over
    # tensors one at a time). Default: ``kernel_launch_us``.
    stream_call_overhead: Sourced | None = None
    # Optional fraction of the memory bandwidth a copy between two large buffers reaches
    # (FSDP copy-in/out, DDP bucket copies), bytes counted as read + written. On CPUs the
    # destination's lines are read before they are written (write-allocate), so copies
    # reach less than in-place updates. Default: ``stream_bandwidth``.
    copy_bandwidth: Sourced | None = None
    # Optional, for ranks whose copies share the cores and memory with the rest of the step
    # (CPU): how many times its time on the idle machine (copy_bandwidth, page faults of
    # fresh buffers) a strategy's buffer copy (FSDP2 packing and unpacking its collective
    # buffers, DDP filling its buckets) takes inside a training step. A profiled ViT-B/32
    # FSDP step on an Intel Xeon (cpu-local's host) ran the 28 MB chunk_cat of each unit's gradients at
    # 0.67 GB/s, against 4-7.5 ms alone. Fitted by `simdl calibrate` from the profiled
    # strategy steps (simdl.calibrate.in_step.CopyFit) and printed; written into a profile only
    # where simdl.calibrate.profile.COPY_FACTOR_FROM_PROFILED_STEPS says (one factor did not
    # carry over between models on the EPYC); a profile may set it by hand. Absent = 1.
    copy_in_step_factor: Sourced | None = None
    # Optional, for ranks that compute and communicate on the same host cores (CPU, gloo): a
    # collective inside a training step is slower than the same call on the idle machine the
    # collective costs were measured on (its threads share the cores with the compute and
    # wait for the peers' threads to be scheduled). Its latency and bandwidth terms are
    # scaled by ``collective_load_factor`` (>= 1) and ``collective_load_overhead_us`` is added
    # per call. Fitted by `simdl calibrate` from strategy steps; absent = 1 and 0.
    collective_load_factor: Sourced | None = None
    collective_load_overhead: Sourced | None = None
    # Optional factor for all_reduce alone (default: ``collective_load_factor``): on the
    # idle machine gloo's all_reduce reaches 2-3x the bus bandwidth of its reduce_scatter
    # and all_gather (cpu-local's collective fits: 1.57 against 0.49 and 0.87 GB/s), and
    # inside a training step it loses most of that lead (profiled FSDP2 steps of cpu-local's
    # calibration: an in-step all-reduce of a unit took about as long as the reduce-scatter of the same
    # bytes). Fitted by `simdl calibrate` with the other factor.
    collective_load_factor_all_reduce: Sourced | None = None
    # Optional message size (bytes; key ``collective_load_half_size_MiB``) at which the slowdown
    # is half its small-message value: the factors above then apply to small messages, and a
    # message of S bytes is slowed by 1 + (factor - 1) / (1 + S / half_size). Measured strategy
    # steps (cpu-local's calibration): a single 403 MB all-reduce in a step runs at nearly its
    # idle speed, while 1-67 MB ones take 2-3x theirs. Absent: every size gets the full factor.
    collective_load_half_size: Sourced | None = None
    # Optional, for collectives that hold the training thread (FSDP2 on CPU: gloo's work is
    # waited for on the host; simdl.strategies.fsdp.collectives_block). Measured directly:
    # `simdl calibrate` logs every FSDP collective call of its strategy steps
    # (simdl.calibrate.in_step). ``collective_blocking_factors``: per collective, how many
    # times its idle time a call's transfer takes in a step (keys
    # ``collective_blocking_factor_<collective>``); it replaces the load factors above
    # (fitted to whole steps, which also carry the work around the calls) for such calls,
    # and ``collective_load_overhead_us`` is still added per call.
    # ``collective_blocking_wait``: the time ranks spend in the calls waiting for a peer that
    # is still computing, as a fraction of the step's compute (ranks drift apart while they
    # compute and meet at every call; logged waits in calibration were 5-16 % of the local step
    # on every model, and no steadier per call).
    collective_blocking_factors: FrozenMap = field(default_factory=FrozenMap)
    collective_blocking_wait: Sourced | None = None
    # Optional host time (s; key ``fsdp_unit_overhead_us``) FSDP2 spends per unit per step
    # outside its collectives and the copies the plan prices: its forward and backward hooks
    # (pre-forward unshard, pre-backward, post-backward reduce) are Python on the training
    # thread. The calls logged in the strategy steps (calibration on an AMD EPYC, 2 ranks)
    # left 150-250 ms per convnext_tiny / efficientnet_v2_s step outside the calls and the
    # local step, about as much with one collective per unit (NO_SHARD) as with three
    # (FULL_SHARD): a cost per unit, not per call. Fitted by `simdl calibrate` with the other
    # step parameters; absent = 0 (every GPU preset: there the hooks run ahead of the kernels).
    fsdp_unit_overhead: Sourced | None = None
    # Optional spread of a rank's compute time from one step to the next: the robust standard
    # deviation (1.4826 x median absolute deviation) of log(step time) of ranks training on
    # their own, all at once, so the OS scheduling of the shared cores is in it
    # (simdl.calibrate.jitter). The SimPy engine draws each parameter-server
    # worker's compute per step from a mean-one lognormal of this sigma unless --jitter says
    # otherwise: the workers drift apart, which sets where pulls and pushes meet at the
    # server (staleness) and when an SSP bound binds. Measured by `simdl calibrate`.
    compute_jitter: Sourced | None = None
    # Optional fraction of the memory bandwidth per memory-bound op class (key
    # ``memory_bandwidth_<class>``, simdl.workload.op_classes.MEMORY_CLASSES): a row of that
    # class streams its bytes at this rate instead of ``memory_bandwidth``'s. Not capped at 1
    # (a small tensor that stays in cache beats the datasheet's DRAM figure). class -> Sourced.
    memory_bandwidth_by_class: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of a row's shorter part (FLOPs or bytes time) hidden under its longer
    # part: 1 = the roofline's max (the default; a GPU's warps overlap arithmetic with memory
    # traffic), 0 = their sum (one CPU core runs a small op's arithmetic and its loads in one
    # instruction stream). Fitted by `simdl calibrate` (0 on the 2-core development VMs).
    compute_memory_overlap: Sourced | None = None
    # Optional fixed cost (s; key ``call_overhead_<class>_us``) per call of a memory-bound
    # class's row, on top of its kernels' launches: a CPU batch norm in training mode has a
    # fixed part whatever its size (statistics set-up, parallel regions; fitted 69 us on the
    # Zen 3 EPYC at 2 ranks, 122 us at 4). Fitted by `simdl calibrate` only for the classes
    # simdl.calibrate.fit.CALL_OVERHEAD_CLASSES names (none by default); absent = 0.
    call_overhead_by_class: FrozenMap = field(default_factory=FrozenMap)
    # Optional fraction of the memory bandwidth at which a convolution's backward accumulates
    # its weight gradient, once per sample (a CPU's backward-weights kernel reduces over the
    # batch image by image into a filter-sized buffer): each conv row's backward costs batch x
    # weight bytes at this rate on top of its roofline time. Fitted by `simdl calibrate` (CPU);
    # absent on GPUs (their kernels tile the batch), where the term is 0.
    conv_weight_grad_bandwidth: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in (("matmul", "matmul"), ("memory_bandwidth", "memory_bandwidth"),
                          ("kernel_launch", "kernel_launch_us"),
                          ("collective_bandwidth_intra", "collective_bandwidth_intra"),
                          ("collective_bandwidth_inter", "collective_bandwidth_inter"),
                          ("collective_latency_intra", "collective_latency_intra_us"),
                          ("collective_latency_inter", "collective_latency_inter_us"),
                          ("collective_overhead", "collective_overhead_us"),
                          ("comm_compute_interference", "comm_compute_interference")):
            _put(out, key, getattr(self, attr))
        for c, v in self.collective_bandwidth_factors.items():
            _put(out, f"collective_bandwidth_factor_{c}", v)
        for p, v in self.matmul_by_precision.items():
            _put(out, f"matmul_{p}", v)
        _put(out, "matmul_call_overhead_us", self.matmul_call_overhead)
        _put(out, "stream_bandwidth", self.stream_bandwidth)
        _put(out, "stream_call_overhead_us", self.stream_call_overhead)
        _put(out, "copy_bandwidth", self.copy_bandwidth)
        _put(out, "copy_in_step_factor", self.copy_in_step_factor)
        _put(out, "collective_load_factor", self.collective_load_factor)
        _put(out, "collective_load_factor_all_reduce", self.collective_load_factor_all_reduce)
        _put(out, "collective_load_half_size_MiB", self.collective_load_half_size)
        _put(out, "collective_load_overhead_us", self.collective_load_overhead)
        _put(out, "fsdp_unit_overhead_us", self.fsdp_unit_overhead)
        _put(out, "compute_jitter", self.compute_jitter)
        for c, v in self.collective_blocking_factors.items():
            _put(out, f"collective_blocking_factor_{c}", v)
        _put(out, "collective_blocking_wait", self.collective_blocking_wait)
        for c, v in self.memory_bandwidth_by_class.items():
            _put(out, f"memory_bandwidth_{c}", v)
        _put(out, "compute_memory_overlap", self.compute_memory_overlap)
        for c, v in self.call_overhead_by_class.items():
            _put(out, f"call_overhead_{c}_us", v)
        _put(out, "conv_weight_grad_bandwidth", self.conv_weight_grad_bandwidth)
        if self.collective_regimes_intra is not None:
            out["collective_regimes_intra"] = regimes_to_dict(self.collective_regimes_intra)
        if self.collective_regimes_subgroups:
            out["collective_regimes_subgroups"] = {str(d): regimes_to_dict(m)
                                                   for d, m in sorted(self.collective_regimes_subgroups.items())}
        return out


_REGIME_SECTION_KEYS = ("kind", "source", "link_GB_per_s", "collectives")
_REGIME_CURVE_KEYS = ("overhead_us", "regimes")
_REGIME_KEYS = ("step_bytes", "alpha_us", "bus_GB_per_s")


def _number(raw: Mapping[str, Any], key: str, where: str, *, positive: bool = False) -> float:
    v = raw.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SimdlError(f"{where}: {key} = {v!r}; accepted: a number")
    if (v <= 0) if positive else (v < 0):
        raise SimdlError(f"{where}: {key} = {v}; accepted: a number {'>' if positive else '>='} 0")
    return float(v)


def _parse_regimes(raw: Any, where: str) -> RegimeModel:
    """``collective_regimes_intra``: {kind, source, link_GB_per_s, collectives: {name:
    {overhead_us, regimes: [{step_bytes: [lo, hi], alpha_us, bus_GB_per_s}, ...]}}}; a regime's
    ``step_bytes`` is the range of bytes per ring step it was fitted on (ordered, disjoint)."""
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where} must be a mapping {{kind, source, link_GB_per_s, collectives}}, got {raw!r}")
    _check_keys(raw, _REGIME_SECTION_KEYS, where)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise SimdlError(f"{where}: kind is {kind!r}; accepted: {', '.join(KINDS)}")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SimdlError(f"{where}: source must name where the regimes come from")
    link = _number(raw, "link_GB_per_s", where, positive=True) * GB
    colls = raw.get("collectives")
    if not isinstance(colls, Mapping) or not colls:
        raise SimdlError(f"{where}: collectives must be a non-empty mapping collective -> {{overhead_us, regimes}}")
    curves = []
    for name, c in colls.items():
        w = f"{where}: collectives: {name}"
        if name not in COLLECTIVES:
            raise SimdlError(f"{where}: {unknown('collective', name, COLLECTIVES)}")
        if not isinstance(c, Mapping):
            raise SimdlError(f"{w} must be a mapping {{overhead_us, regimes}}, got {c!r}")
        _check_keys(c, _REGIME_CURVE_KEYS, w)
        regs = c.get("regimes")
        if not isinstance(regs, list) or not regs:
            raise SimdlError(f"{w}: regimes must be a non-empty list of {{step_bytes, alpha_us, bus_GB_per_s}}")
        out = []
        for i, r in enumerate(regs):
            wr = f"{w}: regimes[{i}]"
            if not isinstance(r, Mapping):
                raise SimdlError(f"{wr} must be a mapping {{step_bytes, alpha_us, bus_GB_per_s}}, got {r!r}")
            _check_keys(r, _REGIME_KEYS, wr)
            rng = r.get("step_bytes")
            ok = (isinstance(rng, list) and len(rng) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in rng)
                  and rng[0] <= rng[1])
            if not ok or not isinstance(rng, list):
                raise SimdlError(f"{wr}: step_bytes = {rng!r}; accepted: [lo, hi], 0 <= lo <= hi (bytes per ring "
                                 "step of the sizes the regime was fitted on)")
            out.append(Regime(float(rng[0]), float(rng[1]), _number(r, "alpha_us", wr) * 1e-6,
                              _number(r, "bus_GB_per_s", wr, positive=True) * GB))
        for i in range(1, len(out)):
            if out[i].lo_step_bytes <= out[i - 1].hi_step_bytes:
                raise SimdlError(f"{w}: regimes[{i}].step_bytes starts at {out[i].lo_step_bytes:g}; accepted: above "
                                 f"regimes[{i - 1}]'s end ({out[i - 1].hi_step_bytes:g}): ordered, disjoint ranges")
        curves.append(RegimeCurve(name, _number(c, "overhead_us", w) * 1e-6, tuple(out)))
    return RegimeModel(tuple(curves), link, kind, source.strip())


def _parse_subgroup_regimes(raw: Any, where: str) -> FrozenMap:
    """``collective_regimes_subgroups``: {group size: a ``collective_regimes_intra``-shaped
    section}; null or absent: none."""
    if raw is None:
        return FrozenMap()
    if not isinstance(raw, Mapping):
        raise SimdlError(f"{where} must be a mapping group size -> regimes section, got {raw!r}")
    out = {}
    for key, section in raw.items():
        d = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else None
        if isinstance(key, bool) or d is None or d < 2:
            raise SimdlError(f"{where}: group size {key!r}; accepted: an integer >= 2 (ranks per group)")
        out[d] = _parse_regimes(section, f"{where}: {key}")
    return FrozenMap(out)


def regimes_to_dict(model: RegimeModel) -> dict[str, Any]:
    """The YAML form of a :class:`RegimeModel` (inverse of ``_parse_regimes``)."""
    def g(x: float) -> float | int:
        r = float(f"{x:.5g}")
        return int(r) if r.is_integer() and abs(r) < 1e15 else r

    return {
        "kind": model.kind, "source": model.source, "link_GB_per_s": g(model.link_bandwidth / GB),
        "collectives": {c.collective: {"overhead_us": g(c.overhead * 1e6), "regimes": [
            {"step_bytes": [int(r.lo_step_bytes), int(r.hi_step_bytes)], "alpha_us": g(r.alpha * 1e6),
             "bus_GB_per_s": g(r.bandwidth / GB)}
            for r in c.regimes]} for c in model.curves},
    }


_MEM_KEYS = ("context_MiB", "allocator_fragmentation", "workspace_MiB", "conv_backward_scratch")


@dataclass(frozen=True)
class MemoryOverheads:
    """Per-process device memory that is not tensors of the model."""

    context_bytes: Sourced  # CUDA context + library handles (for the CPU device: process baseline)
    allocator_fragmentation: Sourced  # fraction of reserved memory lost to fragmentation
    workspace_bytes: Sourced  # cuBLAS workspace kept per handle/stream
    # Scratch a convolution's backward allocates, per byte of its input plus its output
    # gradient, while it runs (oneDNN on the CPU reorders both; absent: none, as on CUDA,
    # where cuDNN's workspace is part of workspace_MiB).
    conv_backward_scratch: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "context_MiB", self.context_bytes)
        _put(out, "allocator_fragmentation", self.allocator_fragmentation)
        _put(out, "workspace_MiB", self.workspace_bytes)
        _put(out, "conv_backward_scratch", self.conv_backward_scratch)
        return out


_HOST_KEYS = ("cpu_cores", "dataloader_sample_us", "page_fault_ns_per_byte", "mmap_threshold_MiB",
              "trim_threshold_MiB")


@dataclass(frozen=True)
class Host:
    """The host CPU of one node."""

    cpu_cores: Sourced
    dataloader_sample: Sourced  # s of one CPU core to load and augment one sample
    # Devices whose tensors live in host memory (the cpu "GPU"): a buffer larger than the C
    # allocator's mmap threshold is mapped fresh at every allocation and unmapped at its
    # free, so each such allocation pays a page fault per page on first touch (s per byte).
    # GPUs keep freed blocks in PyTorch's caching allocator: absent = 0.
    page_fault_per_byte: Sourced | None = None
    mmap_threshold_bytes: Sourced | None = None
    # Free bytes at the heap's top at which glibc gives them back (absent: twice the mmap
    # threshold, glibc's dynamic setting; simdl.cluster.allocator.trim_threshold). Set where
    # the ranks ran with MALLOC_TRIM_THRESHOLD_ (simdl.cluster.host.allocator_env).
    trim_threshold_bytes: Sourced | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "cpu_cores", self.cpu_cores)
        _put(out, "dataloader_sample_us", self.dataloader_sample)
        _put(out, "page_fault_ns_per_byte", self.page_fault_per_byte)
        _put(out, "mmap_threshold_MiB", self.mmap_threshold_bytes)
        _put(out, "trim_threshold_MiB", self.trim_threshold_bytes)
        return out


_CLUSTER_KEYS = ("name", "description", "extends", "gpu", "gpus_per_node", "nodes", "max_nodes",
                 "shared_device", "collective_backend", "intra_node", "inter_node", "ps_servers", "efficiency", "memory",
                 "host", "notes", "calibration", "compute_profile")


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster preset: a GPU type, the node shape, links, and efficiency factors."""

    name: str
    description: str
    gpu: GPU
    gpus_per_node: int
    nodes: int  # default number of nodes
    max_nodes: int | None  # None = unlimited
    intra_node: Link
    inter_node: Network | None
    ps_servers: PSServers | None
    efficiency: Efficiency
    memory: MemoryOverheads
    host: Host
    shared_device: bool = False  # True: the ranks of a node share one device (cpu-local)
    # c10d backend of the collectives (simdl.collectives.backends): configuration, not a
    # measured number; absent in the file, PyTorch's default for the device.
    collective_backend: str = "nccl"
    notes: str = ""
    source_path: str = ""
    gpu_ref: str = ""  # the ``gpu`` value as written in the file
    # Free-form provenance and fit quality written by `simdl calibrate` (host, devices,
    # versions, date, measurement ranges, residuals). Not used by the engines; kept out of
    # equality and hashing so that a spec stays hashable.
    calibration: dict = field(default_factory=dict, compare=False, repr=False)
    # Absolute path of the measured per-row compute times of profiled models
    # (simdl.analytic.measured), "" for none; with its provenance for to_dict.
    compute_profile: str = ""
    compute_profile_source: str = field(default="", compare=False, repr=False)

    @property
    def default_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.inter_node is not None and (self.max_nodes is None or self.max_nodes > 1)

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (full, without ``extends``); ``load_cluster`` of it gives this spec back."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "gpu": self.gpu_ref or self.gpu.name,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "max_nodes": self.max_nodes,
        }
        if self.shared_device:
            out["shared_device"] = True
        out["collective_backend"] = self.collective_backend
        out["intra_node"] = self.intra_node.to_dict()
        if self.inter_node is not None:
            out["inter_node"] = self.inter_node.to_dict()
        if self.ps_servers is not None:
            out["ps_servers"] = self.ps_servers.to_dict()
        out["efficiency"] = self.efficiency.to_dict()
        out["memory"] = self.memory.to_dict()
        out["host"] = self.host.to_dict()
        if self.notes:
            out["notes"] = self.notes
        if self.compute_profile:
            out["compute_profile"] = {"file": self.compute_profile, "kind": "calibrated",
                                      "source": self.compute_profile_source}
        if self.calibration:
            out["calibration"] = copy.deepcopy(self.calibration)
        return out


# --------------------------------------------------------------------------- cluster parsing


def _parse_mesh(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Mesh:
    _check_keys(raw, _MESH_KEYS, where)
    per_link = read(raw, "per_link_GB_per_s", where=where, strictly_positive=True)
    links_raw = raw.get("links")
    if not isinstance(links_raw, list) or not links_raw:
        raise SimdlError(f"{where}: links must be a non-empty list of [gpu_a, gpu_b, n_links], got {links_raw!r}")
    seen: set[tuple[int, int]] = set()
    links: list[tuple[int, int, int]] = []
    for item in links_raw:
        ok = (isinstance(item, list) and len(item) == 3
              and all(isinstance(v, int) and not isinstance(v, bool) for v in item))
        if not ok:
            raise SimdlError(f"{where}: links entry {item!r}; accepted: [gpu_a, gpu_b, n_links] integers")
        a, b, n = item
        if not (0 <= a < gpus_per_node and 0 <= b < gpus_per_node) or a == b:
            raise SimdlError(f"{where}: links entry {item!r}: GPUs must be distinct and in 0..{gpus_per_node - 1}")
        if n < 1:
            raise SimdlError(f"{where}: links entry {item!r}: n_links must be >= 1")
        pair = (min(a, b), max(a, b))
        if pair in seen:
            raise SimdlError(f"{where}: links entry {item!r}: pair {pair} listed twice")
        seen.add(pair)
        links.append((pair[0], pair[1], n))
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise SimdlError(f"{where}: source must say where the wiring comes from")
    return Mesh(per_link, tuple(sorted(links)), source.strip())


def _parse_intra(raw: Mapping[str, Any], where: str, gpus_per_node: int) -> Link:
    _check_keys(raw, _INTRA_KEYS, where)
    link = raw.get("link")
    if link not in LINK_TYPES:
        raise SimdlError(f"{where}: link = {link!r}; accepted: {', '.join(LINK_TYPES)}")
    bandwidth = read(raw, "bandwidth_GB_per_s", where=where, strictly_positive=True)
    latency = read(raw, "latency_us", where=where, minimum=0.0)
    if link in ("pcie", "shm"):
        # The fabric is PCIe (or host memory) itself: its bandwidth and latency are the PCIe figures.
        for key in ("pcie_GB_per_s", "pcie_latency_us"):
            if key in raw:
                raise SimdlError(f"{where}: {key} is not accepted with link: {link} (the fabric is the PCIe "
                                 "link itself); give bandwidth_GB_per_s and latency_us only")
        pcie, pcie_latency = bandwidth, latency
    else:
        for key in ("pcie_GB_per_s", "pcie_latency_us"):
            if key not in raw:
                raise SimdlError(f"{where}: missing key {key!r} (each GPU's PCIe link to host and NICs; "
                                 f"required for link {link})")
        pcie = read(raw, "pcie_GB_per_s", where=where, strictly_positive=True)
        pcie_latency = read(raw, "pcie_latency_us", where=where, minimum=0.0)
    mesh = None
    if "mesh" in raw:
        if link != "nvlink":
            raise SimdlError(f"{where}: mesh is only accepted with link: nvlink, not {link!r}")
        mesh = _parse_mesh(_section(raw, "mesh", where), f"{where}: mesh", gpus_per_node)
        # The declared per-GPU bandwidth must be what the wiring gives every GPU.
        for g in range(gpus_per_node):
            egress = sum(n for a, b, n in mesh.links if g in (a, b)) * mesh.per_link.value
            if not math.isclose(egress, bandwidth.value, rel_tol=0.01):
                raise SimdlError(
                    f"{where}: mesh gives GPU {g} {egress / 1e9:g} GB/s of NVLink but bandwidth_GB_per_s "
                    f"is {bandwidth.value / 1e9:g}; accepted: every GPU's links x per_link = bandwidth")
    return Link(link, bandwidth, latency, pcie, pcie_latency, mesh)


def _parse_inter(raw: Mapping[str, Any], where: str) -> Network:
    _check_keys(raw, _INTER_KEYS, where)
    return Network(
        nic_bandwidth=read(raw, "nic_Gb_per_s", where=where, strictly_positive=True),
        nics_per_node=_sourced_count(raw, "nics_per_node", where),
        latency=read(raw, "latency_us", where=where, minimum=0.0),
    )


def _parse_ps(raw: Mapping[str, Any], where: str) -> PSServers:
    _check_keys(raw, _PS_KEYS, where)
    return PSServers(
        count=_count(raw, "count", where),
        nic_bandwidth=read(raw, "nic_Gb_per_s", where=where, strictly_positive=True),
        latency=read(raw, "latency_us", where=where, minimum=0.0),
        cpu_cores=_sourced_count(raw, "cpu_cores", where),
        update_bandwidth=read(raw, "update_bandwidth_GB_per_s", where=where, strictly_positive=True),
        worker_link=(read(raw, "worker_link_Gb_per_s", where=where, strictly_positive=True)
                     if "worker_link_Gb_per_s" in raw else None),
        receive_fault=read(raw, "receive_fault_ns_per_byte", where=where) if "receive_fault_ns_per_byte" in raw else None,
        response_copy=read(raw, "response_copy_ns_per_byte", where=where) if "response_copy_ns_per_byte" in raw else None,
    )


def _parse_efficiency(raw: Mapping[str, Any], where: str, multi_node: bool) -> Efficiency:
    _check_keys(raw, _EFF_KEYS, where)
    eff = Efficiency(
        matmul=_fraction(raw, "matmul", where),
        memory_bandwidth=_fraction(raw, "memory_bandwidth", where),
        kernel_launch=_nonneg(raw, "kernel_launch_us", where),
        collective_bandwidth_intra=_fraction(raw, "collective_bandwidth_intra", where),
        collective_latency_intra=_nonneg(raw, "collective_latency_intra_us", where),
        collective_bandwidth_inter=_fraction(raw, "collective_bandwidth_inter", where, required=multi_node),
        collective_latency_inter=_nonneg(raw, "collective_latency_inter_us", where, required=multi_node),
        collective_overhead=_nonneg(raw, "collective_overhead_us", where, required=False),
        comm_compute_interference=_interference(raw, where),
        collective_bandwidth_factors=FrozenMap({
            k[len("collective_bandwidth_factor_"):]: read(raw, k, where=where, strictly_positive=True)
            for k in raw if k.startswith("collective_bandwidth_factor_")}),
        matmul_by_precision=FrozenMap({p: _fraction(raw, f"matmul_{p}", where)
                                       for p in PRECISIONS if f"matmul_{p}" in raw}),
        matmul_call_overhead=_nonneg(raw, "matmul_call_overhead_us", where, required=False),
        # Fractions of the memory bandwidth, but not capped at 1: a measured kernel may beat the
        # GPU file's figure (a datasheet, or a one-off copy benchmark).
        stream_bandwidth=_positive(raw, "stream_bandwidth", where, required=False),
        stream_call_overhead=_nonneg(raw, "stream_call_overhead_us", where, required=False),
        copy_bandwidth=_positive(raw, "copy_bandwidth", where, required=False),
        copy_in_step_factor=_bounded(raw, "copy_in_step_factor", where, 0.5, 50.0,
                                     "how many times its idle time a buffer copy takes inside a training step"),
        collective_load_factor=_load_factor(raw, where),
        collective_load_factor_all_reduce=_load_factor(raw, where, "collective_load_factor_all_reduce"),
        collective_load_half_size=_positive(raw, "collective_load_half_size_MiB", where, required=False),
        collective_load_overhead=_nonneg(raw, "collective_load_overhead_us", where, required=False),
        fsdp_unit_overhead=_nonneg(raw, "fsdp_unit_overhead_us", where, required=False),
        collective_blocking_factors=FrozenMap({
            c: _bounded(raw, f"collective_blocking_factor_{c}", where, 0.5, 10.0,
                        "how many times its idle time a blocking collective's transfer takes in a step")
            for c in BLOCKING_COLLECTIVES if f"collective_blocking_factor_{c}" in raw}),
        collective_blocking_wait=_bounded(raw, "collective_blocking_wait", where, 0.0, 1.0,
                                          "time waiting for peers in blocking calls per second of compute"),
        compute_jitter=_bounded(raw, "compute_jitter", where, 0.0, 2.0,
                                "the spread of log(step time), a standard deviation"),
        memory_bandwidth_by_class=FrozenMap({c: _positive(raw, f"memory_bandwidth_{c}", where)
                                             for c in MEMORY_CLASSES if f"memory_bandwidth_{c}" in raw}),
        compute_memory_overlap=_bounded(raw, "compute_memory_overlap", where, 0.0, 1.0,
                                        "the fraction of a row's shorter part hidden under its longer part"),
        call_overhead_by_class=FrozenMap({c: _nonneg(raw, f"call_overhead_{c}_us", where)
                                          for c in MEMORY_CLASSES if f"call_overhead_{c}_us" in raw}),
        conv_weight_grad_bandwidth=_positive(raw, "conv_weight_grad_bandwidth", where, required=False),
        # null: none (a preset that ``extends`` a calibrated one can drop its regimes this way).
        collective_regimes_intra=(_parse_regimes(raw["collective_regimes_intra"], f"{where}: collective_regimes_intra")
                                  if raw.get("collective_regimes_intra") is not None else None),
        collective_regimes_subgroups=_parse_subgroup_regimes(raw.get("collective_regimes_subgroups"),
                                                             f"{where}: collective_regimes_subgroups"),
    )
    return eff


def _bounded(raw: Mapping[str, Any], key: str, where: str, lo: float, hi: float, meaning: str) -> Sourced | None:
    """An optional sourced number that must lie in [lo, hi]."""
    if key not in raw:
        return None
    s = read(raw, key, where=where)
    if not lo <= s.value <= hi:
        raise SimdlError(f"{where}: {key} = {s.value}; accepted: {lo:g} <= value <= {hi:g} ({meaning})")
    return s


def _load_factor(raw: Mapping[str, Any], where: str, key: str = "collective_load_factor") -> Sourced | None:
    return _bounded(raw, key, where, 1.0, 10.0,
                    "how many times slower a collective runs inside a training step")


def _interference(raw: Mapping[str, Any], where: str) -> Sourced | None:
    return _bounded(raw, "comm_compute_interference", where, 0.0, 20.0,
                    "seconds added per second of concurrent compute and communication")


def _parse_memory(raw: Mapping[str, Any], where: str) -> MemoryOverheads:
    _check_keys(raw, _MEM_KEYS, where)
    return MemoryOverheads(
        context_bytes=_nonneg(raw, "context_MiB", where),
        allocator_fragmentation=_fraction(raw, "allocator_fragmentation", where, allow_zero=True),
        workspace_bytes=_nonneg(raw, "workspace_MiB", where),
        conv_backward_scratch=_nonneg(raw, "conv_backward_scratch", where, required=False),
    )


def _parse_host(raw: Mapping[str, Any], where: str) -> Host:
    _check_keys(raw, _HOST_KEYS, where)
    return Host(cpu_cores=_sourced_count(raw, "cpu_cores", where),
                dataloader_sample=_nonneg(raw, "dataloader_sample_us", where),
                page_fault_per_byte=_nonneg(raw, "page_fault_ns_per_byte", where, required=False),
                mmap_threshold_bytes=_positive(raw, "mmap_threshold_MiB", where, required=False),
                trim_threshold_bytes=_positive(raw, "trim_threshold_MiB", where, required=False))


def _parse_backend(raw: Mapping[str, Any], where: str, gpu: GPU) -> str:
    from ..collectives.backends import BACKENDS, DEFAULT_FOR_DEVICE

    name = raw.get("collective_backend")
    if name is None:
        return DEFAULT_FOR_DEVICE[gpu.kind]
    if name not in BACKENDS:
        raise SimdlError(f"{where}: collective_backend = {name!r}; accepted: {', '.join(sorted(BACKENDS))}")
    return name


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` into a copy of ``base``; an entry with its own provenance (a
    ``{value, kind, source}`` number, or a sourced table such as ``collective_regimes_intra``)
    is replaced whole."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if (isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
                and "value" not in value and "kind" not in value):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# Compute profiles named by a base profile in its own folder and checked there
# (_anchor_compute_profile); a file that extends that base may use them.
_ANCHORED_DATA_FILES: set[str] = set()


def _anchor_compute_profile(raw: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``raw`` with a relative ``compute_profile`` file named from ``folder``, the folder of
    the file that gave it: a profile that extends another keeps its base's measured rows
    wherever the two files live."""
    cp = raw.get("compute_profile")
    file = cp.get("file") if isinstance(cp, Mapping) else cp
    if isinstance(file, str) and file.strip() and not Path(file).is_absolute() and (folder / file).is_file():
        from .safe_yaml import check_data_file

        # Checked here against the base's own folder, so the extending file may name it.
        anchored = str(check_data_file(folder / file, (folder,), f"{folder / file}: compute_profile"))
        _ANCHORED_DATA_FILES.add(anchored)
        raw["compute_profile"] = {**cp, "file": anchored} if isinstance(cp, Mapping) else anchored
    return raw


def _raw_cluster(path: Path, chain: tuple[str, ...] = ()) -> dict[str, Any]:
    raw = _load_yaml(path)
    base_name = raw.get("extends")
    if base_name is None:
        return raw
    where = str(path)
    if not isinstance(base_name, str):
        raise SimdlError(f"{where}: extends = {base_name!r}; accepted: a cluster preset name or a profile beside it")
    if base_name in chain:
        raise SimdlError(f"{where}: extends = {base_name!r} makes a cycle ({' -> '.join(chain + (base_name,))})")
    beside = path.parent / f"{base_name}.yaml"  # a profile kept outside the package extends its neighbour
    try:
        base_path = beside if beside.is_file() else _resolve(base_name, CLUSTER_DIR, "cluster preset", cluster_names())
    except SimdlError as exc:
        raise SimdlError(f"{where}: extends: {exc}") from None
    base = _anchor_compute_profile(_raw_cluster(base_path, chain + (base_name,)), base_path.parent)
    base.pop("name", None)
    base.pop("description", None)
    merged = _merge(base, {k: v for k, v in raw.items() if k != "extends"})
    return merged


def _parse_cluster(raw: Mapping[str, Any], path: Path) -> ClusterSpec:
    where = str(path)
    _check_keys(raw, _CLUSTER_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SimdlError(f"{where}: name must be a non-empty string, got {name!r}")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise SimdlError(f"{where}: description must be a string")

    gpu_ref = raw.get("gpu")
    if not isinstance(gpu_ref, str) or not gpu_ref.strip():
        raise SimdlError(f"{where}: gpu = {gpu_ref!r}; accepted: one of {', '.join(gpu_names())} or a .yaml path")
    if gpu_ref.endswith((".yaml", ".yml")):
        gpu_path = Path(gpu_ref) if Path(gpu_ref).is_absolute() else path.parent / gpu_ref
        gpu = load_gpu(gpu_path)
    else:
        try:
            gpu = load_gpu(gpu_ref)
        except SimdlError as exc:
            raise SimdlError(f"{where}: gpu: {exc}") from None

    gpus_per_node = _count(raw, "gpus_per_node", where)
    nodes = _count(raw, "nodes", where, default=1)
    if "max_nodes" not in raw:
        raise SimdlError(f"{where}: missing key 'max_nodes' (an integer >= 1, or null for unlimited)")
    max_nodes = _count(raw, "max_nodes", where, allow_null=True)
    if max_nodes is not None and nodes > max_nodes:
        raise SimdlError(f"{where}: nodes = {nodes} exceeds max_nodes = {max_nodes}")
    shared = raw.get("shared_device", False)
    if not isinstance(shared, bool):
        raise SimdlError(f"{where}: shared_device = {shared!r}; accepted: true or false")

    backend = _parse_backend(raw, where, gpu)
    intra = _parse_intra(_section(raw, "intra_node", where), f"{where}: intra_node", gpus_per_node)
    inter_raw = _section(raw, "inter_node", where, required=False)
    inter = _parse_inter(inter_raw, f"{where}: inter_node") if inter_raw is not None else None
    if inter is None and (max_nodes is None or max_nodes > 1):
        raise SimdlError(f"{where}: max_nodes = {max_nodes} needs an inter_node section (NICs); "
                         "accepted: max_nodes: 1 for a single-node preset")
    if inter is None and nodes > 1:
        raise SimdlError(f"{where}: nodes = {nodes} needs an inter_node section")
    ps_raw = _section(raw, "ps_servers", where, required=False)
    ps = _parse_ps(ps_raw, f"{where}: ps_servers") if ps_raw is not None else None
    efficiency = _parse_efficiency(_section(raw, "efficiency", where), f"{where}: efficiency",
                                   multi_node=inter is not None)
    memory = _parse_memory(_section(raw, "memory", where), f"{where}: memory")
    host = _parse_host(_section(raw, "host", where), f"{where}: host")
    notes = raw.get("notes", "") or ""
    compute_profile, compute_source = _parse_compute_profile(raw.get("compute_profile"), path, where)
    calibration = raw.get("calibration") or {}
    if not isinstance(calibration, Mapping):
        raise SimdlError(f"{where}: calibration must be a mapping (provenance written by simdl calibrate)")
    return ClusterSpec(
        name=name, description=description.strip(), gpu=gpu, gpus_per_node=gpus_per_node,
        nodes=nodes, max_nodes=max_nodes, intra_node=intra, inter_node=inter, ps_servers=ps,
        efficiency=efficiency, memory=memory, host=host, shared_device=shared, collective_backend=backend,
        notes=str(notes).strip(), source_path=where, gpu_ref=gpu_ref, calibration=dict(calibration),
        compute_profile=compute_profile, compute_profile_source=compute_source,
    )


def _parse_compute_profile(value: Any, path: Path, where: str) -> tuple[str, str]:
    """``compute_profile: FILE`` or ``{file: FILE, kind, source}``: a JSON file of measured
    row times (simdl.analytic.measured), relative to the YAML's folder or absolute. Read
    lazily, when a prediction needs it."""
    if value is None:
        return "", ""
    source = ""
    if isinstance(value, Mapping):
        source = str(value.get("source", ""))
        value = value.get("file")
    if not isinstance(value, str) or not value.strip():
        raise SimdlError(f"{where}: compute_profile = {value!r}; accepted: the path of a JSON compute profile")
    p = Path(value)
    if not p.is_absolute():
        p = path.parent / p
    if not p.exists() and (CLUSTER_DIR / Path(value).name).exists():
        p = CLUSTER_DIR / Path(value).name
    if not p.exists():
        raise SimdlError(f"{where}: compute_profile file {value!r} not found (looked in {path.parent})")
    from .safe_yaml import check_data_file

    if str(p.resolve()) in _ANCHORED_DATA_FILES:
        return str(p.resolve()), source
    return str(check_data_file(p, (path.parent, CLUSTER_DIR), f"{where}: compute_profile")), source


@lru_cache(maxsize=1)
def cluster_names() -> tuple[str, ...]:
    """Names of the shipped cluster presets (package data does not change while running)."""
    return tuple(sorted(p.stem for p in CLUSTER_DIR.glob("*.yaml")))


@lru_cache(maxsize=None)
def _load_preset(name: str) -> ClusterSpec:
    path = CLUSTER_DIR / f"{name}.yaml"
    return _parse_cluster(_raw_cluster(path, (name,)), path)


def load_cluster(name_or_path: str | os.PathLike) -> ClusterSpec:
    """Load a cluster preset by name (memoised) or a preset-format YAML file by path."""
    if isinstance(name_or_path, str) and name_or_path in cluster_names():
        return _load_preset(name_or_path)  # the hot path of sweeps: no filesystem access
    path = _resolve(name_or_path, CLUSTER_DIR, "cluster preset", cluster_names())
    if path.parent.resolve() == CLUSTER_DIR:
        return _load_preset(path.stem)
    return _parse_cluster(_raw_cluster(path), path)


def raw_preset(name_or_path: str | os.PathLike) -> dict[str, Any]:
    """The merged raw YAML of a preset (``extends`` resolved), before conversion; for tests and tools."""
    path = _resolve(name_or_path, CLUSTER_DIR, "cluster preset", cluster_names())
    return _raw_cluster(path)
