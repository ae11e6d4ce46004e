"""What a Python user finds: lists of models and clusters, a docstring per Result field, the
py.typed marker, and sweep rows flattened exactly as Result.row() flattens a result."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

import simdl
from simdl.catalog import field_docs
from simdl.result import Result, Staleness

ROOT = Path(__file__).resolve().parents[1]


def test_list_models_and_clusters_are_what_predict_takes():
    models, clusters = simdl.list_models(), simdl.list_clusters()
    assert "vgg16" in models and "resnet50" in models and models == sorted(models)
    assert "a100-80gb-nvlink" in clusters and "dgx-a100" in clusters and clusters == sorted(clusters)
    r = simdl.predict(model=models[-1], cluster=clusters[0], strategy="ddp", gpus=1, batch_size=2)
    assert r.config["cluster"] == clusters[0]
    with pytest.raises(simdl.SimdlError):
        simdl.predict(model="no-such-model")


def test_shipped_tables_name_only_models_in_the_list():
    from simdl.catalog import shipped_tables

    shipped = shipped_tables()
    assert set(shipped) <= set(simdl.list_models())
    assert "cifar10" in shipped["vgg16"]


@pytest.mark.parametrize("cls", [Result, Staleness])
def test_every_result_field_has_a_docstring(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if len(docs.get(f.name, "")) < 10]
    assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_py_typed_ships_with_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert (ROOT / "simdl" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["simdl"]


def test_sweep_rows_and_csv_are_flat_as_result_row():
    from simdl.explore.sweep import run_one

    params = {"model": "resnet18", "strategy": "ddp", "gpus": 2, "cluster": "dgx-a100"}
    row = run_one(params)
    expected = simdl.predict(**params).row()
    for k, v in expected.items():
        assert k in row, k
        assert row[k] == v, k
    nested = {k: v for k, v in row.items() if isinstance(v, (dict, list, tuple))}
    assert not nested, nested


def test_sweep_csv_cells_are_scalars(tmp_path):
    from simdl.explore.sweep import run_points, write_rows

    rows = run_points(
        [{"model": "resnet18", "strategy": s, "gpus": 2} for s in ("ddp", "fsdp-full")], jobs=1, progress=False
    )
    path = tmp_path / "s.csv"
    write_rows(rows, str(path))
    with open(path, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 2
    assert "step_compute_s" in table[0] and "iteration_time_band_low_s" in table[0]
    for r in table:
        for k, v in r.items():
            assert not v.startswith(("{", "[", "(")), (k, v)
