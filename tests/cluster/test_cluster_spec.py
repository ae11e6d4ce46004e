"""GPU and cluster preset files: they load, every number is sourced, SI conversion, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simdl.cluster import cluster_names, gpu_names, load_cluster, load_gpu
from simdl.cluster.spec import CLUSTER_DIR, GPU_DIR, PRECISIONS, raw_preset
from simdl.errors import SimdlError
from simdl.provenance import KINDS

# The development VMs' calibrations live with the lab data, not in the package.
LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"


def lab(name: str) -> str:
    return str(LAB_PROFILES / f"{name}.yaml")


EXPECTED_GPUS = {"A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "A10G", "H100-SXM", "V100-SXM2", "cpu"}
EXPECTED_PRESETS = {
    "a100-80gb-nvlink",
    "a100-80gb-pcie",
    "a10g-ps",
    "a100-40gb-2node",
    "dgx-a100",
    "h100-hgx",
    "v100-dgx1",
    "cpu-local",
}

# Plain integers that describe a preset's shape, not a measured quantity (see spec.py docstring).
# "calibration": free-form provenance and fit quality written by `simdl calibrate`.
STRUCTURAL = {"gpus_per_node", "nodes", "max_nodes", "count", "links", "calibration"}


def _walk_numbers(node, path=()):
    """Yield (path, entry) for every number in a raw YAML tree: either a sourced mapping (a
    ``{value, kind, source}`` number, or a table with one kind and source for all its numbers,
    such as ``collective_regimes_intra``) or a bare number."""
    if isinstance(node, dict):
        if "value" in node or ("kind" in node and "source" in node):
            yield path, node
            return
        for key, value in node.items():
            yield from _walk_numbers(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk_numbers(value, path + (i,))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, node


def test_shipped_files_are_all_there():
    assert EXPECTED_GPUS <= set(gpu_names())
    assert EXPECTED_PRESETS <= set(cluster_names())


@pytest.mark.parametrize("name", sorted(EXPECTED_GPUS))
def test_every_gpu_loads_with_all_precisions(name):
    gpu = load_gpu(name)
    assert gpu.name == name
    assert set(gpu.peak_flops) == set(PRECISIONS)
    assert gpu.memory_bytes.value > 0 and gpu.memory_bandwidth.value > 0


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_every_preset_loads(name):
    spec = load_cluster(name)
    assert spec.name == name
    assert spec.gpus_per_node >= 1
    assert spec.description
    if spec.max_nodes is None or spec.max_nodes > 1:
        assert spec.inter_node is not None


@pytest.mark.parametrize(
    "path", sorted(GPU_DIR.glob("*.yaml")) + sorted(CLUSTER_DIR.glob("*.yaml")), ids=lambda p: p.name
)
def test_every_number_has_kind_and_source(path):
    raw = yaml.safe_load(path.read_text())
    for where, entry in _walk_numbers(raw):
        if isinstance(entry, dict):
            assert entry.get("kind") in KINDS, f"{path.name}: {where} kind {entry.get('kind')!r}"
            assert isinstance(entry.get("source"), str) and len(entry["source"]) > 10, f"{path.name}: {where}"
        else:
            assert any(k in STRUCTURAL for k in where if isinstance(k, str)), (
                f"{path.name}: bare number at {where} (must be {{value, kind, source}})"
            )


def test_peaks_are_datasheet_or_explained():
    for name in gpu_names():
        raw = yaml.safe_load((GPU_DIR / f"{name}.yaml").read_text())
        for p in PRECISIONS:
            entry = raw[f"peak_{p}_TFLOP_per_s"]
            assert entry["kind"] in ("datasheet", "derived", "assumed"), (name, p)


def test_si_conversion_spot_checks():
    dgx = load_cluster("dgx-a100")
    assert dgx.inter_node.nic_bandwidth.value == pytest.approx(25e9)  # 200 Gb/s
    assert dgx.intra_node.bandwidth.value == pytest.approx(300e9)
    assert dgx.gpu.memory_bytes.value == 80 * 1024**3  # 80 GiB
    assert dgx.gpu.peak("bf16") == pytest.approx(312e12)
    assert dgx.efficiency.kernel_launch.value == pytest.approx(5e-6)
    assert dgx.memory.workspace_bytes.value == pytest.approx(8.125 * 1024**2)
    assert dgx.inter_node.latency.value == pytest.approx(2e-6)
    assert load_gpu("H100-SXM").peak("tf32") == pytest.approx(494.7e12)
    a10g = load_cluster("a10g-ps")
    assert a10g.ps_servers.nic_bandwidth.value == pytest.approx(5e9)  # 40 Gb/s


def test_v100_falls_back_without_tf32_bf16():
    v100 = load_gpu("V100-SXM2")
    assert v100.peak("tf32") == v100.peak("fp32")
    assert v100.peak_flops["tf32"].kind == "derived"
    assert v100.peak_flops["bf16"].kind == "assumed"


def test_names_are_case_insensitive_and_memoised():
    assert load_cluster("DGX-A100") is load_cluster("dgx-a100")
    assert load_gpu("a10g").name == "A10G"


def test_unknown_names_suggest_close_matches():
    with pytest.raises(SimdlError, match=r"did you mean 'dgx-a100'"):
        load_cluster("dgx-a10")
    with pytest.raises(SimdlError, match=r"unknown gpu 'A100-SXM4-81GB'"):
        load_gpu("A100-SXM4-81GB")


def test_extends_variant_overrides_only_the_nic_count():
    base, two = load_cluster("a100-40gb-2node"), load_cluster("a100-40gb-2node-2nic")
    assert two.inter_node.nics == 2 and base.inter_node.nics == 1
    assert two.intra_node == base.intra_node and two.efficiency == base.efficiency
    assert "extends" not in raw_preset("a100-40gb-2node-2nic")


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS | {"a100-40gb-2node-2nic"}))
def test_to_dict_round_trips(name, tmp_path):
    spec = load_cluster(name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    again = load_cluster(path)
    assert again.to_dict() == spec.to_dict()
    assert again.gpu == spec.gpu and again.efficiency == spec.efficiency
    assert again.intra_node == spec.intra_node and again.inter_node == spec.inter_node


def test_gpu_to_dict_round_trips(tmp_path):
    for name in gpu_names():
        gpu = load_gpu(name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(gpu.to_dict(), sort_keys=False))
        again = load_gpu(path)
        assert again.peak_flops == gpu.peak_flops and again.priors == gpu.priors
        assert again.memory_bytes == gpu.memory_bytes


# --------------------------------------------------------------------------- bad files


def _write_variant(tmp_path: Path, edit, base: str = "dgx-a100") -> Path:
    raw = load_cluster(base).to_dict()
    # A variant in another folder may not name its base's compute profile (a file outside its
    # own folder is refused); these tests change other fields.
    raw.pop("compute_profile", None)
    edit(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _assert_one_line(exc: pytest.ExceptionInfo, *fragments: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    assert "bad.yaml" in msg, msg
    for f in fragments:
        assert f in msg, msg


def test_negative_bandwidth_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["intra_node"]["bandwidth_GB_per_s"].update(value=-300))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "bandwidth_GB_per_s", "-300", "> 0")


def test_zero_nic_bandwidth_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["inter_node"]["nic_Gb_per_s"].update(value=0))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "inter_node", "nic_Gb_per_s", "0")


def test_ps_link_fields_round_trip_and_a_negative_one_is_rejected(tmp_path):
    def calibrated(r):
        r["ps_servers"]["worker_link_Gb_per_s"] = {"value": 12.0, "kind": "calibrated", "source": "a test"}
        r["ps_servers"]["receive_fault_ns_per_byte"] = {"value": 0.2, "kind": "calibrated", "source": "a test"}
        r["ps_servers"].pop("response_copy_ns_per_byte", None)

    spec = load_cluster(_write_variant(tmp_path, calibrated, base=lab("cpu-local-x4")))
    assert spec.ps_servers.worker_link.value == pytest.approx(1.5e9)
    assert spec.ps_servers.receive_fault.value == pytest.approx(0.2e-9)
    assert spec.ps_servers.response_copy is None  # optional
    assert spec.ps_servers.to_dict()["receive_fault_ns_per_byte"]["value"] == pytest.approx(0.2)
    path = _write_variant(
        tmp_path,
        lambda r: r["ps_servers"].update(
            response_copy_ns_per_byte={"value": -1, "kind": "calibrated", "source": "a test"}
        ),
        base=lab("cpu-local-x4"),
    )
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "response_copy_ns_per_byte", "-1", ">= 0")


def test_missing_key_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["efficiency"].pop("matmul"))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "efficiency", "missing key 'matmul'")


def test_unknown_gpu_is_rejected_with_close_match(tmp_path):
    path = _write_variant(tmp_path, lambda r: r.update(gpu="A100-SXM4-80G"))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "gpu", "'A100-SXM4-80G'", "did you mean 'A100-SXM4-80GB'")


def test_unknown_link_type_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["intra_node"].update(link="infinityfabric"))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "link", "'infinityfabric'", "nvlink, nvswitch, pcie, shm")


def test_gpus_per_node_below_one_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r.update(gpus_per_node=0))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "gpus_per_node", "0", ">= 1")


def test_misspelt_key_is_rejected(tmp_path):
    def edit(r):
        r["intra_node"]["bandwith_GB_per_s"] = r["intra_node"].pop("bandwidth_GB_per_s")

    path = _write_variant(tmp_path, edit)
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "bandwith_GB_per_s", "did you mean 'bandwidth_GB_per_s'")


def test_efficiency_above_one_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["efficiency"]["matmul"].update(value=1.5))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "matmul", "1.5", "fraction")


def test_missing_source_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r["host"]["cpu_cores"].pop("source"))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "cpu_cores", "source")


def test_multi_node_without_network_is_rejected(tmp_path):
    def edit(r):
        r.pop("inter_node")
        r["max_nodes"] = None

    path = _write_variant(tmp_path, edit)
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "max_nodes", "inter_node")


def test_mesh_that_disagrees_with_bandwidth_is_rejected(tmp_path):
    path = _write_variant(
        tmp_path,
        lambda r: r["intra_node"].update(
            bandwidth_GB_per_s={"value": 300, "kind": "datasheet", "source": "wrong on purpose"}
        ),
        base="v100-dgx1",
    )
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "mesh", "150", "300")


def test_malformed_yaml_is_rejected(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: broken\nintra_node: {link: nvswitch, bandwidth_GB_per_s: [1, 2\n")
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "malformed YAML", "line")


def test_non_mapping_yaml_is_rejected(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "mapping")


def test_bad_gpu_file_is_rejected(tmp_path):
    raw = load_gpu("A10G").to_dict()
    raw["peak_bf16_TFLOP_per_s"]["value"] = -1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError) as exc:
        load_gpu(path)
    _assert_one_line(exc, "peak_bf16_TFLOP_per_s", "-1")


def test_missing_file_is_rejected(tmp_path):
    with pytest.raises(SimdlError, match="does not exist"):
        load_cluster(tmp_path / "nope.yaml")


def test_unknown_collective_backend_is_rejected(tmp_path):
    path = _write_variant(tmp_path, lambda r: r.update(collective_backend="mpi"))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    _assert_one_line(exc, "collective_backend", "'mpi'", "gloo", "nccl")


def test_collective_backend_defaults_to_pytorchs_choice_for_the_device():
    # torch.distributed's Backend.default_device_backend_map: cpu -> gloo, cuda -> nccl
    assert load_cluster("dgx-a100").collective_backend == "nccl"
    assert load_cluster("cpu-local").collective_backend == "gloo"
