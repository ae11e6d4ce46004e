"""Element sizes of each row's activations, row by row, as the kernels store them.

The workload table's byte columns were traced in fp32. Under 16-bit activations (autocast,
or FSDP's 16-bit ``param_dtype``) most of them halve, but not all:

* MaxPool rows save their argmax indices, int64 whatever the activations' dtype
  (tools/autograd/derivatives.yaml, ``max_pool2d_with_indices``: ``result1``); the table's
  saved bytes of such a row are those indices (its input is the previous row's output,
  counted there), so they do not change.
* Embedding rows save their int64 token ids; their output has the weight's dtype, and
  ``embedding`` is in none of autocast's lists, so under autocast it stays fp32 (the
  weights are fp32 masters) while FSDP's 16-bit parameters make it 16-bit.
* Under autocast, the device's fp32 ops (``HostBackend.autocast_fp32_types``) cast their
  inputs to fp32 and return fp32: such rows save and return 4-byte elements.
* Dropout on CUDA runs ``native_dropout`` (aten/src/ATen/native/Dropout.cpp,
  ``is_fused_kernel_acceptable``: CUDA inputs, 0 < p < 1), which saves a bool mask of one
  byte per element; on a CPU the mask is a noise tensor in the input's dtype (as traced).
  ``HostBackend.dropout_mask_bytes`` says which (0: as traced).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAXPOOL_TYPES = ("MaxPool1d", "MaxPool2d", "MaxPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d")
EMBEDDING_TYPES = ("Embedding", "EmbeddingBag")
DROPOUT_TYPES = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")
#: Bytes of one element as the table traced it (fp32).
TRACED_BYTES = 4.0


@dataclass(frozen=True)
class RowDtypes:
    """Per-row factors on the table's fp32 bytes: saved activations, output, backward working set."""

    saved: np.ndarray
    out: np.ndarray
    working: np.ndarray


def row_dtypes(
    types, act_factor: float, autocast: bool, fp32_types: tuple[str, ...] = (), mask_bytes: float = 0.0
) -> RowDtypes:
    """The factors of rows of module ``types`` with activations at ``act_factor`` of fp32's
    size (1: fp32); ``autocast``: the 16 bits come from autocast (else from 16-bit parameters)."""
    t = np.asarray(types, dtype=object)
    n = len(t)
    saved = np.full(n, act_factor)
    out = np.full(n, act_factor)
    working = np.full(n, act_factor)
    if act_factor != 1.0:
        saved[np.isin(t, MAXPOOL_TYPES)] = 1.0
        emb = np.isin(t, EMBEDDING_TYPES)
        saved[emb] = 1.0
        if autocast:
            out[emb] = working[emb] = 1.0
            wide = np.isin(t, fp32_types)
            saved[wide] = out[wide] = working[wide] = 1.0
    if mask_bytes:
        saved[np.isin(t, DROPOUT_TYPES)] = mask_bytes / TRACED_BYTES
    return RowDtypes(saved, out, working)
