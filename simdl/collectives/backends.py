"""Communication backends (c10d process-group implementations) and what they cost in memory.

A cluster names its backend (``collective_backend:`` in the cluster YAML; absent, PyTorch's
default for the device: ``Backend.default_device_backend_map`` in
torch/distributed/distributed_c10d.py maps ``cpu`` to gloo and ``cuda`` to NCCL). The
backend decides how FSDP2's ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` run,
and with it the scratch memory they take on the calling rank, on top of the input and
output tensors the caller allocates.

``scratch`` maps a collective to the bytes of scratch per byte of its *full* buffer
(all-gather: the gathered output; reduce-scatter: the unsharded input), live while the
call runs. FSDP2 calls both synchronously on the CPU (there are no streams to overlap
on: ``unshard(async_op=False)``, torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py),
so "while the call runs" is a fixed point in the rank's program order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..errors import unknown


@dataclass(frozen=True)
class CollectiveBackend:
    name: str
    scratch: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    # Collectives the backend runs as another one over the same buffer (what goes on the
    # wire): collective -> the one that runs. Sources as ``scratch``'s.
    runs_as: Mapping[str, str] = field(default_factory=dict)

    def scratch_factor(self, collective: str) -> float:
        return float(self.scratch.get(collective, 0.0))

    def wire_collective(self, collective: str) -> str:
        """The collective whose traffic a call of ``collective`` puts on the wire."""
        return self.runs_as.get(collective, collective)


BACKENDS = {
    # NCCL reduces and gathers straight between the caller's tensors (its own channel
    # buffers are allocated once per communicator, outside PyTorch's allocator).
    "nccl": CollectiveBackend("nccl"),
    "gloo": CollectiveBackend(
        "gloo",
        scratch={"reduce_scatter": 1.0, "all_gather": 1.0},
        # ... and so sends an all-reduce's bytes, 2(n-1)/n of the buffer, not (n-1)/n:
        # torch.profiler records FSDP2's reduce-scatter on gloo as gloo:all_reduce of the
        # full buffer (validate/measure.py; 2-rank FSDP2 steps, torch 2.14.1).
        runs_as={"reduce_scatter": "all_reduce"},
        sources={
            # gloo has no reduce-scatter: the input is cloned, the clone all-reduced in
            # place and the rank's chunk copied to the output when the work is waited on.
            "reduce_scatter": "ProcessGroupGloo::reduce_scatter_tensor_coalesced "
            "(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp): "
            "buffers.push_back(inputTensors[i].clone()), then allreduce(buffers); "
            "seen in torch.profiler on 2-rank FSDP2 steps (torch 2.14.1): an "
            "input-sized aten::clone inside c10d::_reduce_scatter_base_, freed "
            "when FSDP's post-backward reduce returns",
            # _allgather_base chunks the output into views and runs the list all-gather,
            # which gathers into one flat temporary and copies it out.
            "all_gather": "ProcessGroupGloo::_allgather_base -> allgather -> AsyncAllgatherWork "
            "(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp): a flat output "
            "temporary of the gathered size; seen in torch.profiler on 2-rank FSDP2 "
            "steps (torch 2.14.1): an output-sized allocation on gloo's worker thread "
            "for the length of gloo:all_gather",
        },
    ),
}

#: PyTorch's default backend per device type (torch/distributed/distributed_c10d.py,
#: ``Backend.default_device_backend_map``).
DEFAULT_FOR_DEVICE = {"cpu": "gloo", "cuda": "nccl"}


def get_backend(name: str) -> CollectiveBackend:
    if name not in BACKENDS:
        raise unknown("collective backend", name, tuple(BACKENDS))
    return BACKENDS[name]
