"""One declaration per file kind (simdl.cluster.declare) gives the loader, to_dict and the JSON
Schema: every shipped file conforms to its schema, the schema and the loader refuse the same
bad values, load -> to_dict -> load is the identity, and `simdl schema` prints them."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from simdl.cli import main
from simdl.cluster.declare import declarations, file_keys
from simdl.cluster.efficiency import Efficiency
from simdl.cluster.schema import KINDS, schema, validate
from simdl.cluster.spec import CLUSTER_DIR, GPU_DIR, load_cluster, load_gpu
from simdl.errors import SimdlError

LAB_PROFILES = Path(__file__).resolve().parents[2] / "lab" / "profiles"
FILES = (
    [("device", p) for p in sorted(GPU_DIR.glob("*.yaml"))]
    + [("cluster", p) for p in sorted(CLUSTER_DIR.glob("*.yaml"))]
    + [("profile", p) for p in sorted(LAB_PROFILES.glob("*.yaml"))]
)


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_every_kind_of_file_is_found():
    kinds = [k for k, _ in FILES]
    assert kinds.count("device") >= 10 and kinds.count("cluster") >= 10 and kinds.count("profile") >= 10


@pytest.mark.parametrize("kind,path", FILES, ids=[f"{k}:{p.stem}" for k, p in FILES])
def test_every_shipped_file_conforms_to_its_schema(kind, path):
    assert validate(_raw(path), schema(kind)) == []


def test_the_schemas_are_valid_draft_2020_12_where_jsonschema_is_installed():
    jsonschema = pytest.importorskip("jsonschema")
    for kind in KINDS:
        jsonschema.Draft202012Validator.check_schema(schema(kind))
        checker = jsonschema.Draft202012Validator(schema(kind))
        for k, path in FILES:
            if k == kind:
                assert not list(checker.iter_errors(_raw(path))), path


def _dgx() -> dict:
    return load_cluster("dgx-a100").to_dict()


@pytest.mark.parametrize(
    "edit,key,fragments",
    [
        (lambda r: r["efficiency"]["matmul"].update(value=1.5), "matmul", ("matmul = 1.5", "accepted: a fraction")),
        (
            lambda r: r["efficiency"].update(matmull=r["efficiency"]["matmul"]),
            "matmull",
            ("unknown key 'matmull'", "did you mean 'matmul'", "accepted:"),
        ),
        (
            lambda r: (
                r["efficiency"]["copy_in_step_factor"].update(value=60)
                if "copy_in_step_factor" in r["efficiency"]
                else r["efficiency"].update(copy_in_step_factor={"value": 60, "kind": "assumed", "source": "t"})
            ),
            "copy_in_step_factor",
            ("copy_in_step_factor = 60", "accepted: 0.5 <= value <= 50"),
        ),
        (
            lambda r: r["intra_node"].update(link="infinityfabric"),
            "link",
            ("link = 'infinityfabric'", "accepted: nvlink, nvswitch, pcie, shm"),
        ),
        (lambda r: r.update(gpus_per_node=0), "gpus_per_node", ("gpus_per_node = 0", ">= 1")),
        (lambda r: r["host"].pop("cpu_cores"), "cpu_cores", ("missing key 'cpu_cores'",)),
        (
            lambda r: r["inter_node"]["latency_us"].update(kind="guessed"),
            "latency_us",
            ("latency_us.kind is 'guessed'", "accepted: datasheet"),
        ),
    ],
)
def test_a_bad_key_or_value_is_refused_by_schema_and_loader_in_one_line(tmp_path, edit, key, fragments):
    raw = _dgx()
    edit(raw)
    assert any(key in e for e in validate(raw, schema("cluster"))), validate(raw, schema("cluster"))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SimdlError) as exc:
        load_cluster(path)
    msg = str(exc.value)
    assert "\n" not in msg and "bad.yaml" in msg, msg
    for f in fragments:
        assert f in msg, msg


def test_a_profile_needs_its_calibration_unless_it_extends_another():
    raw = _raw(LAB_PROFILES / "cpu-epyc.yaml")
    assert validate(raw, schema("profile")) == []
    raw.pop("calibration")
    assert validate(raw, schema("profile")) == ["$: missing key 'calibration'"]
    assert validate(raw, schema("cluster")) == []
    assert validate({"extends": "cpu-epyc", "name": "x"}, schema("profile")) == []
    assert validate({"extends": "cpu-epyc", "nmae": "x"}, schema("profile")) == ["$: unknown key 'nmae'"]


def test_a_device_file_with_a_bad_kind_or_peak_is_refused_by_both():
    raw = load_gpu("A100-SXM4-80GB").to_dict()
    raw["kind"] = "tpu"
    raw["peak_bf16_TFLOP_per_s"]["value"] = -1
    errors = validate(raw, schema("device"))
    assert any("kind" in e for e in errors) and any("peak_bf16_TFLOP_per_s" in e for e in errors)


def test_each_efficiency_key_is_declared_once_and_round_trips():
    keys = file_keys(Efficiency)
    assert len(keys) == len(set(keys))
    # the schema also accepts the key the loader moves into strategies.fsdp
    assert set(schema("cluster")["$defs"]["full"]["properties"]["efficiency"]["properties"]) == {
        *keys,
        "fsdp_unit_overhead_us",
    }
    # every sourced knob set to an accepted value parses and comes back from to_dict
    raw = dict(load_cluster("dgx-a100").efficiency.to_dict())
    for name, d in declarations(Efficiency):
        lo = getattr(d.reader, "lo", None)
        if lo is None or d.key.startswith("collective_regimes"):
            continue
        value = max(lo, 0.5) if getattr(d.reader, "rule", "") in ("bounded", "fraction", "fraction0") else 2
        for k in d.keys():
            raw.setdefault(k, {"value": value, "kind": "assumed", "source": "test"})
    from simdl.cluster.efficiency import _parse_efficiency

    eff = _parse_efficiency(raw, "t", multi_node=True)
    assert set(eff.to_dict()) == set(raw)
    assert _parse_efficiency(eff.to_dict(), "again", multi_node=True) == eff


def _round_trip(spec, tmp_path: Path):
    raw = spec.to_dict()
    if spec.compute_profile:  # a profile names its measured rows beside it
        shutil.copy(spec.compute_profile, tmp_path)
        raw["compute_profile"]["file"] = Path(spec.compute_profile).name
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    again = load_cluster(path)
    a, b = again.to_dict(), spec.to_dict()
    assert a.pop("compute_profile", {}).get("source") == b.pop("compute_profile", {}).get("source")
    assert a == b
    return again


@pytest.mark.parametrize(
    "kind,path", [f for f in FILES if f[0] != "device"], ids=[f"{k}:{p.stem}" for k, p in FILES if k != "device"]
)
def test_load_to_dict_load_is_the_identity(kind, path, tmp_path):
    spec = load_cluster(str(path))
    again = _round_trip(spec, tmp_path)
    same = dataclasses.replace(again, source_path=spec.source_path, compute_profile=spec.compute_profile)
    assert same == spec
    assert again.calibration == spec.calibration and again.gpu == spec.gpu


@pytest.mark.parametrize("path", sorted(GPU_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_device_file_round_trips_whole(path, tmp_path):
    gpu = load_gpu(path.stem)
    out = tmp_path / path.name
    out.write_text(yaml.safe_dump(gpu.to_dict(), sort_keys=False))
    again = load_gpu(out)
    assert dataclasses.replace(again, source_path=gpu.source_path) == gpu
    assert again.to_dict() == gpu.to_dict() and again.device_memory == gpu.device_memory


def test_the_schema_command_prints_and_writes(tmp_path, capsys):
    assert main(["schema", "cluster"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed) == schema("cluster")
    assert main(["schema", "device", "-o", str(tmp_path / "device.json")]) == 0
    assert json.loads((tmp_path / "device.json").read_text()) == schema("device")
    assert capsys.readouterr().out == ""


def test_the_schema_command_refuses_an_unknown_kind_with_exit_2(capsys):
    assert main(["schema", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'tpu'" in err and "accepted: cluster, device, profile" in err
    assert main(["schema", "cluster", "-o", "/no/such/dir/x.json"]) == 2
