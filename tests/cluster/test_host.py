"""Host fingerprint: a calibrated CPU profile is checked against the processor it predicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from simdl.cluster import load_cluster
from simdl.cluster.host import cache_sizes, cpu_identity, cpu_model, host_mismatch, profile_caches, profile_devices
from simdl.cluster.spec import CLUSTER_DIR

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


def test_cpu_model_reads_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n")
    assert cpu_model(f) == "AMD EPYC 7B13"
    assert cpu_model(tmp_path / "missing")  # falls back to platform's guess, never empty


def test_cpu_identity_reads_the_first_processor_and_its_isa_flags(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu sse fma avx avx2\n\n"
        "processor\t: 1\nvendor_id\t: Other\nflags\t\t: avx512f\n"
    )
    assert cpu_identity(f) == {
        "vendor": "AuthenticAMD",
        "family": 25,
        "model": 1,
        "stepping": 1,
        "isa": ["fma", "avx2"],
    }
    assert cpu_identity(tmp_path / "missing") == {}


def test_cache_sizes_from_sysfs_layout(tmp_path):
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32768K")]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cache_sizes(tmp_path) == {"L1d": "48K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}
    assert cache_sizes(tmp_path / "none") == {}


def test_shipped_cpu_profile_names_its_processor():
    for name in ("cpu-local", lab("cpu-epyc")):
        devs = profile_devices(load_cluster(name))
        assert devs and all(d.startswith("cpu: ") for d in devs)


@pytest.mark.parametrize("here, expect", [("cpu: Intel(R) Xeon(R) Processor", False), ("cpu: AMD EPYC", True)])
def test_host_mismatch_compares_processor_names(here, expect):
    spec = load_cluster("cpu-local")  # calibrated on an Intel Xeon (provenance.devices)
    why = host_mismatch(spec, here)
    assert (why is not None) == expect
    if expect:
        assert "cpu-local" in why and "AMD EPYC" in why and "Xeon" in why


def test_presets_and_gpu_profiles_are_not_checked():
    assert host_mismatch(load_cluster("a100-80gb-nvlink"), "cpu: anything") is None
    assert host_mismatch(load_cluster("dgx-a100"), "cpu: anything") is None


def test_preset_for_this_host_picks_the_profile_of_this_processor():
    from simdl.cluster.host import preset_for_this_host

    spec = load_cluster("cpu-local")
    intel, caches = profile_devices(spec)[0], profile_caches(spec)
    assert preset_for_this_host(intel, caches) == "cpu-local"  # not its 4-rank sibling cpu-local-x4
    assert preset_for_this_host("cpu: A Processor Nobody Calibrated") is None


def test_preset_for_this_host_prefers_the_latest_calibration_of_a_processor(tmp_path, monkeypatch):
    """Two 2-rank profiles of one processor (the Zen 4 EPYC's cpu-epyc of 2026-11-25 and a
    recalibration): the newer is the default, whatever the names; a 4-rank one only when it
    is the only kind."""
    import shutil

    import yaml

    import simdl.cluster.spec as spec_mod
    from simdl.cluster.host import preset_for_this_host

    src = LAB_PROFILES / "cpu-epyc.yaml"
    raw = yaml.safe_load(src.read_text())
    shutil.copy(LAB_PROFILES / "cpu-epyc.compute.json.xz", tmp_path)

    def ship(name: str, date: str, slots: int = 2, allocator_env: dict | None = None, quick: bool = False) -> None:
        d = {**raw, "name": name, "gpus_per_node": slots}
        base = raw["calibration"]["provenance"]
        prov = {
            **base,
            "date": date,
            **({"allocator_env": allocator_env} if allocator_env else {}),
            **({"settings": {**(base.get("settings") or {}), "quick": True}} if quick else {}),
        }
        d["calibration"] = {**raw["calibration"], "provenance": prov}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(d, sort_keys=False))

    monkeypatch.setattr(spec_mod, "CLUSTER_DIR", tmp_path)
    ship("cpu-b-new-x4", "2026-12-03T00:00:00+00:00", slots=4)
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M) == "cpu-b-new-x4"
    ship("cpu-a-old", "2026-11-25T20:02:51+00:00")
    ship("cpu-z-new", "2026-12-02T06:32:07+00:00")
    ship("cpu-m-older", "2026-11-20T00:00:00+00:00")
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={}) == "cpu-z-new"  # not first by name
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_512K, environ={}) is None
    # An older profile timed with glibc's heap kept: chosen only where the ranks keep it too.
    keep = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "68719476736"}
    ship("cpu-k-keepheap", "2026-12-01T00:00:00+00:00", allocator_env=keep)
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={"HOME": "/root"}) == "cpu-z-new"
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={**keep, "HOME": "/root"}) == "cpu-k-keepheap"
    # Settings no profile was timed with: by date again.
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={"MALLOC_ARENA_MAX": "1"}) == "cpu-z-new"
    # A newer --quick calibration does not displace a full one; it serves where it is the only one.
    ship("cpu-q-newest-quick", "2026-12-04T22:41:14+00:00", quick=True)
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={}) == "cpu-z-new"
    for stale in ("cpu-a-old", "cpu-z-new", "cpu-m-older", "cpu-b-new-x4", "cpu-k-keepheap"):
        (tmp_path / f"{stale}.yaml").unlink()
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={}) == "cpu-q-newest-quick"


def test_named_cpu_device_files_are_cpus_and_calibration_picks_them_by_model_name():
    from simdl.calibrate.profile import gpu_file_for
    from simdl.cluster import load_gpu

    assert load_gpu("cpu").is_cpu and load_gpu("cpu-epyc").is_cpu and not load_gpu("A10G").is_cpu
    assert gpu_file_for("cpu: AMD EPYC") == "cpu-epyc"
    assert gpu_file_for("cpu: Intel(R) Xeon(R) Processor") == "cpu"
    assert gpu_file_for("NVIDIA A10G") == "A10G"


def test_calibration_picks_the_device_file_of_one_named_processor_by_its_caches():
    from simdl.calibrate.profile import gpu_file_for
    from simdl.cluster import load_gpu

    # Two processors the VM called "AMD EPYC": the Zen 3 of 2026-11-26 and the Zen 5 of 11-22/25.
    assert gpu_file_for("cpu: AMD EPYC", EPYC_L2_512K) == "cpu-epyc-milan"
    assert gpu_file_for("cpu: AMD EPYC", {"L1d": "48K", "L2": "1024K", "L3": "32768K"}) == "cpu-epyc"
    # Their peaks differ by 2x (AVX2 against AVX-512): the reason to tell them apart.
    assert load_gpu("cpu-epyc").peak("fp32") / load_gpu("cpu-epyc-milan").peak("fp32") > 2.0
    # The Zen 4 of cpu-epyc's own calibration (L1d 32K / L2 1024K), which has had its own file
    # since 2026-12-02; caches no file lists: the first file of that name, as before device
    # files had a host block; an unknown CPU: the generic file.
    assert gpu_file_for("cpu: AMD EPYC", EPYC_L2_1M) == "cpu-epyc-zen4"
    assert gpu_file_for("cpu: AMD EPYC", {"L1d": "64K", "L2": "2048K"}) == "cpu-epyc"
    assert gpu_file_for("cpu: Some Other CPU", EPYC_L2_512K) == "cpu"
    # Every shipped host CPU file says which processor it is.
    from simdl.cluster.spec import gpu_names, is_cpu_device_name

    assert all(load_gpu(n).host_model for n in gpu_names() if is_cpu_device_name(n))


def test_a_device_files_host_block_is_checked(tmp_path):
    import yaml

    from simdl.cluster import load_gpu
    from simdl.errors import SimdlError

    raw = load_gpu("cpu-epyc-milan").to_dict()
    assert {k: raw["host"][k] for k in ("model_name", "caches")} == {
        "model_name": "AMD EPYC",
        "caches": {"L1d": "32K", "L2": "512K"},
    }
    for bad, msg in (
        ({"model": "x"}, "unknown key 'model'"),
        ({"model_name": 3}, "host: model_name = 3; accepted"),
        ({"model_name": "x", "caches": [1]}, "host: caches = "),
    ):
        path = tmp_path / "g.yaml"
        path.write_text(yaml.safe_dump({**raw, "host": bad}))
        with pytest.raises(SimdlError, match=msg):
            load_gpu(str(path))


# One model name, several processors: the VM reported "AMD EPYC" with these caches on
# 2026-11-25 evening (cpu-epyc's calibration) and on 2026-11-26 (cpu-epyc-x4's).
EPYC_L2_1M = {"L1d": "32K", "L1i": "32K", "L2": "1024K", "L3": "32768K"}
EPYC_L2_512K = {"L1d": "32K", "L1i": "32K", "L2": "512K", "L3": "32768K"}


def test_host_mismatch_compares_caches_when_both_sides_record_them():
    from simdl.cluster.host import profile_caches

    spec = load_cluster(lab("cpu-epyc"))
    assert profile_caches(spec) == EPYC_L2_1M
    assert host_mismatch(spec, "cpu: AMD EPYC", EPYC_L2_1M) is None
    why = host_mismatch(spec, "cpu: AMD EPYC", EPYC_L2_512K)
    assert why is not None and "cpu-epyc" in why and "L2 1024K" in why and "L2 512K" in why
    # A host whose caches are unknown (no sysfs) is compared by name, as before.
    assert host_mismatch(spec, "cpu: AMD EPYC", {}) is None


def test_preset_for_this_host_tells_processors_of_one_name_apart():
    from simdl.cluster.host import preset_for_this_host

    # The Zen 4 has cpu-epyc (2026-11-25) and cpu-epyc-zen4 (2026-12-02): the newer. Both
    # are calibrations kept with the lab data, returned by path; the package ships neither.
    folders = (CLUSTER_DIR, LAB_PROFILES)
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={}) is None
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_1M, environ={}, folders=folders) == lab("cpu-epyc-zen4")
    # The Zen 3 has a 2-rank profile (cpu-epyc-milan) and a 4-rank one (cpu-epyc-x4): the
    # 2-rank one is preferred, and validate.run finds the other for 4-rank runs by provenance.
    assert preset_for_this_host("cpu: AMD EPYC", EPYC_L2_512K, environ={}, folders=folders) == lab("cpu-epyc-milan")
    assert preset_for_this_host("cpu: AMD EPYC", {"L1d": "48K", "L2": "1024K"}, environ={}, folders=folders) is None


def test_allocator_env_keeps_only_the_c_allocators_settings():
    from simdl.cluster.host import allocator_env

    env = {"MALLOC_TRIM_THRESHOLD_": "1", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1", "PATH": "/bin"}
    assert allocator_env(env) == {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1", "MALLOC_TRIM_THRESHOLD_": "1"}
    assert allocator_env({"HOME": "/root"}) == {}


def test_allocator_mismatch_names_both_malloc_settings():
    """A profile's compute times depend on glibc's heap trimming (lab/CAMPAIGN.md), so a
    profile timed under other malloc settings than the ranks' is named, both sides shown."""
    from simdl.cluster.host import allocator_mismatch

    spec = load_cluster(lab("cpu-epyc-zen4"))  # calibrated with glibc's defaults
    assert allocator_mismatch(spec, {"PATH": "/bin"}) is None
    why = allocator_mismatch(spec, {"MALLOC_TRIM_THRESHOLD_": "68719476736"})
    assert why == (
        "profile cpu-epyc-zen4 was timed with glibc's default malloc settings; these ranks with "
        "MALLOC_TRIM_THRESHOLD_=68719476736"
    )
    from types import SimpleNamespace  # load_cluster memoises presets: do not edit one

    kept = SimpleNamespace(
        name="kept",
        calibration={
            "provenance": {"devices": ["cpu: AMD EPYC"], "allocator_env": {"MALLOC_TRIM_THRESHOLD_": "68719476736"}}
        },
    )
    assert allocator_mismatch(kept, {"MALLOC_TRIM_THRESHOLD_": "68719476736"}) is None
    assert allocator_mismatch(kept, {}) == (
        "profile kept was timed with MALLOC_TRIM_THRESHOLD_=68719476736; "
        "these ranks with glibc's default malloc settings"
    )
    assert allocator_mismatch(load_cluster("a100-80gb-nvlink"), {"MALLOC_TRIM_THRESHOLD_": "1"}) is None  # a GPU preset
