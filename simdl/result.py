"""The result of a prediction: the same type from both engines."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

MEMORY_CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "other")


@dataclass(frozen=True)
class Staleness:
    """Update staleness in parameter-server modes (0 for synchronous strategies).

    The staleness of an update is how many server versions were applied between the
    worker's pull of the parameters and the server's apply of its gradient.
    """

    mean: float = 0.0
    """Mean staleness over the run's updates, in server versions."""
    p50: float | None = 0.0
    """Median staleness, in server versions (the simulator's distribution); None where the engine
    models the mean only (the analytic engine's asynchronous modes)."""
    p99: float | None = 0.0
    """99th-percentile staleness, in server versions; None where the engine models the mean only."""
    max: float | None = 0.0
    """Largest staleness of any update, in server versions; None where the engine models the mean only."""
    held_pulls: float | None = None
    """ps-ssp: the fraction of the run's pulls the staleness bound held back (a worker too far
    ahead of the slowest waits); None where the engine does not model it (the analytic engine;
    every mode but ps-ssp)."""
    held_wait_s: float | None = None
    """ps-ssp: the mean wait in seconds per pull (held or not); None where not modelled."""


@dataclass(frozen=True)
class Result:
    """One predicted training configuration; both engines return this type.

    Times are seconds, memory bytes, rates per second, fractions 0-1. ``config`` echoes
    every input the prediction used; ``config["assumed"]`` names those the caller did not give.
    """

    engine: str
    """Which engine answered: ``"analytic"`` (closed form) or ``"sim"`` (SimPy simulator)."""
    iteration_time_s: float
    """Seconds per iteration (one optimizer step, all gradient-accumulation micro-steps), the slowest rank's."""
    epoch_time_s: float
    """Seconds per epoch: ``iterations_per_epoch`` x ``iteration_time_s``."""
    total_time_s: float
    """Seconds for the whole run: ``epoch_time_s`` x epochs."""
    throughput_samples_per_s: float
    """Training samples per second over all data-parallel ranks."""
    iterations_per_epoch: int
    """Iterations one epoch takes: the training samples over the global batch, rounded up."""
    peak_memory_bytes: float  # the largest rank, process total as nvidia-smi shows it
    """Peak device memory of the largest rank, the process total as nvidia-smi shows it. CUDA
    devices: max reserved (the caching-allocator replay) + CUDA context + NCCL buffers; CPU
    devices: tensors plus the framework's and allocator's overheads (the ``other`` category)."""
    peak_tensor_bytes: float  # live tensor bytes at the peak (what PyTorch's MemTracker counts)
    """Peak bytes of live tensors on the largest rank, what PyTorch's MemTracker counts."""
    memory_breakdown_bytes: dict[str, float]
    """``peak_memory_bytes`` by category (``MEMORY_CATEGORIES``: params, grads, optimizer,
    activations, comm_buffers, other), at the peak; the values add up to it."""
    memory_capacity_bytes: float
    """Device memory one rank may use (the GPU's capacity as the cluster file gives it)."""
    fits_in_memory: bool
    """Whether the rank fits: on CUDA devices the allocator replay never runs out and
    ``peak_memory_bytes`` stays within ``memory_capacity_bytes`` less the fit margin
    (simdl.memory.cuda.FIT_MARGIN); elsewhere ``peak_memory_bytes`` <= ``memory_capacity_bytes``."""
    gpu_utilization: float  # compute-stream busy fraction, 0-1
    """Fraction of the iteration the compute stream is busy, 0-1."""
    gpu_utilization_any_kernel: float  # any kernel (compute or communication) busy, as nvidia-smi counts
    """Fraction of the iteration any kernel (compute or communication) runs, 0-1: what nvidia-smi's
    utilization counts."""
    compute_time_s: float  # compute-stream busy time per iteration
    """Seconds per iteration the compute stream is busy (forward, backward, optimizer, copies)."""
    comm_time_s: float  # communication busy time per iteration
    """Seconds per iteration communication is in flight (hidden or not)."""
    exposed_comm_time_s: float  # communication not hidden behind compute
    """Seconds per iteration of communication not hidden behind compute."""
    comm_bytes_per_iteration: float  # bytes each GPU sends per iteration
    """Bytes each GPU sends per iteration, over every collective or push/pull."""
    staleness: Staleness = field(default_factory=Staleness)
    """Update staleness (parameter-server modes; zeros for synchronous strategies)."""
    step_split_s: dict[str, float] = field(default_factory=dict)
    """Where the step's seconds go (simdl.analytic.engine.step_split): compute-stream time by kind
    (compute, copies, optimizer, host) and the rest (interference, blocking_wait, exposed_comm,
    input_stall); the values add up to ``iteration_time_s``."""
    config: dict[str, Any] = field(default_factory=dict)
    """Every input the prediction used, defaults resolved; ``config["assumed"]`` maps each value
    the caller did not give to where its default comes from."""
    notes: tuple[str, ...] = ()
    """What the engines want a reader to know: assumptions, fallbacks, bounds hit."""
    iteration_time_band_s: tuple[float, float] | None = None
    """``(low, high)`` seconds a measured step should fall in, ``simdl.band.LEVEL`` of the time: on a
    calibrated profile, from its held-out step errors and step jitter; None where the profile has none."""
    max_memory_allocated_bytes: float | None = None
    """CUDA devices: what ``torch.cuda.max_memory_allocated`` reports over setup and two steps, as
    the caching-allocator model replays them (simdl.memory.cuda): tensors, their 512 B rounding and
    the cuBLAS workspaces. None on CPU devices and parameter-server plans."""
    max_memory_reserved_bytes: float | None = None
    """CUDA devices: what ``torch.cuda.max_memory_reserved`` reports (segments the caching allocator
    holds from cudaMalloc) over the same replay. None on CPU devices and parameter-server plans."""
    device_memory_bytes: dict[str, float] = field(default_factory=dict)
    """What ``peak_memory_bytes`` is made of; the values add up to it. CUDA: tensors,
    allocator_rounding, allocator_cache, cuda_context, nccl_buffers; CPU: tensors, context,
    workspace, fragmentation."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return d

    def to_json(self, indent: int | None = 2) -> str:
        from .jsonout import dumps  # allow_nan=False: a NaN is an error, never invalid JSON

        return dumps(self.to_dict(), indent=indent, sort_keys=False, default=_jsonable)

    def row(self) -> dict[str, Any]:
        """A flat dict for tables and DataFrames (config values prefixed with ``config.``)."""
        d = {
            k: v
            for k, v in self.to_dict().items()
            if k
            not in (
                "memory_breakdown_bytes",
                "staleness",
                "step_split_s",
                "config",
                "notes",
                "iteration_time_band_s",
                "device_memory_bytes",
            )
        }
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
