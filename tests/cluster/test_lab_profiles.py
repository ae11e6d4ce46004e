"""The development VMs' calibrations kept outside the package (lab/profiles/): each loads by
path with its measured rows, none shadows a shipped preset, and the package ships one
calibrated CPU profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from simdl.cluster import cluster_names, load_cluster
from simdl.cluster.host import profile_devices

LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"
PROFILES = sorted(LAB_PROFILES.glob("*.yaml"))


def test_the_package_ships_one_calibrated_cpu_profile():
    assert [n for n in cluster_names() if n.startswith("cpu")] == ["cpu-local"]
    assert len([p for p in PROFILES if p.name.startswith("cpu-")]) == 12


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_a_lab_profile_loads_by_path_with_its_compute_profile(path):
    spec = load_cluster(str(path))
    assert spec.name not in cluster_names()
    assert profile_devices(spec) and all(d.startswith("cpu: ") for d in profile_devices(spec))
    assert spec.compute_profile and Path(spec.compute_profile).is_file()
