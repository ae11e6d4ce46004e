"""The result of a prediction: the same type from both engines."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

MEMORY_CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "other")


@dataclass(frozen=True)
class Staleness:
    """Update staleness in parameter-server modes (0 for synchronous strategies)."""

    mean: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    # ps-ssp: the fraction of the run's pulls the staleness bound held back (a worker too far
    # ahead of the slowest waits), and the mean wait in seconds per pull (held or not). None where the
    # engine does not model it (the analytic engine; every mode but ps-ssp).
    held_pulls: float | None = None
    held_wait_s: float | None = None


@dataclass(frozen=True)
class Result:
    engine: str
    iteration_time_s: float
    epoch_time_s: float
    total_time_s: float
    throughput_samples_per_s: float
    iterations_per_epoch: int
    peak_memory_bytes: float  # the largest rank, process total as nvidia-smi shows it (CUDA: reserved + context + NCCL)
    peak_tensor_bytes: float  # live tensor bytes at the peak (what PyTorch's MemTracker counts)
    memory_breakdown_bytes: dict[str, float]
    memory_capacity_bytes: float
    fits_in_memory: bool
    gpu_utilization: float  # compute-stream busy fraction, 0-1
    gpu_utilization_any_kernel: float  # any kernel (compute or communication) busy, as nvidia-smi counts
    compute_time_s: float  # compute-stream busy time per iteration
    comm_time_s: float  # communication busy time per iteration
    exposed_comm_time_s: float  # communication not hidden behind compute
    comm_bytes_per_iteration: float  # bytes each GPU sends per iteration
    staleness: Staleness = field(default_factory=Staleness)
    # Where the step's seconds go (simdl.analytic.engine.step_split): compute-stream time by
    # kind (compute, copies, optimizer, host) and the rest (interference, blocking_wait,
    # exposed_comm, input_stall); the values add up to iteration_time_s.
    step_split_s: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Where a measured step should fall, LEVEL of the time (simdl.band): on a calibrated
    # profile, from its held-out step errors and step jitter; None where the profile has none.
    iteration_time_band_s: tuple[float, float] | None = None
    # CUDA devices: torch.cuda.max_memory_allocated / max_memory_reserved over two steps, as the
    # caching allocator model replays them (simdl.memory.cuda); None on the CPU device.
    max_memory_allocated_bytes: float | None = None
    max_memory_reserved_bytes: float | None = None
    # What peak_memory_bytes is made of (CUDA: tensors, allocator_rounding, allocator_cache,
    # cuda_context, nccl_buffers; CPU: tensors, context, workspace, fragmentation).
    device_memory_bytes: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=_jsonable)

    def row(self) -> dict[str, Any]:
        """A flat dict for tables and DataFrames (config values prefixed with ``config.``)."""
        d = {k: v for k, v in self.to_dict().items()
             if k not in ("memory_breakdown_bytes", "staleness", "step_split_s", "config", "notes",
                          "iteration_time_band_s", "device_memory_bytes")}
        lo, hi = self.iteration_time_band_s or (None, None)
        d["iteration_time_band_low_s"], d["iteration_time_band_high_s"] = lo, hi
        for k, v in self.step_split_s.items():
            d[f"step_{k}_s"] = v
        for k, v in self.memory_breakdown_bytes.items():
            d[f"memory_{k}_bytes"] = v
        for k, v in self.device_memory_bytes.items():
            d[f"device_memory_{k}_bytes"] = v
        for k, v in asdict(self.staleness).items():
            d[f"staleness_{k}"] = v
        for k, v in self.config.items():
            if isinstance(v, (str, int, float, bool)) or v is None:
                d[f"config.{k}"] = v
        return d


def _jsonable(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)
