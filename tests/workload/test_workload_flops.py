"""Test 2: table FLOPs equal torch.utils.flop_counter.FlopCounterMode's count.

Both sides run the same model on the meta device with the same input and batch, and
the same attention path (``gpu_attention``: the memory-efficient SDPA kernel a CUDA
float32 run uses). One documented difference: the table divides the weight-gradient
FLOPs of grouped convolutions by ``groups`` (FlopCounterMode's formula in torch 2.14
overcounts them by that factor; pytorch/pytorch PR #183405). For models with grouped
convs the reference is FlopCounterMode with that one formula corrected through its
``custom_mapping`` argument; for the others it is FlopCounterMode unchanged.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

BATCH = 3  # not one of the extraction batches (2, 4): also checks the linear fit


def _conv_backward_grouped(*args, out_shape=None, **kwargs):
    """FlopCounterMode's convolution_backward formula with the weight part / groups."""
    from torch.utils.flop_counter import conv_backward_flop

    *head, groups, mask = args
    flops = 0
    if mask[0]:
        flops += conv_backward_flop(*head, groups, [True, False, False], out_val=out_shape)
    if mask[1]:
        weight = conv_backward_flop(*head, groups, [False, True, False], out_val=out_shape)
        flops += weight // groups
    return flops


def _reference(model_name, input_shape, num_classes, fix_groups):
    """(forward FLOPs, forward+backward FLOPs) counted by FlopCounterMode."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from simdl.workload.extract import gpu_attention
    from simdl.workload.zoo import build_adapted

    model, _, shape = build_adapted(model_name, input_shape, num_classes)
    x = torch.empty((BATCH, *shape), device="meta")
    y = torch.zeros(BATCH, dtype=torch.long, device="meta")
    mapping = {torch.ops.aten.convolution_backward: _conv_backward_grouped} if fix_groups else {}
    with gpu_attention():
        with FlopCounterMode(display=False, custom_mapping=mapping) as fwd:
            model(x)
        with FlopCounterMode(display=False, custom_mapping=mapping) as step:
            F.cross_entropy(model(x), y).backward()
    return fwd.get_total_flops(), step.get_total_flops()


CASES = [
    # (model, input shape, classes, has grouped convs)
    ("mnist_cnn", (1, 28, 28), 10, False),
    ("resnet18", (3, 32, 32), 10, False),
    ("vit_b_32", (3, 64, 64), 10, False),  # attention (fused SDPA formulas)
    pytest.param("densenet121", (3, 32, 32), 10, False, marks=pytest.mark.slow),
    pytest.param("efficientnet_v2_s", (3, 32, 32), 10, True, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("model,shape,classes,grouped", CASES)
def test_flops_equal_flop_counter_mode(model, shape, classes, grouped):
    from simdl.workload.extract import extract
    from simdl.workload.table import WorkloadTable

    table = WorkloadTable.from_dict(extract(model, shape, classes))
    fwd = table.total("fwd_flops", BATCH)
    total = fwd + table.total("bwd_input_flops", BATCH) + table.total("bwd_weight_flops", BATCH)
    ref_fwd, ref_total = _reference(model, shape, classes, fix_groups=grouped)
    print(f"{model}: table fwd {fwd:.6g} total {total:.6g}; FlopCounterMode fwd {ref_fwd:.6g} total {ref_total:.6g}")
    assert fwd == ref_fwd
    assert total == ref_total
    if grouped:  # the correction matters: unchanged FlopCounterMode counts more
        assert _reference(model, shape, classes, fix_groups=False)[1] > total


def test_backward_split_resnet():
    """Weight gradients cost what the forward did; input gradients skip the first conv.

    For convs and linears, grad_weight and grad_input are each one product of the
    same size as the forward one; the network input needs no gradient.
    """
    from simdl.workload.extract import extract
    from simdl.workload.table import WorkloadTable

    t = WorkloadTable.from_dict(extract("resnet18", (3, 32, 32), 10))
    fwd = t.column("fwd_flops", BATCH)
    first_conv = fwd[t.names.index("conv1")]
    assert t.total("bwd_weight_flops", BATCH) == fwd.sum()
    assert t.total("bwd_input_flops", BATCH) == fwd.sum() - first_conv


def test_backward_split_attention():
    """ViT: weight gradients = forward minus attention (which has no weights).

    The attention's own FLOPs (QK^T and PV) are computed here from the shapes with
    the registry's sdpa formula: 12 layers, 12 heads of 64, L = patches + class token.
    """
    from torch.utils.flop_counter import sdpa_flop_count

    from simdl.workload.extract import extract
    from simdl.workload.table import WorkloadTable

    t = WorkloadTable.from_dict(extract("vit_b_32", (3, 64, 64), 10))
    seq = (64 // 32) ** 2 + 1
    shape = (BATCH, 12, seq, 64)
    attention = 12 * sdpa_flop_count(shape, shape, shape)
    assert t.total("bwd_weight_flops", BATCH) == t.total("fwd_flops", BATCH) - attention
    # The attention and its backward sit in the MultiheadAttention rows.
    mha = [i for i, ty in enumerate(t.types) if ty == "MultiheadAttention"]
    assert len(mha) == 12
    assert all(t.column("bwd_input_flops", BATCH)[i] > t.column("fwd_flops", BATCH)[i] / 2 for i in mha)
