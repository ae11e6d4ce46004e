"""Typed options of each strategy family, validated when built.

One frozen dataclass per family; a field's type says what it accepts (``Literal`` choices,
``int``, ``bool``, ``float``), its docstring (the string literal under it) says what it
means and where its default comes from. :func:`check_fields` validates every field from
those declarations, so a family adds a field in one place. Defaults follow PyTorch's own,
each cited where it is set.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Optional

from ..errors import SimdlError, unknown
from ..units import MiB

Sharding = Literal["full", "grad_op", "hybrid", "none"]
BackwardPrefetch = Literal["pre", "post", "none"]
PSPlacement = Literal["dedicated", "colocated"]

# torch/csrc/distributed/c10d/reducer.hpp: kDefaultBucketBytesCap = 25 * 1024 * 1024,
# kDefaultFirstBucketBytes = 1024 * 1024 (also torch/nn/parallel/distributed.py, _DEFAULT_BUCKET_CAP_MB = 25).
DDP_BUCKET_CAP_BYTES = 25 * MiB
DDP_FIRST_BUCKET_BYTES = 1 * MiB

# What each field is called in errors: the CLI option that sets it.
_FLAG = {
    "bucket_cap_bytes": "--bucket-cap-mb",
    "sharding": "--sharding",
    "wrap": "--wrap",
    "reshard_root": "--reshard-root",
    "shard_group": "--shard-group",
    "cpu_offload": "--cpu-offload",
    "ps_servers": "--ps-servers",
    "staleness_bound": "--staleness-bound",
    "ps_placement": "--ps-placement",
}


def flag(field_name: str) -> str:
    """The CLI option of a field (``shard_group`` -> ``--shard-group``)."""
    return _FLAG.get(field_name, field_name)


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def value_type(options: type, name: str) -> type:
    """What a field's value is written as: ``int``, ``float``, ``bool`` or ``str`` (``Literal``
    choices of strings, and ``Optional[X]`` as ``X``); ``str`` for a name that is no field."""
    kind = _hints(options).get(name, str)
    args = typing.get_args(kind)
    if typing.get_origin(kind) is typing.Union and type(None) in args:
        kind = next(a for a in args if a is not type(None))
    return kind if kind in (int, float, bool) else str


def check_fields(options: object) -> None:
    """Validate every field of an options dataclass against its declared type: Literal
    choices, integers (bool refused), numbers, booleans, Optional of those. Options that
    passed once are not checked again (a sweep builds the same options many times)."""
    # Keyed on each value's type too: True == 1, but a bool is no integer here.
    key = (type(options), tuple((type(v), v) for v in (getattr(options, f.name) for f in dataclasses.fields(options))))  # type: ignore[arg-type]
    try:
        if key in _CHECKED:
            return
    except TypeError:  # an unhashable value: checked below, not remembered
        _check(options)
        return
    _check(options)
    if len(_CHECKED) < 4096:
        _CHECKED.add(key)


_CHECKED: set = set()


def _check(options: object) -> None:
    for f in dataclasses.fields(options):  # type: ignore[arg-type]
        value, kind = getattr(options, f.name), _hints(type(options))[f.name]  # type: ignore[arg-type]
        args = typing.get_args(kind)
        if typing.get_origin(kind) is typing.Union and type(None) in args:
            if value is None:
                continue
            kind = next(a for a in args if a is not type(None))
        name = flag(f.name)
        if typing.get_origin(kind) is Literal:
            if value not in typing.get_args(kind):
                raise unknown(name.lstrip("-").replace("-", " "), value, typing.get_args(kind))
        elif kind is bool:
            if not isinstance(value, bool):
                raise SimdlError(f"{name} {value!r} must be true or false")
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise SimdlError(f"{name} {value!r} must be an integer")
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SimdlError(f"{name} {value!r} must be a number")


def choices(cls: type, field_name: str) -> tuple:
    """The Literal choices a field accepts."""
    return typing.get_args(_hints(cls)[field_name])


@dataclass(frozen=True)
class DDPOptions:
    """DistributedDataParallel (torch/nn/parallel/distributed.py)."""

    bucket_cap_bytes: float = DDP_BUCKET_CAP_BYTES
    """Gradient bucket cap (DDP(bucket_cap_mb=25) by default, reducer.hpp kDefaultBucketBytesCap)."""
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES
    """The first bucket's cap (reducer.hpp kDefaultFirstBucketBytes, 1 MiB)."""
    broadcast_buffers: bool = True
    """DDP(broadcast_buffers=True), PyTorch's default: buffers (BatchNorm running stats) are
    broadcast from rank 0 before every forward."""
    gradient_as_bucket_view: bool = False
    """DDP(gradient_as_bucket_view=False), PyTorch's default: gradients and buckets are separate copies."""

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.bucket_cap_bytes > 0:
            raise SimdlError(f"bucket cap {self.bucket_cap_bytes!r} bytes must be > 0")
        if not self.first_bucket_bytes > 0:
            raise SimdlError(f"first bucket {self.first_bucket_bytes!r} bytes must be > 0")


@dataclass(frozen=True)
class FSDPOptions:
    """FullyShardedDataParallel: FSDP2's fully_shard, or FSDP1's wrapper where they differ."""

    sharding: Sharding = "full"
    """What is sharded: FULL_SHARD (full), SHARD_GRAD_OP (grad_op), HYBRID_SHARD (hybrid) or
    NO_SHARD (none); FSDP's default is FULL_SHARD."""
    wrap: str = "block"
    """Units: ``block`` (the model's block classes), ``size:N`` (at least N parameters per unit) or ``none``."""
    forward_prefetch: bool = True
    """Gather the next unit while the current one computes in forward."""
    backward_prefetch: BackwardPrefetch = "pre"
    """BackwardPrefetch.BACKWARD_PRE (pre), BACKWARD_POST (post) or none."""
    max_inflight_all_gathers: int = 2
    """FSDP1 limit_all_gathers=True allows 2 in-flight all-gathers (torch/distributed/fsdp/
    _runtime_utils.py, _limit_all_gathers); FSDP2 prefetches one unit ahead by default."""
    reshard_root: bool = False
    """Whether the root unit is resharded after forward too (full / hybrid sharding). FSDP2 keeps
    the root gathered only when fully_shard's reshard_after_forward is left at its default None
    (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, _lazy_init); an explicit True reshards
    the root as well, and its backward starts by gathering it again. FSDP1 keeps the root."""
    shard_group: Optional[int] = None
    """Hybrid sharding: ranks per shard group, the inner dimension of FSDP2's 2-D device mesh.
    None = the GPUs of one node, FSDP1 HYBRID_SHARD's fixed choice."""
    cpu_offload: bool = False
    """FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer state in host memory."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max_inflight_all_gathers < 1:
            raise SimdlError(f"in-flight all-gathers {self.max_inflight_all_gathers!r} must be >= 1")
        parse_wrap(self.wrap)
        if self.shard_group is not None:
            if self.shard_group < 1:
                raise SimdlError(f"shard group {self.shard_group!r} must be an integer >= 1 (ranks per shard group)")
            if self.sharding != "hybrid":
                raise SimdlError(
                    f"a shard group ({self.shard_group}) is set for FSDP hybrid sharding only; "
                    f"got sharding {self.sharding!r}"
                )


@dataclass(frozen=True)
class PSOptions:
    """Parameter server (Li et al., OSDI 2014), as validate/train.py runs it over torch.distributed.rpc."""

    ps_servers: int = 1
    """Server shards the parameters are split over, one server process each."""
    staleness_bound: int = 3
    """ps-ssp: a worker more than this many iterations ahead of the slowest waits (Ho et al., NIPS 2013)."""
    ps_placement: Optional[PSPlacement] = None
    """Where the servers run (simdl.cluster.ps_placement): ``dedicated`` server nodes of the
    cluster file's ``ps_servers`` section, or ``colocated`` as a process on a worker node.
    None until predict places them: dedicated where the cluster has server nodes."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.ps_servers < 1:
            raise SimdlError(f"parameter servers {self.ps_servers!r} must be an integer >= 1")
        if self.staleness_bound < 0:
            raise SimdlError(f"staleness bound {self.staleness_bound!r} must be an integer >= 0")


def parse_wrap(wrap: str) -> tuple[str, int]:
    """``'block'`` -> ('block', 0); ``'size:1000000'`` -> ('size', 1000000); ``'none'``."""
    if wrap in ("block", "none"):
        return wrap, 0
    if isinstance(wrap, str) and wrap.startswith("size:"):
        try:
            n = int(float(wrap[5:]))
        except ValueError:
            n = -1
        if n >= 1:
            return "size", n
    raise SimdlError(f"FSDP wrap policy {wrap!r} is not understood; accepted: block, none, size:N (N >= 1 parameters)")
