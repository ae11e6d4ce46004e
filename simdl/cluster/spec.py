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

Each section is declared once, as a dataclass whose fields carry their key, reader and
description (:mod:`.declare`); parsing, ``to_dict`` and the JSON Schema (:mod:`.schema`,
``simdl schema``) come from that declaration. The sections live in their own modules
(:mod:`.device`, :mod:`.links`, :mod:`.efficiency`, :mod:`.node`, :mod:`.strategy_sections`,
:mod:`.regime_tables`, :mod:`.readers`); their names are re-exported here.

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
from .declare import Choice, Custom, Flag, Int, Opaque, Section, Text, dump, knob, parse
from .device import DEVICE_KINDS, GPU, GPU_DIR, PRECISIONS, PRIOR_KEYS, gpu_names, is_cpu_device_name, load_gpu
from .efficiency import BLOCKING_COLLECTIVES, Efficiency, _parse_efficiency
from .links import LINK_TYPES, Link, Mesh, Network, PSServers
from .node import Host, MemoryOverheads
from .readers import FrozenMap, _load_yaml, _resolve
from .regime_tables import _parse_regimes, _parse_subgroup_regimes, regimes_to_dict
from .strategy_sections import StrategySections, move_strategy_keys

__all__ = [
    "BLOCKING_COLLECTIVES",
    "CLUSTER_DIR",
    "DATA_DIR",
    "DEVICE_KINDS",
    "GPU",
    "GPU_DIR",
    "LINK_TYPES",
    "PRECISIONS",
    "PRIOR_KEYS",
    "ClusterSpec",
    "Efficiency",
    "FrozenMap",
    "Host",
    "Link",
    "MemoryOverheads",
    "Mesh",
    "Network",
    "PSServers",
    "cluster_names",
    "gpu_names",
    "is_cpu_device_name",
    "load_cluster",
    "load_gpu",
    "raw_preset",
    "regimes_to_dict",
    "_parse_efficiency",
    "_parse_regimes",
    "_parse_subgroup_regimes",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
CLUSTER_DIR = DATA_DIR / "clusters"


def _gpu(value: Any, where: str, ctx: Mapping[str, Any]) -> GPU:
    if not isinstance(value, str) or not value.strip():
        raise SimdlError(f"{where} = {value!r}; accepted: one of {', '.join(gpu_names())} or a .yaml path")
    if value.endswith((".yaml", ".yml")):
        return load_gpu(Path(value) if Path(value).is_absolute() else ctx["path"].parent / value)
    try:
        return load_gpu(value)
    except SimdlError as exc:
        raise SimdlError(f"{where}: {exc}") from None


def _backends() -> tuple[str, ...]:
    from ..collectives.backends import BACKENDS

    return tuple(sorted(BACKENDS))


def _compute_profile(value: Any, where: str, ctx: Mapping[str, Any]) -> tuple[str, str]:
    return _parse_compute_profile(value, ctx["path"], where.rsplit(": compute_profile", 1)[0])


def _cuda(value: Any, where: str, ctx: Mapping[str, Any]) -> str:
    from ..memory.device import cuda_major

    return "" if value is None else cuda_major(value, where)


_GPU_SCHEMA = {"type": "string", "pattern": r"\S"}
_COMPUTE_PROFILE_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {"type": "null"},
        {
            "type": "object",
            "required": ["file"],
            "properties": {"file": {"type": "string"}, "kind": {"type": "string"}, "source": {"type": "string"}},
        },
    ]
}


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster preset: a GPU type, the node shape, links, and efficiency factors."""

    name: str = knob("name", Text(nonempty=True), "the preset's name", required=True)
    description: str = knob("description", Text(), "what the preset describes", default="", positional=True)
    gpu: GPU = knob(
        "gpu",
        Custom(_gpu, lambda v, owner: owner.gpu_ref or v.name, _GPU_SCHEMA),
        "a shipped device file's name, or the path of a device YAML (relative to this file)",
        required=True,
    )
    gpus_per_node: int = knob("gpus_per_node", Int(1), "devices (ranks' slots) per node", required=True)
    nodes: int = knob("nodes", Int(1), "default number of nodes", default=1, positional=True)
    max_nodes: int | None = knob("max_nodes", Int(1, allow_null=True), "most nodes; null: unlimited", required=True)
    intra_node: Link = knob(
        "intra_node",
        Section(Link, lambda c: {"gpus_per_node": c["gpus_per_node"]}),
        "the intra-node interconnect",
        required=True,
    )
    inter_node: Network | None = knob(
        "inter_node",
        Section(Network),
        """the network between nodes; required
                                      unless max_nodes is 1""",
        positional=True,
    )
    ps_servers: PSServers | None = knob("ps_servers", Section(PSServers), "CPU parameter-server nodes", positional=True)
    efficiency: Efficiency = knob(
        "efficiency",
        Section(Efficiency, lambda c: {"multi_node": c.get("inter_node") is not None}),
        "fractions of peak and fixed overheads",
        required=True,
    )
    memory: MemoryOverheads = knob(
        "memory", Section(MemoryOverheads), "per-process device memory overheads", required=True
    )
    host: Host = knob("host", Section(Host), "the host CPU of one node", required=True)
    shared_device: bool = knob(
        "shared_device",
        Flag(),
        "true: the ranks of a node share one device (cpu-local)",
        default=False,
        dump_default=False,
    )
    # c10d backend of the collectives (simdl.collectives.backends): configuration, not a
    # measured number; absent in the file, PyTorch's default for the device.
    collective_backend: str = knob(
        "collective_backend",
        Choice(_backends),
        """c10d backend of the collectives;
                                   absent: PyTorch's default for the device kind""",
        default="nccl",
    )
    # The CUDA major version of the ranks' PyTorch build (torch.version.cuda): configuration,
    # not a measured number; absent, the GPU file's default_cuda (simdl.memory.device).
    cuda: str = knob(
        "cuda",
        Custom(_cuda, lambda v, owner: v or None, {"type": ["string", "number", "null"]}),
        """CUDA major version of the ranks' PyTorch build (torch.version.cuda: 12, 12.8, 13.0);
        absent: the GPU file's default_cuda""",
        default="",
        dump_default=False,
    )
    notes: str = knob("notes", Text(), "free text", default="", dump_default=False)
    source_path: str = ""
    gpu_ref: str = ""  # the ``gpu`` value as written in the file
    # Provenance and fit quality written by `simdl calibrate`; not used by the engines, kept
    # out of equality and hashing so that a spec stays hashable.
    calibration: dict = knob(
        "calibration",
        Opaque(),
        """provenance and fit quality written by simdl calibrate
                             (host, devices, versions, date, measurement ranges, residuals)""",
        factory=dict,
        compare=False,
        dump_default=False,
    )
    # Absolute path of the measured per-row compute times of profiled models
    # (simdl.costs.measured), "" for none; with its provenance for to_dict.
    compute_profile: str = knob(
        "compute_profile",
        Custom(
            _compute_profile,
            lambda v, owner: {"file": v, "kind": "calibrated", "source": owner.compute_profile_source},
            _COMPUTE_PROFILE_SCHEMA,
        ),
        """a JSON file of measured row times (FILE or {file, kind, source}), relative to this file's folder;
        read when a prediction needs it""",
        default="",
        dump_default=False,
    )
    compute_profile_source: str = field(default="", compare=False, repr=False)
    strategies: StrategySections = knob(
        "strategies",
        Section(StrategySections, null_default=True),
        "costs of each strategy measured on this cluster",
        default=StrategySections(),
        dump_default=False,
    )

    EXTRA_KEYS = ("extends",)
    EXTRA_KEYS_DOC = {
        "extends": "a preset (or a profile beside this file) whose keys this file changes; mappings merge key by key"
    }

    @staticmethod
    def _finish(values: dict[str, Any], raw: Mapping[str, Any], where: str, ctx: Mapping[str, Any]) -> dict[str, Any]:
        nodes, max_nodes, inter = values.get("nodes", 1), values["max_nodes"], values.get("inter_node")
        if max_nodes is not None and nodes > max_nodes:
            raise SimdlError(f"{where}: nodes = {nodes} exceeds max_nodes = {max_nodes}")
        if inter is None and (max_nodes is None or max_nodes > 1):
            raise SimdlError(
                f"{where}: max_nodes = {max_nodes} needs an inter_node section (NICs); "
                "accepted: max_nodes: 1 for a single-node preset"
            )
        if inter is None and nodes > 1:
            raise SimdlError(f"{where}: nodes = {nodes} needs an inter_node section")
        out = {**values, "source_path": where, "gpu_ref": raw["gpu"]}
        if "collective_backend" not in raw:
            from ..collectives.backends import DEFAULT_FOR_DEVICE

            out["collective_backend"] = DEFAULT_FOR_DEVICE[values["gpu"].kind]
        if "compute_profile" in values:
            out["compute_profile"], out["compute_profile_source"] = values["compute_profile"]
        return out

    @property
    def default_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def multi_node(self) -> bool:
        return self.inter_node is not None and (self.max_nodes is None or self.max_nodes > 1)

    def require_ps_servers(self) -> PSServers:
        """The ``ps_servers`` section, or a one-line error where the preset has none."""
        if self.ps_servers is None:
            raise SimdlError(
                f"cluster {self.name!r} has no parameter-server section (ps_servers); "
                "accepted: a preset that has one (e.g. a10g-ps)"
            )
        return self.ps_servers

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (full, without ``extends``); ``load_cluster`` of it gives this spec back."""
        return dump(self)


def _parse_cluster(raw: Mapping[str, Any], path: Path) -> ClusterSpec:
    return parse(ClusterSpec, raw, str(path), {"path": path})


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``over`` into a copy of ``base``; an entry with its own provenance (a
    ``{value, kind, source}`` number, or a sourced table such as ``collective_regimes_intra``)
    is replaced whole."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if (
            isinstance(value, Mapping)
            and isinstance(out.get(key), Mapping)
            and "value" not in value
            and "kind" not in value
        ):
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
    raw = move_strategy_keys(_load_yaml(path), str(path))
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
