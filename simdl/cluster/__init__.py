"""GPUs, cluster presets, rank placement and the topology graph.

* :mod:`.spec` -- frozen descriptions loaded from ``data/gpus/*.yaml`` and
  ``data/clusters/*.yaml`` (SI units, every number with its source);
* :mod:`.allocate` -- :func:`allocate` places ranks on a preset's nodes; the resulting
  :class:`Cluster` answers the analytic engine's bandwidth/latency questions cheaply;
* :mod:`.topology` -- the same cluster as a networkx graph for routing flows (imported
  lazily: ``from simdl.cluster.topology import build_topology``), so that the analytic
  path never imports networkx.
"""

from .allocate import GROUPS, Cluster, allocate
from .spec import (
    GPU,
    LINK_TYPES,
    PRECISIONS,
    ClusterSpec,
    Efficiency,
    Host,
    Link,
    MemoryOverheads,
    Mesh,
    Network,
    PSServers,
    cluster_names,
    gpu_names,
    load_cluster,
    load_gpu,
)

__all__ = [
    "GPU",
    "GROUPS",
    "LINK_TYPES",
    "PRECISIONS",
    "Cluster",
    "ClusterSpec",
    "Efficiency",
    "Host",
    "Link",
    "MemoryOverheads",
    "Mesh",
    "Network",
    "PSServers",
    "allocate",
    "build_topology",
    "cluster_names",
    "gpu_names",
    "load_cluster",
    "load_gpu",
    "path_bottleneck",
    "route",
]


def __getattr__(name: str):
    # Topology names are re-exported lazily so that importing simdl.cluster stays networkx-free.
    if name in ("build_topology", "route", "path_bottleneck"):
        from . import topology

        return getattr(topology, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
