"""Find the workload table for a model and input: shipped, cached, or traced now.

Lookup order, cheapest first:

1. package data ``simdl/workload/data/<model>__<dataset>.json.gz`` (found with
   ``importlib.resources`` so an installed wheel has them too); no torch needed;
2. the user cache ``$SIMDL_CACHE_DIR``, else ``$XDG_CACHE_HOME/simdl``, else
   ``~/.cache/simdl``, keyed by model, input shape and classes;
3. a trace with :func:`simdl.workload.extract.extract` (imports torch), written to
   the cache for next time.

Loaded tables are memoised in-process: a sweep asks for the same table thousands of
times and must not re-read the file each time.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from ..errors import SimdlError
from .datasets import DATASETS, get_dataset
from .table import WorkloadTable
from .zoo import MODELS, check_model_name

_DATA_PACKAGE = "simdl.workload"
_SUFFIX = ".json.gz"


def _data_dir():
    # The package's own folder when it is one (every pip install); importlib.resources
    # (imported only then: it costs a predict several ms) for packages that are not files.
    here = Path(__file__).with_name("data")
    if here.is_dir():
        return here
    from importlib import resources

    return resources.files(_DATA_PACKAGE).joinpath("data")


def shipped_tables() -> list[tuple[str, str]]:
    """``(model, dataset)`` pairs whose tables ship with simdl, sorted."""
    out = []
    for entry in _data_dir().iterdir():
        name = entry.name
        if name.endswith(_SUFFIX) and "__" in name:
            model, _, dataset = name[: -len(_SUFFIX)].partition("__")
            out.append((model, dataset))
    return sorted(out)


def cache_dir() -> Path:
    if os.environ.get("SIMDL_CACHE_DIR"):
        return Path(os.environ["SIMDL_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "simdl"
    return Path.home() / ".cache" / "simdl"


def _safe(text: str) -> str:
    """A file-name-safe form of a model name or ``module:factory`` spec."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)


def shipped_path(model: str, dataset: str) -> Path:
    """Where the shipped table for ``model`` on ``dataset`` is (it may not exist)."""
    return Path(str(_data_dir().joinpath(f"{model}__{dataset}{_SUFFIX}")))


def cache_path(model: str, input_shape: tuple[int, ...], num_classes: int, vocab: int | None = None) -> Path:
    from .factory import cache_name  # a file.py:factory is cached under its content's digest

    shape = "x".join(str(int(s)) for s in input_shape)
    tokens = "" if vocab is None else f"__v{int(vocab)}"  # token-id inputs: a table of their own
    return cache_dir() / f"{_safe(cache_name(model))}__{shape}__{int(num_classes)}c{tokens}{_SUFFIX}"


def _resolve(model: str, dataset: str | None, input_shape, num_classes):
    """Fill shape/classes from the dataset, or find the dataset matching them."""
    check_model_name(model)
    if dataset is not None:
        ds = get_dataset(dataset)
        shape = tuple(input_shape) if input_shape is not None else ds.input_shape
        classes = int(num_classes) if num_classes is not None else ds.num_classes
        if (shape, classes) != (ds.input_shape, ds.num_classes):
            dataset = None  # a custom variant: not the shipped table
        return dataset, tuple(int(s) for s in shape), classes
    if input_shape is None:
        raise SimdlError(f"model {model!r}: give a dataset ({', '.join(sorted(DATASETS))}) or an input shape")
    shape = tuple(int(s) for s in input_shape)
    classes = 1000 if num_classes is None else int(num_classes)
    for ds in DATASETS.values():  # same shape and classes as a dataset: same table
        if (ds.input_shape, ds.num_classes) == (shape, classes):
            return ds.name, shape, classes
    return None, shape, classes


def table_path(model: str, dataset: str | None = None, input_shape=None, num_classes: int | None = None) -> Path:
    """The file the table for this request is (or would be) read from."""
    dataset, shape, classes = _resolve(model, dataset, input_shape, num_classes)
    if dataset is not None:
        path = shipped_path(model, dataset)
        if path.exists():
            return path
    return cache_path(model, shape, classes)


def load_workload(
    model: str, dataset: str | None = None, input_shape=None, num_classes: int | None = None, vocab: int | None = None
) -> WorkloadTable:
    """The workload table of ``model`` on ``dataset`` (or ``input_shape``/``num_classes``).

    ``num_classes`` defaults to the dataset's, or 1000 with a bare input shape. ``vocab``:
    the inputs are token ids below it (simdl.workload.inputs), never a dataset's images.
    """
    from .factory import cache_name

    dataset, shape, classes = _resolve(model, dataset, input_shape, num_classes)
    if vocab is not None:
        dataset = None
    return _load(model, dataset, shape, classes, cache_name(model), vocab)


@lru_cache(maxsize=256)
def _load(
    model: str, dataset: str | None, shape: tuple[int, ...], classes: int, version: str = "", vocab: int | None = None
) -> WorkloadTable:
    # version: a model file's content (factory.cache_name), so an edited file is traced anew
    if dataset is not None:
        path = shipped_path(model, dataset)
        if path.exists():
            return WorkloadTable.load(path)
    path = cache_path(model, shape, classes, vocab)
    if path.exists():
        return WorkloadTable.load(path)
    try:
        from .extract import extract, save_table  # imports torch
    except ImportError as e:
        raise SimdlError(
            f"no shipped or cached workload table for {model} at {'x'.join(map(str, shape))}"
            f" with {classes} classes; tracing one needs torch ({e}): "
            "pip install 'simdl[torch]'"
        ) from None
    table = extract(model, shape, classes, dataset=dataset or "", vocab=vocab)
    save_table(table, path)
    return WorkloadTable.from_dict(table, where=str(path))


def known_models() -> list[str]:
    return sorted(MODELS)
