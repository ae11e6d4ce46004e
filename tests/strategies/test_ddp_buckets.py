"""DDP bucket assignment against PyTorch's own function."""

import pytest

from simdl.strategies.ddp import bucket_assignment
from simdl.units import MiB


def test_bucket_assignment_small_example():
    # Reverse order; the first bucket closes once it reaches 1 MiB, later ones at 25 MiB.
    sizes = [4 * MiB, 0.5 * MiB, 0.6 * MiB, 30 * MiB, 10 * MiB, 10 * MiB]
    assert bucket_assignment(sizes, 1 * MiB, 25 * MiB) == [[5], [4, 3], [2, 1, 0]]


@pytest.mark.torch
@pytest.mark.parametrize("model", ["resnet18", "vgg16", "vit_b_32"])
def test_bucket_assignment_matches_pytorch(model):
    """Same buckets as torch.distributed._compute_bucket_assignment_by_size (reducer.cpp),
    given the parameters in reverse order as DDP passes them (torch/nn/parallel/distributed.py)."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    from simdl.workload.library import load_workload
    from simdl.workload.zoo import build_model

    table = load_workload(model, dataset="cifar10")
    m, _ = build_model(model, table.input_shape, table.num_classes, device="cpu")
    params = [p for p in m.parameters()]
    ours = bucket_assignment([p.numel * 4 for p in table.params], 1 * MiB, 25 * MiB)
    rev = list(reversed(params))
    theirs, _ = dist._compute_bucket_assignment_by_size(
        rev, [dist._DEFAULT_FIRST_BUCKET_BYTES, int(25 * MiB)], [False] * len(rev)
    )
    n = len(params)
    theirs_idx = [sorted(n - 1 - i for i in b) for b in theirs]
    assert [sorted(b) for b in ours] == theirs_idx
