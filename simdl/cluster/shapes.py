"""The shape of every shipped preset -- its GPU, whether it has an inter-node network, its
node limit, whether it has parameter servers -- read without parsing the preset.

Error messages that suggest other presets ("use a multi-node preset such as ...") need
these four facts of every preset, and parsing every preset (several are long calibrated
profiles) took over a second. A preset's top-level keys are plain ``key: value`` lines
(block YAML), so the facts are read from those lines and the few scalars parsed alone;
``extends`` is followed as :func:`simdl.cluster.spec.load_cluster` follows it. A file
whose top level is not plain block YAML is loaded in full instead. The shapes of all
shipped presets are checked against their full loads by tests/cluster/test_shapes.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(.*)$")
# Top-level syntax the line scan does not read: documents, anchors, aliases, merge keys,
# flow mappings, complex keys.
_UNREAD = re.compile(r"^(---|\.\.\.|[{\[&*?!|>%@`]|<<)")


@dataclass(frozen=True)
class PresetShape:
    name: str
    gpu_name: str  # the GPU file's ``name``, as ClusterSpec.gpu.name
    inter_node: bool
    max_nodes: int | None  # None = unlimited
    ps_servers: bool


def _scalar(text: str):
    import yaml

    return yaml.safe_load(text) if text.strip() else None


def _top_level(path: Path) -> dict[str, str] | None:
    """Top-level key -> its value text ('' for a block); None if the scan cannot read it."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip() or line[0] in " \t#":
                continue
            if _UNREAD.match(line):
                return None
            m = _TOP_KEY.match(line.rstrip("\n"))
            if m is None:
                return None
            value = m.group(2)
            if value.strip().startswith(("&", "*", "!", "|", ">", "{", "[")):
                return None
            out[m.group(1)] = value
    return out


def _facts(name: str, chain: tuple[str, ...] = ()) -> dict | None:
    """gpu reference, inter_node, max_nodes, ps_servers of preset ``name`` (None: unread)."""
    from .spec import CLUSTER_DIR

    top = _top_level(CLUSTER_DIR / f"{name}.yaml")
    if top is None:
        return None
    facts: dict = {}
    if "extends" in top:
        base = _scalar(top["extends"])
        if not isinstance(base, str) or base in chain:
            return None
        inherited = _facts(base, chain + (name,))
        if inherited is None:
            return None
        facts = inherited
    for key in ("inter_node", "ps_servers"):
        if key in top:
            # An empty value opens a block (the section); 'null' removes it.
            facts[key] = top[key].strip() == "" or _scalar(top[key]) is not None
    if "max_nodes" in top:
        facts["max_nodes"] = _scalar(top["max_nodes"])
    if "gpu" in top:
        facts["gpu"] = _scalar(top["gpu"])
    return facts


def _shape(name: str) -> PresetShape | None:
    from ..errors import SimdlError
    from .spec import load_cluster, load_gpu

    facts = _facts(name)
    try:
        if facts is None or not isinstance(facts.get("gpu"), str) or facts["gpu"].endswith((".yaml", ".yml")):
            s = load_cluster(name)
            return PresetShape(name, s.gpu.name, s.inter_node is not None, s.max_nodes, s.ps_servers is not None)
        max_nodes = facts.get("max_nodes")
        return PresetShape(
            name,
            load_gpu(facts["gpu"]).name,
            bool(facts.get("inter_node")),
            max_nodes if isinstance(max_nodes, int) else None,
            bool(facts.get("ps_servers")),
        )
    except SimdlError:
        return None  # a preset that does not load is suggested nowhere


@lru_cache(maxsize=1)
def preset_shapes() -> tuple[PresetShape, ...]:
    """The shapes of the shipped presets that load, by name."""
    from .spec import cluster_names

    return tuple(s for s in (_shape(n) for n in cluster_names()) if s is not None)
