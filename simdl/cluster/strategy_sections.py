"""The ``strategies`` section of a cluster file or profile: costs of one strategy measured on
this cluster, apart from the hardware's ``efficiency`` record. The strategy reads its own
section (``spec.strategies.fsdp`` in :mod:`simdl.strategies.fsdp`).

FSDP's per-unit host time is a cost of FSDP2's hooks, not of the hardware, so it lives in
``strategies.fsdp.unit_overhead_us``. A file may give it as ``efficiency.fsdp_unit_overhead_us``
as well: :func:`move_strategy_keys` reads that key as ``strategies.fsdp.unit_overhead_us`` in
each file before an ``extends`` merge, and giving both in one file is an error. DeepSpeed
ZeRO's host time per parameter, per submodule and per parameter of stage 1's extra pass lives in ``strategies.zero``
(read by :mod:`simdl.strategies.zero_plan`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import SimdlError
from ..provenance import Sourced
from .declare import NONNEG, Section, dump, knob

# efficiency key -> (strategy, key in its section): keys read into a strategy's section.
MOVED_EFFICIENCY_KEYS = {"fsdp_unit_overhead_us": ("fsdp", "unit_overhead_us")}


@dataclass(frozen=True)
class FSDPSection:
    """FSDP's costs on this cluster (read by the fsdp strategy)."""

    unit_overhead: Sourced | None = knob(
        "unit_overhead_us",
        NONNEG,
        """host time FSDP2 spends per unit per step
        outside its collectives and the copies the plan prices: its forward and backward hooks (pre-forward
        unshard, pre-backward, post-backward reduce) are Python on the training thread. Calls logged in the
        strategy steps of a calibration on an AMD EPYC (2 ranks) left 150-250 ms per convnext_tiny /
        efficientnet_v2_s step outside the calls and the local step, about as much with one collective per unit
        (NO_SHARD) as with three (FULL_SHARD): a cost per unit, not per call. Fitted by `simdl calibrate` with
        the other step parameters; absent = 0 (GPU presets: there the hooks run ahead of the kernels)""",
    )


@dataclass(frozen=True)
class ZeROSection:
    """DeepSpeed ZeRO's costs on this cluster (read by the zero1-zero3 strategies)."""

    param_overhead: Sourced | None = knob(
        "param_overhead_us",
        NONNEG,
        """host time DeepSpeed spends per parameter per
        step in stages 1-3 outside the collectives and the copies the plan prices: the per-parameter Python of
        reduce_ready_partitions_and_remove_grads (stage_1_and_2.py: the gradient hook of stage 2, the loop of
        reduce_gradients after backward in stage 1; stage3.py: reduce_partition_and_remove_grads) with its ipg
        bucket bookkeeping, and the per-parameter partition bookkeeping of the reduction and the step. Fitted by
        `simdl calibrate` where deepspeed imports; absent = 0""",
    )
    module_overhead: Sourced | None = knob(
        "module_overhead_us",
        NONNEG,
        """host time DeepSpeed stage 3 spends per
        submodule per step: the pre/post forward and pre/post backward hooks parameter_offload.py registers on
        every module (_register_hooks_recursively), each calling the PartitionedParameterCoordinator
        (partitioned_param_coordinator.py fetch_sub_module / release_sub_module: trace, prefetch, gather and
        release of the module's parameters). Fitted by `simdl calibrate` where deepspeed imports; absent = 0""",
    )
    loop_overhead: Sourced | None = knob(
        "stage1_loop_overhead_us",
        NONNEG,
        """host time DeepSpeed stage 1 spends per
        parameter per step beyond param_overhead_us, without overlap_comm: its gradient hooks still fire in
        backward (stage_1_and_2.py create_gradient_handling_hooks, installed for contiguous_gradients) and reduce
        nothing (process_gradients reduces only under partition_gradients or overlap_comm), and reduce_gradients'
        loop after backward calls get_gradient_for_reduction and reduce_ready_partitions_and_remove_grads around
        the reduction work that param_overhead_us prices; stage 2 runs that work in its hooks alone. Measured by
        benchmarks/zero1_vs_zero2_cpu.py (DeepSpeed 0.19.8); fitted by `simdl calibrate` outside --quick where
        deepspeed imports, from the stage-1 minus stage-2 step per parameter; absent = 0""",
    )


@dataclass(frozen=True)
class StrategySections:
    """Costs of each strategy measured on this cluster."""

    fsdp: FSDPSection = knob(
        "fsdp", Section(FSDPSection, null_default=True), "FSDP's costs", default=FSDPSection(), dump_default=False
    )
    zero: ZeROSection = knob(
        "zero",
        Section(ZeROSection, null_default=True),
        "DeepSpeed ZeRO's costs",
        default=ZeROSection(),
        dump_default=False,
    )

    def with_fsdp(self, **changes: Any) -> StrategySections:
        return dataclasses.replace(self, fsdp=dataclasses.replace(self.fsdp, **changes))

    def with_zero(self, **changes: Any) -> StrategySections:
        return dataclasses.replace(self, zero=dataclasses.replace(self.zero, **changes))

    def to_dict(self) -> dict[str, Any]:
        return dump(self)


def move_strategy_keys(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """``raw`` (one file's mapping) with the efficiency keys of :data:`MOVED_EFFICIENCY_KEYS`
    in their strategy's section (module docstring)."""
    eff = raw.get("efficiency")
    if not isinstance(eff, Mapping) or not any(k in eff for k in MOVED_EFFICIENCY_KEYS):
        return raw
    out = {**raw, "efficiency": dict(eff)}
    strategies = out.get("strategies")
    strategies = dict(strategies) if isinstance(strategies, Mapping) else {}
    for old, (strategy, key) in MOVED_EFFICIENCY_KEYS.items():
        if old not in out["efficiency"]:
            continue
        section = strategies.get(strategy)
        section = dict(section) if isinstance(section, Mapping) else {}
        if key in section:
            raise SimdlError(
                f"{where}: efficiency.{old} and strategies.{strategy}.{key} are one value; "
                f"accepted: strategies.{strategy}.{key} alone"
            )
        section[key] = out["efficiency"].pop(old)
        strategies[strategy] = section
    out["strategies"] = strategies
    return out
