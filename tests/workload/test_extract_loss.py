"""extract's loss for a model without logits: the sum of its outputs, or a one-line error."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch


def test_a_model_whose_output_holds_no_tensor_is_one_line():
    """A factory model returning no tensor has no loss to trace: a SimdlError, not a crash."""
    torch = pytest.importorskip("torch")
    from simdl.errors import SimdlError
    from simdl.workload.extract import _sum_loss

    with pytest.raises(SimdlError, match="holds no tensor"):
        _sum_loss([])
    assert float(_sum_loss([torch.ones(2), torch.ones(3)])) == 5.0
