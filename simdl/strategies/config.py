"""Strategy settings: which strategy and its knobs, validated when built.

Defaults follow PyTorch's own defaults, each cited where it is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SimdlError, unknown
from ..units import MiB

STRATEGY_NAMES = ("ddp", "fsdp", "ps-sync", "ps-async", "ps-ssp")
SHARDINGS = ("full", "grad_op", "hybrid", "none")
ALGORITHMS = ("ring", "tree", "auto")
BACKWARD_PREFETCH = ("pre", "post", "none")

# torch/csrc/distributed/c10d/reducer.hpp: kDefaultBucketBytesCap = 25 * 1024 * 1024,
# kDefaultFirstBucketBytes = 1024 * 1024 (also torch/nn/parallel/distributed.py, _DEFAULT_BUCKET_CAP_MB = 25).
DDP_BUCKET_CAP_BYTES = 25 * MiB
DDP_FIRST_BUCKET_BYTES = 1 * MiB


@dataclass(frozen=True)
class StrategyConfig:
    name: str = "ddp"
    # DDP
    bucket_cap_bytes: float = DDP_BUCKET_CAP_BYTES
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES
    # DDP(broadcast_buffers=True) is PyTorch's default: buffers (BatchNorm running
    # stats) are broadcast from rank 0 before every forward (torch/nn/parallel/distributed.py).
    broadcast_buffers: bool = True
    # FSDP
    sharding: str = "full"
    wrap: str = "block"  # "block" (the model's block classes), "size:N" (min params per unit) or "none"
    forward_prefetch: bool = True
    backward_prefetch: str = "pre"
    # FSDP1 limit_all_gathers=True allows 2 in-flight all-gathers (torch/distributed/fsdp/
    # _runtime_utils.py, _limit_all_gathers); FSDP2 prefetches one unit ahead by default.
    max_inflight_all_gathers: int = 2
    # Whether the root unit is resharded after forward too (full / hybrid sharding). FSDP2
    # keeps the root gathered only when fully_shard's reshard_after_forward is left at its
    # default None (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, _lazy_init: the
    # root heuristic runs if _auto_reshard_after_forward); an explicit True reshards the
    # root as well, and its backward starts by gathering it again. FSDP1 keeps the root.
    reshard_root: bool = False
    # Hybrid sharding: ranks per shard group, the inner dimension of FSDP2's 2-D device mesh
    # (fully_shard(mesh=init_device_mesh(..., (replicas, shard_group)))). None = the GPUs of
    # one node, FSDP1 HYBRID_SHARD's fixed choice; FSDP2 takes any shape, including shard
    # groups smaller than a node and several replicas inside one node.
    shard_group: int | None = None
    # FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer state in host memory.
    cpu_offload: bool = False
    # DDP(gradient_as_bucket_view=False) is PyTorch's default: gradients and buckets are
    # separate copies (torch/nn/parallel/distributed.py).
    gradient_as_bucket_view: bool = False
    # Parameter server
    ps_servers: int = 1
    staleness_bound: int = 3
    # Collectives
    algorithm: str = "auto"

    def __post_init__(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise unknown("strategy", self.name, STRATEGY_NAMES)
        if self.sharding not in SHARDINGS:
            raise unknown("sharding", self.sharding, SHARDINGS)
        if self.algorithm not in ALGORITHMS:
            raise unknown("collective algorithm", self.algorithm, ALGORITHMS)
        if self.backward_prefetch not in BACKWARD_PREFETCH:
            raise unknown("backward prefetch", self.backward_prefetch, BACKWARD_PREFETCH)
        if not self.bucket_cap_bytes > 0:
            raise SimdlError(f"bucket cap {self.bucket_cap_bytes!r} bytes must be > 0")
        if not self.first_bucket_bytes > 0:
            raise SimdlError(f"first bucket {self.first_bucket_bytes!r} bytes must be > 0")
        if not isinstance(self.ps_servers, int) or self.ps_servers < 1:
            raise SimdlError(f"parameter servers {self.ps_servers!r} must be an integer >= 1")
        if not isinstance(self.staleness_bound, int) or self.staleness_bound < 0:
            raise SimdlError(f"staleness bound {self.staleness_bound!r} must be an integer >= 0")
        if not isinstance(self.max_inflight_all_gathers, int) or self.max_inflight_all_gathers < 1:
            raise SimdlError(f"in-flight all-gathers {self.max_inflight_all_gathers!r} must be >= 1")
        parse_wrap(self.wrap)
        if self.shard_group is not None:
            if isinstance(self.shard_group, bool) or not isinstance(self.shard_group, int) or self.shard_group < 1:
                raise SimdlError(f"shard group {self.shard_group!r} must be an integer >= 1 (ranks per shard group)")
            if self.name != "fsdp" or self.sharding != "hybrid":
                raise SimdlError(f"a shard group ({self.shard_group}) is set for FSDP hybrid sharding only; "
                                 f"got strategy {self.name!r}" + (f", sharding {self.sharding!r}" if self.name == "fsdp" else ""))
        if self.cpu_offload and self.name != "fsdp":
            raise SimdlError(f"CPU offload is an FSDP option; strategy {self.name!r} does not take it")

    @property
    def is_ps(self) -> bool:
        return self.name.startswith("ps-")

    @property
    def label(self) -> str:
        if self.name == "fsdp":
            return f"fsdp-{self.sharding}"
        if self.name == "ps-ssp":
            return f"ps-ssp(s={self.staleness_bound})"
        return self.name


def parse_wrap(wrap: str) -> tuple[str, int]:
    """``'block'`` -> ('block', 0); ``'size:1000000'`` -> ('size', 1000000); ``'none'``."""
    if wrap in ("block", "none"):
        return wrap, 0
    if wrap.startswith("size:"):
        try:
            n = int(float(wrap[5:]))
        except ValueError:
            n = -1
        if n >= 1:
            return "size", n
    raise SimdlError(f"FSDP wrap policy {wrap!r} is not understood; accepted: block, none, size:N (N >= 1 parameters)")
