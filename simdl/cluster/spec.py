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

The sections live in their own modules (:mod:`.device`, :mod:`.links`, :mod:`.efficiency`,
:mod:`.node`, :mod:`.regime_tables`, :mod:`.readers`); their names are re-exported here.

A preset file may start with ``extends: <preset>`` and give only the keys that
differ (mappings merge key by key); the variants of the study-2 cluster use it.
"""


from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import SimdlError
from .device import DEVICE_KINDS, GPU, GPU_DIR, PRECISIONS, PRIOR_KEYS, gpu_names, is_cpu_device_name, load_gpu
from .efficiency import BLOCKING_COLLECTIVES, Efficiency, _parse_efficiency
from .links import LINK_TYPES, Link, Mesh, Network, PSServers, _parse_inter, _parse_intra, _parse_ps
from .node import Host, MemoryOverheads, _parse_host, _parse_memory
from .readers import FrozenMap, _check_keys, _count, _load_yaml, _resolve, _section
from .regime_tables import _parse_regimes, _parse_subgroup_regimes, regimes_to_dict

__all__ = [
    "BLOCKING_COLLECTIVES", "CLUSTER_DIR", "DATA_DIR", "DEVICE_KINDS", "GPU", "GPU_DIR", "LINK_TYPES", "PRECISIONS",
    "PRIOR_KEYS", "ClusterSpec", "Efficiency", "FrozenMap", "Host", "Link", "MemoryOverheads", "Mesh", "Network",
    "PSServers", "cluster_names", "gpu_names", "is_cpu_device_name", "load_cluster", "load_gpu", "raw_preset",
    "regimes_to_dict", "_parse_efficiency", "_parse_regimes", "_parse_subgroup_regimes",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
CLUSTER_DIR = DATA_DIR / "clusters"

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

    def require_ps_servers(self) -> PSServers:
        """The ``ps_servers`` section, or a one-line error where the preset has none."""
        if self.ps_servers is None:
            raise SimdlError(f"cluster {self.name!r} has no parameter-server section (ps_servers); "
                             "accepted: a preset that has one (e.g. a10g-ps)")
        return self.ps_servers

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
