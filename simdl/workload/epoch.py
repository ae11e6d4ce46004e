"""An epoch counted as PyTorch's data loading counts it.

torchvision's references/classification/train.py shards the data set with
``DistributedSampler(dataset)`` and batches it with ``DataLoader(dataset, batch_size,
sampler=..., num_workers, pin_memory=True, collate_fn)``: ``drop_last`` is left at False in
both. DistributedSampler then pads the data set so every rank gets
``ceil(N / world)`` samples (torch/utils/data/distributed.py: ``num_samples =
math.ceil(len(dataset) / num_replicas)``, the padding repeats samples from the start), and
the DataLoader's last batch of a rank is partial. An optimizer step takes ``grad_accumulation``
batches; a last group of fewer batches still steps (the common loop steps after every
``accumulation``-th batch and after the last one).

So the steps per epoch are ``ceil(ceil(N / world) / (batch x accumulation))``, which equals
``ceil(N / (world x batch x accumulation))``; what changes when the global batch is larger
than the data set is what one step holds: fewer samples than a full one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochCounts:
    steps: int  # optimizer steps per epoch
    samples_per_rank: int  # what DistributedSampler gives each rank (padding included)
    samples: int  # samples the ranks process per epoch, all ranks (padding included)
    step_samples: int  # samples one full step holds, all ranks

    @property
    def shorter_than_a_step(self) -> bool:
        return self.samples < self.step_samples


def epoch_counts(train_samples: int, data_parallel: int, batch_size: int, grad_accumulation: int) -> EpochCounts:
    per_rank = math.ceil(train_samples / data_parallel)
    per_step = batch_size * grad_accumulation
    return EpochCounts(
        steps=math.ceil(per_rank / per_step),
        samples_per_rank=per_rank,
        samples=per_rank * data_parallel,
        step_samples=per_step * data_parallel,
    )


def throughput(counts: EpochCounts, iteration_s: float) -> float:
    """Samples per second in steady state: a full step's samples per step, or, when the epoch is
    shorter than one step, the samples the epoch holds over its one step."""
    if iteration_s <= 0:
        return 0.0
    return min(counts.samples, counts.step_samples) / iteration_s


def short_epoch_note(counts: EpochCounts, batch_size: int, grad_accumulation: int) -> str | None:
    if not counts.shorter_than_a_step:
        return None
    return (
        f"the epoch is shorter than one step: DistributedSampler gives each of the "
        f"{counts.samples // counts.samples_per_rank} ranks {counts.samples_per_rank} samples, fewer than a step's "
        f"{batch_size * grad_accumulation} (batch {batch_size} x {grad_accumulation} micro-steps); the one step "
        f"per epoch is timed at the full batch (an upper bound) and the throughput counts the "
        f"{counts.samples:,} samples it holds"
    )
