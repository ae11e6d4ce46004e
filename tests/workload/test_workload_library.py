"""Test 7: finding tables: shipped without torch, unknown names, factory specs + cache."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from simdl.errors import SimdlError
from simdl.workload import library

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty user cache and a cold in-process memo."""
    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(str(REPO))  # tests.workload.factories importable
    library._load.cache_clear()
    yield tmp_path
    library._load.cache_clear()


def test_shipped_table_loads_without_torch():
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from simdl.workload.library import load_workload\n"
        "table = load_workload('efficientnet_v2_l', 'imagenet')\n"
        "assert table.n_rows > 1000 and table.param_count > 100_000_000\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "t0 = time.perf_counter(); load_workload('resnet50', 'cifar10');"
        " print((time.perf_counter() - t0) * 1e3)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    print(f"resnet50/cifar10 cold load: {float(out.stdout):.2f} ms")


def test_load_is_fast_and_memoised():
    library._load.cache_clear()
    t0 = time.perf_counter()
    table = library.load_workload("densenet121", "cifar10")
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = library.load_workload("densenet121", "cifar10")
    warm = time.perf_counter() - t0
    print(f"densenet121/cifar10 load: cold {cold * 1e3:.2f} ms, memoised {warm * 1e6:.1f} us")
    assert again is table
    assert cold < 0.5  # generous; a few ms on a laptop


def test_dataset_is_found_from_shape():
    table = library.load_workload("resnet18", input_shape=(3, 32, 32), num_classes=10)
    assert table.dataset == "cifar10"
    assert library.table_path("vgg16", "mnist").name == "vgg16__mnist.json.gz"


def test_unknown_model_names_close_matches():
    with pytest.raises(SimdlError, match=r"unknown model 'resnet5'.*did you mean 'resnet50'"):
        library.load_workload("resnet5", "cifar10")
    with pytest.raises(SimdlError, match="unknown dataset"):
        library.load_workload("resnet50", "cifar100")
    with pytest.raises(SimdlError, match="give a dataset"):
        library.load_workload("resnet50")


@pytest.mark.torch
def test_factory_spec_is_traced_and_cached(cache, monkeypatch):
    spec = "tests.workload.factories:tiny_cnn"
    table = library.load_workload(spec, input_shape=(3, 16, 16), num_classes=5)
    assert table.model == spec and table.num_classes == 5
    assert table.param_count == (3 * 9 * 8 + 8) + 2 * 8 + (8 * 5 + 5)
    files = list(cache.iterdir())
    assert [f.name for f in files] == ["tests.workload.factories-tiny_cnn__3x16x16__5c.json.gz"]
    # A new process (cold memo) reads the cache instead of tracing again.
    library._load.cache_clear()
    from simdl.workload import extract

    monkeypatch.setattr(extract, "extract", lambda *a, **k: pytest.fail("traced again"))
    again = library.load_workload(spec, input_shape=(3, 16, 16), num_classes=5)
    assert again.n_rows == table.n_rows


@pytest.mark.torch
def test_factory_without_num_classes(cache):
    table = library.load_workload("tests.workload.factories:fixed_mlp", input_shape=(3, 16, 16), num_classes=7)
    assert table.param_count == 3 * 16 * 16 * 3 + 3
    assert table.extracted_with["loss"] == "sum"  # 3 outputs, not 7 classes: no cross-entropy


@pytest.mark.torch
@pytest.mark.parametrize(
    "spec,message",
    [
        ("tests.workload.factories:not_a_model", "expected a torch.nn.Module"),
        ("tests.workload.factories:missing", "has no attribute"),
        ("tests.workload.nope:model", "cannot import"),
    ],
)
def test_bad_factory_specs(cache, spec, message):
    with pytest.raises(SimdlError, match=message):
        library.load_workload(spec, input_shape=(3, 16, 16), num_classes=5)


def test_no_torch_message(cache, monkeypatch):
    """Without torch, an untraced request says how to install it."""
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    monkeypatch.delitem(sys.modules, "simdl.workload.extract", raising=False)
    with pytest.raises(SimdlError, match=r"pip install 'simdl\[torch\]'"):
        library.load_workload("resnet18", input_shape=(3, 40, 40), num_classes=10)
