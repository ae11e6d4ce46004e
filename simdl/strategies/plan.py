"""A strategy plan: the tasks one training iteration runs on each rank, and their order.

A strategy (DDP, FSDP, parameter server) turns a workload and a cluster allocation
into a plan. Both engines take the same plan: the analytic engine evaluates it in
closed form (a max-plus recurrence over streams, no contention), the simulator plays
it on a SimPy timeline over the topology graph (contention, jitter, stragglers).

Tasks run on named streams, as CUDA streams do in PyTorch: the tasks of one stream
run in list order, and a task also waits for the tasks it depends on (CUDA events).
SPMD strategies (DDP, FSDP) give one task list that every rank runs; the parameter
server gives a worker task list plus server-side work in :class:`PSPlan`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping, Protocol

COMPUTE = "compute"  # the default CUDA stream: forward, backward, optimizer kernels
COMM = "comm"  # NCCL's stream (DDP all-reduce, FSDP all-gather)
COMM_REDUCE = (
    "comm_reduce"  # FSDP2 runs reduce-scatter on its own stream (torch/distributed/fsdp/_fully_shard/_fsdp_state.py)
)


@dataclass(frozen=True)
class Group:
    """A process group: ``size`` ranks whose ring crosses links of ``scope``.

    scope: ``intra`` (inside one node), ``inter`` (one rank per node, across the network)
    or ``world`` (all ranks; crosses the network when there are several nodes).
    """

    name: str
    size: int
    scope: str


@dataclass(frozen=True)
class Task:
    """One unit of work on one stream.

    A compute task covers table rows ``rows = (start, stop)`` in ``direction`` ``fwd``
    (execution order) or ``bwd`` (the same rows, run in reverse), plus any extra work
    given directly (``flops``, ``bytes``, ``kernels``; the optimizer step, bucket copies).
    A communication task is one collective of ``comm_bytes`` over ``group`` (bytes as
    nccl-tests counts them: the whole buffer for all_reduce/broadcast, the gathered
    output for all_gather, the input for reduce_scatter).
    """

    name: str
    stream: str
    phase: str  # data | fwd | bwd | comm | opt
    deps: tuple[int, ...] = ()
    rows: tuple[int, int] | None = None
    direction: str = ""
    flops: float = 0.0
    bytes: float = 0.0
    kernels: int = 0
    collective: str = ""
    comm_bytes: float = 0.0
    group: str = ""
    # Sizes (bytes) of the buffers the task allocates, one per tensor; the cluster's host
    # backend (simdl.hosts) says which of them fault in (the cost library prices those).
    allocs: tuple[float, ...] = ()
    # Bytes of buffers the task allocates that fault in again every step, as the host backend's
    # refault_limit gives them (zero on CUDA).
    refaults: float = 0.0
    # Fixed host seconds of framework bookkeeping the task stands for (FSDP2's per-unit hooks
    # on a CPU rank: strategies.fsdp.unit_overhead_us); added to its compute time.
    host_s: float = 0.0

    @property
    def is_comm(self) -> bool:
        return bool(self.collective)


@dataclass(frozen=True)
class PlanFacts:
    """What a plan states about itself for the memory model, the cost model and the report.

    Every plan has these (a full replica's values by default); a family subclasses it with
    facts of its own (DDP's buckets, FSDP's units), each typed and documented there.
    """

    comm_buffer_bytes: float = 0.0  # communication buffers a rank holds through backward
    cpu_offload: bool = False  # parameters, gradients and optimizer state live in host memory
    gradient_as_bucket_view: bool = False  # gradients are views into the communication buckets
    # Collectives block the compute stream (a CPU device has no side streams: simdl.strategies.fsdp).
    blocking_collectives: bool = False

    def as_dict(self) -> Mapping[str, Any]:
        """The facts by name, read-only (built once per plan: the memory model reads it per prediction)."""
        return self._as_dict

    @cached_property
    def _as_dict(self) -> Mapping[str, Any]:
        return MappingProxyType({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


class Plan(Protocol):
    """What every plan gives the engines, the memory model and the report."""

    strategy: str  # the label
    family: str  # the registry family that built it
    facts: PlanFacts
    notes: tuple[str, ...]

    @property
    def world_size(self) -> int: ...

    @property
    def data_parallel(self) -> int: ...


@dataclass(frozen=True)
class SpmdPlan:
    """Tasks every rank runs in one iteration (one optimizer step)."""

    strategy: str  # the label (fsdp-full, ddp, ...)
    tasks: tuple[Task, ...]
    groups: dict[str, Group]
    world_size: int
    # Data-parallel degree: how many ranks each consume a different batch.
    data_parallel: int
    notes: tuple[str, ...] = ()
    facts: PlanFacts = field(default_factory=PlanFacts)
    family: str = ""  # the registry family that built it (simdl.strategies.registry)

    @property
    def details(self) -> Mapping[str, Any]:
        """The facts as a plain dict (read-only view, for callers that index by name)."""
        return self.facts.as_dict()


@dataclass(frozen=True)
class PSPlan:
    """A parameter-server iteration: workers compute and exchange with server shards."""

    strategy: str  # ps-sync | ps-async | ps-ssp
    worker_tasks: tuple[Task, ...]  # forward and backward on the worker's GPU
    workers: int
    servers: int
    push_bytes: float  # gradient bytes a worker sends per iteration (all shards together)
    pull_bytes: float  # parameter bytes a worker receives per iteration
    update_bytes: float  # bytes the servers stream through memory to apply one update
    # A barrier per iteration: the servers aggregate every worker's push into one update
    # before any worker pulls. False: each push is applied on arrival.
    synchronous: bool = True
    # Stale-synchronous bound: a worker this many iterations ahead of the slowest waits;
    # None: no bound (synchronous, or fully asynchronous).
    staleness_bound: int | None = None
    notes: tuple[str, ...] = ()
    facts: PlanFacts = field(default_factory=PlanFacts)
    family: str = "ps"

    @property
    def details(self) -> Mapping[str, Any]:
        """The facts as a plain dict (read-only view, for callers that index by name)."""
        return self.facts.as_dict()

    @property
    def data_parallel(self) -> int:
        return self.workers

    @property
    def world_size(self) -> int:
        return self.workers
