"""The workload table: what one training step of a model costs, module call by module call.

A table is extracted once per (model, input shape, classes) with torch
(:mod:`simdl.workload.extract`) and stored as JSON. Loading and using it needs no torch.

Figures that grow with the batch are stored per sample, with a batch-independent part
beside them under ``<column>_fixed`` (for example the weights a convolution reads once
per call whatever the batch). ``value(batch) = per_sample * batch + fixed``.

File format (``schema: 1``)::

    {
      "schema": 1,
      "model": "vgg16", "dataset": "cifar10",
      "input_shape": [3, 32, 32], "num_classes": 10,
      "dtype": "float32",             # dtype the table was extracted in (element size 4)
      "adaptation": "...",             # how the model was adapted to the input, "" if not
      "extracted_with": {"torch": "2.14.1", "torchvision": "0.29.1", "batches": [2, 4], "date": "..."},
      "param_count": 14728266, "param_bytes": 58913064, "buffer_bytes": 0,
      "params":  [{"name": "features.0.weight", "module": "features.0", "numel": 1728}, ...],
                                       # registration order (model.parameters()); DDP buckets use its reverse
      "modules": [{"name": "features", "type": "Sequential", "params": 0}, ...],
                                       # every module in named_modules() order; "params" = own (non-recursive) numel
      "rows": [                        # module calls in execution order (one row per call)
        {"name": "features.0", "type": "Conv2d",
         "params": 1792, "param_bytes": 7168,            # own parameters (first call of the module only)
         "fwd_flops": .., "bwd_input_flops": .., "bwd_weight_flops": ..,
         "read_bytes": .., "read_bytes_fixed": .., "write_bytes": .., "write_bytes_fixed": ..,
         "saved_bytes": .., "saved_bytes_fixed": .., "output_bytes": ..,
         "fwd_kernels": 2, "bwd_kernels": 3}, ...]
    }

A row may leave out any numeric column whose value is 0 (most rows have no FLOPs or
no ``_fixed`` parts); readers treat a missing column as 0. ``extracted_with`` also
records the device, the loss (cross-entropy, its ops in the root row ``""``) and the
attention kernel used while tracing.

Column meanings (per sample unless ``_fixed``): forward FLOPs as PyTorch's
``FlopCounterMode`` counts them (matmul/conv/attention only, 2 FLOP per multiply-add);
backward FLOPs split into the gradient with respect to the module's input and with
respect to its own weights; bytes read and written by the forward kernels; activation
bytes saved for backward (saved-tensor hooks, deduplicated by storage, parameters
excluded); bytes of the module's output; the largest gradient bytes one backward op of
the row reads and writes among those the row's backward made (``bwd_working_bytes``: its
tensor inputs and outputs that are neither saved activations nor parameters; 0 in tables
traced before the column existed; a largest-over-ops figure, so linear in the batch
only while the same op is the largest: two batches extrapolate it to within a few percent);
the bytes by which the storages the row's own forward ops made, while still referenced,
exceed at their largest what of them the row keeps at its end (``fwd_working_bytes``: its
forward temporaries, e.g. shifted-window attention's padded windows and scores; 0 in tables
traced before the column existed; also a largest-over-ops figure);
kernel (non-view aten op) counts per call.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SimdlError
from .op_classes import op_class

SCHEMA = 1

# Columns that scale with the batch (each may have a ``_fixed`` companion).
SCALED_COLUMNS = (
    "fwd_flops",
    "bwd_input_flops",
    "bwd_weight_flops",
    "read_bytes",
    "write_bytes",
    "saved_bytes",
    "output_bytes",
    "bwd_working_bytes",
    "fwd_working_bytes",
)
FIXED_COLUMNS = ("params", "param_bytes", "fwd_kernels", "bwd_kernels")

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


@dataclass(frozen=True)
class Param:
    name: str
    module: str
    numel: int


@dataclass(frozen=True)
class Module:
    name: str
    type: str
    params: int  # own parameters, not counting children


# eq=False: tables compare and hash by identity, so per-table results can be memoised.
@dataclass(frozen=True, eq=False)
class WorkloadTable:
    """A model's per-call cost table; numeric columns as numpy arrays for fast sums."""

    model: str
    dataset: str
    input_shape: tuple[int, ...]
    num_classes: int
    dtype: str
    adaptation: str
    extracted_with: dict[str, Any]
    param_count: int
    param_bytes: int
    buffer_bytes: int
    params: tuple[Param, ...]
    modules: tuple[Module, ...]
    names: tuple[str, ...]
    types: tuple[str, ...]
    per_sample: dict[str, np.ndarray] = field(repr=False)
    fixed: dict[str, np.ndarray] = field(repr=False)

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "workload table") -> "WorkloadTable":
        if d.get("schema") != SCHEMA:
            raise SimdlError(f"{where}: schema {d.get('schema')!r} is not supported; accepted: {SCHEMA}")
        rows = d["rows"]
        per_sample = {c: np.array([float(r.get(c, 0.0)) for r in rows]) for c in SCALED_COLUMNS}
        fixed = {c: np.array([float(r.get(c + "_fixed", 0.0)) for r in rows]) for c in SCALED_COLUMNS}
        for c in FIXED_COLUMNS:
            fixed[c] = np.array([float(r.get(c, 0.0)) for r in rows])
        return cls(
            model=d["model"],
            dataset=d.get("dataset", ""),
            input_shape=tuple(d["input_shape"]),
            num_classes=int(d["num_classes"]),
            dtype=d.get("dtype", "float32"),
            adaptation=d.get("adaptation", ""),
            extracted_with=dict(d.get("extracted_with", {})),
            param_count=int(d["param_count"]),
            param_bytes=int(d["param_bytes"]),
            buffer_bytes=int(d.get("buffer_bytes", 0)),
            params=tuple(Param(p["name"], p["module"], int(p["numel"])) for p in d["params"]),
            modules=tuple(Module(m["name"], m["type"], int(m["params"])) for m in d["modules"]),
            names=tuple(r["name"] for r in rows),
            types=tuple(r["type"] for r in rows),
            per_sample=per_sample,
            fixed=fixed,
        )

    @classmethod
    def load(cls, path: str | Path) -> "WorkloadTable":
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise SimdlError(f"cannot read workload table {path}: {e}") from None
        return cls.from_dict(d, where=str(path))

    # -- use ------------------------------------------------------------------------
    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def n_rows(self) -> int:
        return len(self.names)

    def column(self, name: str, batch: int) -> np.ndarray:
        """Per-row values of a column at ``batch`` samples (per rank, per micro-step)."""
        if name in FIXED_COLUMNS:
            return self.fixed[name]
        return self.per_sample[name] * batch + self.fixed[name]

    def total(self, name: str, batch: int) -> float:
        return float(self.column(name, batch).sum())

    @cached_property
    def module_types(self) -> dict[str, str]:
        return {m.name: m.type for m in self.modules}

    @cached_property
    def op_classes(self) -> np.ndarray:
        """Per-row op class (:mod:`simdl.workload.op_classes`)."""
        return np.array([op_class(t) for t in self.types])
