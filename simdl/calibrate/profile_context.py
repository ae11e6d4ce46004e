"""What every step of building a profile from a calibration run shares: the run's stages and
provenance, the device, the base preset and how the ranks share the device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cluster.device import GPU


@dataclass
class CalibrationRun:
    """One calibration run directory, read, with the facts the profile sections need."""

    run_dir: Path
    stages: dict[str, Any]
    prov: dict[str, Any]
    ran: set[str]  # the stages this calibration ran; the others' values are kept from the base
    gpu: str
    gpu_spec: GPU
    base: dict[str, Any]  # raw YAML of the preset the uncalibrated sections come from
    per_node: int
    nodes: int
    shared: bool  # every rank of a node runs on one host device (a CPU)
    share: float  # each rank's fraction of the device's peak and bandwidth
    tag: str  # names the run, its dates and hosts at the head of every source

    @property
    def ranks(self) -> int:
        return self.per_node * self.nodes

    def measured(self, stage: str) -> bool:
        """The stage ran here and recorded measurements."""
        return stage in self.ran and bool(self.stages[stage].measurements)
