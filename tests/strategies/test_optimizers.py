"""Optimizers: the state each keeps and the passes its step streams, against torch.optim itself.

The model (simdl.workload.workload.OPTIMIZER_STATE_COPIES, simdl.strategies.optimizer_step.PASSES
and FOREACH_CALLS) was counted by hand from torch/optim/*.py; the torch tests below count the
same figures from a real step of the installed torch, so a change of torch's code shows here.
"""

from __future__ import annotations

import math

import pytest
from simdl.analytic.costs import device_rates, memory_bound_time, row_times

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.errors import SimdlError
from simdl.strategies.optimizer_step import CUDA_ONLY, FOREACH_CALLS, FOREACH_TENSORS_PER_LAUNCH, PASSES
from simdl.workload.library import load_workload
from simdl.workload.workload import OPTIMIZER_MEANING, OPTIMIZER_STATE_COPIES, OPTIMIZERS

TORCH_OPTIMIZERS = [o for o in OPTIMIZERS if o not in CUDA_ONLY]


def test_every_optimizer_has_state_passes_and_calls():
    assert set(OPTIMIZERS) == set(OPTIMIZER_STATE_COPIES) == set(PASSES) == set(FOREACH_CALLS) == set(OPTIMIZER_MEANING)
    assert {"sgd", "momentum", "adam", "adamw", "lamb"} <= set(OPTIMIZERS)


def test_adamw_keeps_adams_memory_and_streams_two_passes_more():
    kw = dict(model="resnet50", strategy="ddp", gpus=2)
    adam, adamw = simdl.predict(**kw, optimizer="adam"), simdl.predict(**kw, optimizer="adamw")
    assert adamw.memory_breakdown_bytes == adam.memory_breakdown_bytes
    assert adamw.peak_memory_bytes == adam.peak_memory_bytes
    assert adamw.config["optimizer"] == "adamw"
    # One GPU: the step is forward + backward + the optimizer, each known apart.
    table = load_workload("resnet18", dataset="cifar10")
    rates = device_rates(allocate(load_cluster("a100-80gb-nvlink"), 1), "fp32")
    rows = row_times(table, 32, rates)
    n = table.n_rows
    launches = math.ceil(len(table.params) / FOREACH_TENSORS_PER_LAUNCH)
    for name in ("sgd", "adamw"):
        r = simdl.predict(model="resnet18", strategy="ddp", gpus=1, optimizer=name)
        expected = (
            rows.segment(0, n, "fwd")
            + rows.segment(0, n, "bwd")
            + memory_bound_time(PASSES[name] * table.param_bytes, FOREACH_CALLS[name] * launches, rates)
        )
        assert r.iteration_time_s == pytest.approx(expected, rel=1e-12)
    assert PASSES["adamw"] == PASSES["adam"] + 2  # read and write the parameters once more


def test_sgd_without_momentum_keeps_no_state():
    table = load_workload("resnet50", dataset="cifar10")
    kw = dict(model="resnet50", strategy="fsdp", gpus=4)
    sgd = simdl.predict(**kw, optimizer="sgd")
    momentum = simdl.predict(**kw, optimizer="momentum")
    assert sgd.memory_breakdown_bytes["optimizer"] == 0
    # FSDP full: each rank keeps a quarter of the momentum buffer.
    assert momentum.memory_breakdown_bytes["optimizer"] == pytest.approx(table.param_bytes / 4, rel=0.02)


def test_lamb_keeps_two_states_and_runs_on_gpus_only():
    """apex FusedLAMB: exp_avg and exp_avg_sq, the update written into the gradient buffer."""
    table = load_workload("vgg16", dataset="cifar10")
    lamb = simdl.predict(model="vgg16", strategy="ddp", gpus=2, optimizer="lamb")
    assert lamb.memory_breakdown_bytes["optimizer"] == pytest.approx(2 * table.param_bytes, rel=0.01)
    adam = simdl.predict(model="vgg16", strategy="ddp", gpus=2, optimizer="adam")
    assert 0 < lamb.step_split_s["optimizer"] < adam.step_split_s["optimizer"]  # 13 passes against 18
    for kw in (dict(cluster="cpu-local", strategy="ddp", gpus=2), dict(cluster="a10g-ps", strategy="ps-sync", gpus=2)):
        with pytest.raises(SimdlError, match="'lamb' .*CUDA GPUs only.*accepted here: sgd, momentum, adam, adamw"):
            simdl.predict(model="resnet18", optimizer="lamb", **kw)


def test_cli_takes_adamw(capsys):
    import json

    from simdl.cli import main

    code = main(
        ["predict", "--model", "resnet18", "--strategy", "ddp", "--gpus", "2", "--optimizer", "adamw", "--json"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["config"]["optimizer"] == "adamw"


# -- against torch.optim ------------------------------------------------------------------------
def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))


def _optimizer(name, params, foreach):
    import torch

    return {
        "sgd": lambda: torch.optim.SGD(params, lr=0.1, foreach=foreach),
        "momentum": lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach),
        "adam": lambda: torch.optim.Adam(params, lr=1e-3, foreach=foreach),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-3, foreach=foreach),
    }[name]()


def _step(model, opt):
    import torch

    opt.zero_grad()
    model(torch.randn(4, 64)).sum().backward()
    opt.step()


@pytest.mark.torch
@pytest.mark.parametrize("name", TORCH_OPTIMIZERS)
def test_state_copies_match_torch(name):
    model = _model()
    opt = _optimizer(name, list(model.parameters()), foreach=True)
    _step(model, opt)
    params = sum(p.numel() for p in model.parameters())
    state = sum(
        v.numel() for s in opt.state.values() for v in s.values() if hasattr(v, "numel") and v.numel() > 1
    )  # the scalar step counters excluded
    assert state == OPTIMIZER_STATE_COPIES[name] * params


@pytest.mark.torch
@pytest.mark.parametrize("name", TORCH_OPTIMIZERS)
def test_passes_and_calls_match_torchs_foreach_step(name):
    """Count every ``aten._foreach_*`` call on parameter-sized lists in the second step (the
    first creates the state): a call reads its distinct tensor lists and writes one."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model = _model()
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    opt = _optimizer(name, params, foreach=True)
    _step(model, opt)
    counted = {"calls": 0, "passes": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.name().startswith("aten::_foreach_"):
                lists = [
                    a
                    for a in list(args) + list(kwargs.values())
                    if isinstance(a, (list, tuple))
                    and a
                    and isinstance(a[0], torch.Tensor)
                    and [t.numel() for t in a] == sizes
                ]
                if lists:
                    distinct = {tuple(t.data_ptr() for t in a) for a in lists}
                    counted["calls"] += 1
                    counted["passes"] += len(distinct) + 1
            return func(*args, **kwargs)

    opt.zero_grad()
    model(torch.randn(4, 64)).sum().backward()
    with Count():
        opt.step()
    assert counted == {"calls": FOREACH_CALLS[name], "passes": PASSES[name]}
