"""A row's forward temporaries (``fwd_working_bytes``): storages its own forward ops make
that are referenced for a while and then freed, neither saved for backward nor returned."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch


def _rows(net, shape, batch=4):
    from simdl.workload.extract import _trace

    rows, _ = _trace(net, shape, 10, batch)
    return {r.name: r.v for r in rows}


def test_padded_copies_freed_inside_forward_are_its_temporaries():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, 10)

        def forward(self, x):
            big = F.pad(x, (0, 56))  # (B, 3, 8, 64): not saved (pad's backward slices)
            scaled = big * 2.0  # a scalar multiply saves nothing
            kept = scaled[..., :8].reshape(x.shape[0], -1)  # a copy, saved by fc
            return self.fc(kept)

    with torch.device("meta"):
        net = Padded()
    batch = 4
    v = _rows(net, (3, 8, 8), batch)
    big = batch * 3 * 8 * 64 * 4
    assert v[""]["fwd_working_bytes"] == 2 * big  # big and scaled, both gone at the end
    assert v["fc"]["fwd_working_bytes"] == 0  # addmm's output is the row's output


def test_a_row_that_keeps_everything_it_makes_has_none():
    import torch
    from torch import nn

    with torch.device("meta"):
        net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, 10))
    v = _rows(net, (3, 8, 8))
    assert all(row["fwd_working_bytes"] == 0 for row in v.values())
