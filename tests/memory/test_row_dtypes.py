"""Row by row element sizes under 16-bit activations (simdl.memory.rowdtypes)."""

from __future__ import annotations

import numpy as np
import pytest

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.hosts import host_for
from simdl.memory.rowdtypes import row_dtypes

TYPES = ("Conv2d", "MaxPool2d", "LayerNorm", "Embedding", "Dropout", "ReLU")


def _f(autocast=True, fp32=("LayerNorm",), mask=0.0, act=0.5):
    f = row_dtypes(TYPES, act, autocast, fp32, mask)
    return {t: (s, o, w) for t, s, o, w in zip(TYPES, f.saved, f.out, f.working)}


def test_fp32_rows_are_unchanged_but_for_cuda_dropout_masks():
    assert all(v == (1.0, 1.0, 1.0) for v in _f(act=1.0).values())
    assert _f(act=1.0, mask=1.0)["Dropout"] == (0.25, 1.0, 1.0)


def test_max_pool_indices_and_embedding_ids_keep_their_size():
    f = _f()
    assert f["MaxPool2d"] == (1.0, 0.5, 0.5)
    assert f["Conv2d"] == f["ReLU"] == (0.5, 0.5, 0.5)
    assert f["Embedding"] == (1.0, 1.0, 1.0)  # fp32 weights under autocast: fp32 output
    assert _f(autocast=False)["Embedding"] == (1.0, 0.5, 0.5)  # 16-bit parameters (FSDP)


def test_autocast_fp32_ops_widen_only_under_autocast():
    assert _f()["LayerNorm"] == (1.0, 1.0, 1.0)
    assert _f(autocast=False)["LayerNorm"] == (0.5, 0.5, 0.5)
    assert _f(fp32=())["LayerNorm"] == (0.5, 0.5, 0.5)


def test_the_host_backends_say_which_ops_and_masks():
    gpu, cpu = (host_for(allocate(load_cluster(c), 1, None)) for c in ("dgx-a100", "cpu-local"))
    assert "LayerNorm" in gpu.autocast_fp32_types() and gpu.dropout_mask_bytes() == 1.0
    assert cpu.autocast_fp32_types() == () and cpu.dropout_mask_bytes() == 0.0


@pytest.mark.parametrize("model", ["vit_b_16", "convnext_tiny"])
def test_layer_norm_models_keep_more_under_cuda_autocast_than_on_a_cpu(model):
    """The same bf16 DDP step: the CUDA device widens its layer norms, the CPU does not."""
    kw = dict(model=model, strategy="ddp", gpus=1, batch_size=8, precision="bf16", dataset="imagenet")
    ratios = []
    for cluster in ("dgx-a100", "cpu-local"):
        bf16 = simdl.predict(cluster=cluster, **kw).memory_breakdown_bytes["activations"]
        fp32 = simdl.predict(cluster=cluster, **{**kw, "precision": "fp32"}).memory_breakdown_bytes["activations"]
        ratios.append(bf16 / fp32)
    assert ratios[0] > ratios[1] + 0.01
    assert np.all(np.array(ratios) < 0.75)
