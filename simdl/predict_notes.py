"""What ``simdl.predict`` adds to an engine's result: notes on options that do less than their
name suggests, the epoch's sample counts, the cluster profile's noise note and step band."""

from __future__ import annotations

import dataclasses

from .band import LEVEL, band, step_spread
from .calibrate.jitter import noise_warning
from .result import Result


def with_input_notes(result: Result, workload, alloc, plan, echo: dict) -> Result:
    """Notes where an option does less, or other, than its name suggests (simdl.notes): a
    precision with no faster path on the GPU, CPU offload's host memory and unpriced copies,
    ps-ssp's bound 0 against ps-sync, and where colocated parameter servers were priced."""
    from .cluster.ps_placement import placement_notes
    from .notes import offload_note, precision_note, ssp_bound_zero_note

    spec = alloc.spec
    said = (
        precision_note(spec.gpu, workload.precision),
        offload_note(workload, plan, spec, alloc.gpus_per_node),
        ssp_bound_zero_note(echo["engine"]) if getattr(plan, "staleness_bound", None) == 0 else None,
    )
    placement = echo.get("ps_placement")
    added = tuple(n for n in said if n) + (placement_notes(spec, placement) if placement else ())
    return dataclasses.replace(result, notes=tuple(result.notes) + added) if added else result


def with_epoch_counts(result: Result, workload, plan) -> Result:
    """The epoch's samples as DistributedSampler and the DataLoader count them
    (simdl.workload.epoch); a note and the epoch's own throughput when the epoch is shorter
    than one step (a global batch larger than the data set)."""
    from .workload.epoch import epoch_counts, short_epoch_note, throughput

    counts = epoch_counts(workload.train_samples, plan.data_parallel, workload.batch_size, workload.grad_accumulation)
    config = dict(result.config, epoch_samples=counts.samples)
    note = short_epoch_note(counts, workload.batch_size, workload.grad_accumulation)
    if note is None:
        return dataclasses.replace(result, config=config)
    return dataclasses.replace(
        result,
        config=config,
        notes=tuple(result.notes) + (note,),
        throughput_samples_per_s=throughput(counts, result.iteration_time_s),
    )


def with_band(result: Result, spec) -> Result:
    """The result with the band its step should fall in on this cluster (simdl.band), where
    the profile's calibration says how far off its steps are; unchanged otherwise."""
    spread = step_spread(spec)
    if spread is None:
        from .band import no_band_reason

        why = no_band_reason(spec)  # a calibrated profile says why it has no band
        return dataclasses.replace(result, config=dict(result.config, iteration_time_band=why)) if why else result
    config = dict(result.config, iteration_time_band=f"{100 * LEVEL:.0f} % of runs; from the {spread.describe()}")
    return dataclasses.replace(result, iteration_time_band_s=band(result.iteration_time_s, spread.sigma), config=config)


def with_noise_note(result: Result, spec) -> Result:
    """The result, with a note when its cluster profile measured a machine whose own steps
    wander more than simdl's accuracy goal (simdl.calibrate.jitter.noise_warning): a user
    comparing one run with the prediction should expect that much either way."""
    cj = spec.efficiency.compute_jitter
    why = noise_warning(cj.value if cj is not None else None)
    if not why:
        return result
    return dataclasses.replace(result, notes=tuple(result.notes) + (f"cluster {spec.name}: {why}",))
