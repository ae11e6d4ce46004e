"""Measured per-row compute times of models profiled on a cluster (vidur's approach).

``simdl calibrate`` times the forward and backward of every workload-table row of the
models it profiles, at two or more batch sizes, on every rank of a node at once (the
ranks share the device as they do in training; calibration/compute.py). It keeps those
times in a *compute profile*: a JSON file beside the cluster profile, named by the
profile's ``compute_profile`` key. When a prediction's model (same table: model, input
shape, classes and row names) was profiled on the cluster, the engines take its rows'
times from the profile instead of the roofline of :mod:`simdl.analytic.costs`:

* between measured batch sizes, each row's time is interpolated linearly in the batch;
  outside them it is extrapolated along the line through the two nearest sizes (a row
  costs a fixed part plus a part per sample), never below zero;
* the times were measured with ``ranks_sharing_device`` ranks on one device (a CPU's
  cores); a prediction whose ranks get a different share of the device scales them by
  the ratio of the shares (``Rates.measured_scale``).

Which batch sizes were measured is recorded in the profile and echoed by validation
reports, so a comparison can say whether the compute of a configuration was measured,
interpolated or extrapolated.

File format (``schema: simdl-compute-profile/1``)::

    {"schema": "simdl-compute-profile/1", "precision": "fp32",
     "ranks_sharing_device": 2, "source": "simdl calibrate run ...",
     "models": [{"model": "vgg16", "dataset": "cifar10", "input_shape": [3, 32, 32],
                 "num_classes": 10, "rows_digest": "<sha1 of row names and types>",
                 "batches": [24, 48], "fwd_s": [[...], [...]], "bwd_s": [[...], [...]]}]}
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import SimdlError

SCHEMA = "simdl-compute-profile/1"


def rows_digest(names, types) -> str:
    """A short digest of a table's rows (names and module types, in order)."""
    import hashlib  # only for profiled clusters: ~3 ms of every start otherwise

    h = hashlib.sha1()
    for n, t in zip(names, types):
        h.update(f"{n}\t{t}\n".encode())
    return h.hexdigest()[:16]


class MeasuredModel:
    """One profiled model: row times at the measured batch sizes."""

    def __init__(self, entry: dict, where: str):
        try:
            self.model = str(entry["model"])
            self.dataset = str(entry.get("dataset", ""))
            self.input_shape = tuple(int(x) for x in entry["input_shape"])
            self.num_classes = int(entry["num_classes"])
            self.digest = str(entry["rows_digest"])
            batches = [int(b) for b in entry["batches"]]
            fwd = np.asarray(entry["fwd_s"], dtype=float)
            bwd = np.asarray(entry["bwd_s"], dtype=float)
        except (KeyError, TypeError, ValueError) as exc:
            raise SimdlError(f"{where}: malformed model entry ({exc}); see simdl/analytic/measured.py") from None
        if not batches or fwd.shape != bwd.shape or fwd.shape[0] != len(batches) or np.any(fwd < 0) or np.any(bwd < 0):
            raise SimdlError(f"{where}: {self.model}: fwd_s/bwd_s must be one non-negative row list per batch")
        order = np.argsort(batches)
        self.batches = np.asarray(batches, dtype=float)[order]
        self.fwd = fwd[order]
        self.bwd = bwd[order]

    @property
    def key(self) -> tuple:
        return (self.model, self.input_shape, self.num_classes)

    def at(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """(fwd, bwd) seconds per row at ``batch`` (see the module docstring)."""
        b = self.batches
        if len(b) == 1:
            s = batch / b[0]
            return self.fwd[0] * s, self.bwd[0] * s
        if batch <= b[0]:
            i, j = 0, 1
        elif batch >= b[-1]:
            i, j = len(b) - 2, len(b) - 1
        else:
            j = int(np.searchsorted(b, batch))
            i = j - 1
        w = (batch - b[i]) / (b[j] - b[i])
        fwd = self.fwd[i] + w * (self.fwd[j] - self.fwd[i])
        bwd = self.bwd[i] + w * (self.bwd[j] - self.bwd[i])
        return np.maximum(fwd, 0.0), np.maximum(bwd, 0.0)

    def coverage(self, batch: int) -> str:
        """'measured', 'interpolated' or 'extrapolated' for ``batch``."""
        if batch in self.batches:
            return "measured"
        return "interpolated" if self.batches[0] < batch < self.batches[-1] else "extrapolated"


class ComputeProfile:
    """The models one cluster profile has measured rows for. Compared by identity."""

    def __init__(self, data: dict, where: str):
        if data.get("schema") != SCHEMA:
            raise SimdlError(f"{where}: schema = {data.get('schema')!r}; accepted: {SCHEMA!r}")
        self.where = where
        self.precision = str(data.get("precision", "fp32"))
        self.ranks_sharing_device = int(data.get("ranks_sharing_device", 1))
        if self.ranks_sharing_device < 1:
            raise SimdlError(f"{where}: ranks_sharing_device = {self.ranks_sharing_device}; accepted: an integer >= 1")
        self.source = str(data.get("source", ""))
        self.models: dict[tuple, MeasuredModel] = {}
        for k, entry in enumerate(data.get("models") or []):
            m = MeasuredModel(entry, f"{where}: models[{k}]")
            self.models[m.key] = m

    def find(self, table) -> MeasuredModel | None:
        m = self.models.get((table.model, tuple(table.input_shape), int(table.num_classes)))
        if m is None or m.digest != rows_digest(table.names, table.types):
            return None
        if m.fwd.shape[1] != table.n_rows:
            return None
        return m

    def describe(self) -> list[dict]:
        return [
            {"model": m.model, "dataset": m.dataset, "batches": [int(b) for b in m.batches]}
            for m in self.models.values()
        ]


@lru_cache(maxsize=16)
def load_compute_profile(path: str) -> ComputeProfile:
    p = Path(path)
    try:
        from ..textfile import read_text

        text = read_text(p)  # a .xz / .gz profile reads as its plain form
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SimdlError(f"compute profile {path}: cannot read ({reason})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimdlError(f"compute profile {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return ComputeProfile(data, str(path))


def write_compute_profile(data: dict, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    tmp.replace(path)
    return path
