"""Golden predictions: every number of a fixed sample of predictions, kept in a fixture.

The sample is the README's example commands plus strategy x engine x cluster x model
configurations (DDP, FSDP with each sharding and its knobs, the three parameter-server
modes; analytic and simulated; GPU presets and a CPU profile with measured compute), a
small sweep and a recommendation. A refactor must leave every number as it was; a change
that is meant to move numbers regenerates the fixture and says why in its commit:

    PYTHONPATH=. SIMDL_REGEN_GOLDEN=1 python -m pytest tests/test_golden_predictions.py -q

Comparison: each key in the fixture must be present with the same value (floats to a
relative 1e-12, which allows summation-order noise and nothing else); keys the code adds
later are not checked, so a new Result field does not break the fixture.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

import simdl

FIXTURE = Path(__file__).parent / "golden" / "predictions.json"
# Development-VM calibrations live with the lab data, named by repository-relative path.
LAB_ZEN4 = "lab/profiles/cpu-epyc-zen4.yaml"
LAB_LOCAL_X4 = "lab/profiles/cpu-local-x4.yaml"
REL = 1e-12

# name -> predict() keywords. The first six are the README's examples.
CASES: dict[str, dict] = {
    "readme_vgg16_fsdp_4": dict(model="vgg16", strategy="fsdp", gpus=4),
    "readme_resnet50_ddp_16_dgx": dict(model="resnet50", strategy="ddp", gpus=16, cluster="dgx-a100"),
    "readme_densenet121_psasync_a10g_mnist": dict(
        model="densenet121", strategy="ps-async", gpus=4, cluster="a10g-ps", dataset="mnist"
    ),
    "readme_convnext_large_fsdp_grad_op": dict(model="convnext_large", strategy="fsdp", gpus=4, sharding="grad_op"),
    "readme_resnet50_psasync_sim_straggler": dict(
        model="resnet50",
        strategy="ps-async",
        gpus=4,
        cluster="a10g-ps",
        engine="sim",
        straggler=["rank=0,factor=1.5"],
        jitter="lognormal:0.1",
    ),
    "readme_convnext_large_grad_op_ckpt": dict(
        model="convnext_large", strategy="fsdp", sharding="grad_op", activation_checkpointing=True
    ),
    # DDP
    "ddp_resnet18_a100_2": dict(model="resnet18", strategy="ddp", gpus=2),
    "ddp_vgg16_bucket50_dgx_16": dict(model="vgg16", strategy="ddp", gpus=16, cluster="dgx-a100", bucket_cap_mb=50),
    "ddp_vit_2node_8_bf16": dict(
        model="vit_b_16", strategy="ddp", gpus=8, cluster="a100-40gb-2node", precision="bf16", dataset="imagenet"
    ),
    "ddp_resnet50_tree_h100": dict(model="resnet50", strategy="ddp", gpus=8, cluster="h100-hgx", algorithm="tree"),
    "ddp_resnet18_cpu_zen4_sim": dict(model="resnet18", strategy="ddp", gpus=2, cluster=LAB_ZEN4, engine="sim"),
    "ddp_resnet18_cpu_zen4": dict(model="resnet18", strategy="ddp", gpus=2, cluster=LAB_ZEN4),
    # FSDP
    "fsdp_full_resnet50_dgx_16": dict(model="resnet50", strategy="fsdp", gpus=16, cluster="dgx-a100"),
    "fsdp_none_vgg16_v100": dict(model="vgg16", strategy="fsdp", sharding="none", gpus=8, cluster="v100-dgx1"),
    "fsdp_hybrid_vit_2node": dict(
        model="vit_b_16", strategy="fsdp", sharding="hybrid", gpus=8, cluster="a100-40gb-2node"
    ),
    "fsdp_hybrid_shard2_vit_2node": dict(
        model="vit_b_16", strategy="fsdp", sharding="hybrid", gpus=8, cluster="a100-40gb-2node", shard_group=2
    ),
    "fsdp_full_wrap_size_reshard_root": dict(
        model="resnet50", strategy="fsdp", gpus=4, wrap="size:1000000", reshard_root=True
    ),
    "fsdp_full_wrap_none": dict(model="resnet18", strategy="fsdp", gpus=4, wrap="none"),
    "fsdp_full_cpu_offload": dict(model="vgg16", strategy="fsdp", gpus=4, cpu_offload=True),
    "fsdp_grad_op_ga2_adam": dict(
        model="resnet50", strategy="fsdp", sharding="grad_op", gpus=4, grad_accumulation=2, optimizer="adam"
    ),
    "fsdp_full_resnet18_cpu_zen4": dict(model="resnet18", strategy="fsdp", gpus=2, cluster=LAB_ZEN4),
    "fsdp_full_resnet18_cpu_zen4_sim": dict(model="resnet18", strategy="fsdp", gpus=2, cluster=LAB_ZEN4, engine="sim"),
    "fsdp_grad_op_resnet18_cpu_local": dict(
        model="resnet18", strategy="fsdp", sharding="grad_op", gpus=2, cluster="cpu-local"
    ),
    "fsdp_full_sim_resnet18": dict(model="resnet18", strategy="fsdp", gpus=4, engine="sim"),
    "fsdp_hybrid_sim_2node": dict(
        model="resnet18", strategy="fsdp", sharding="hybrid", gpus=8, cluster="a100-40gb-2node", engine="sim"
    ),
    "ddp_sim_dgx_16": dict(model="resnet50", strategy="ddp", gpus=16, cluster="dgx-a100", engine="sim"),
    # Parameter server
    "ps_sync_resnet18_a10g": dict(model="resnet18", strategy="ps-sync", gpus=4, cluster="a10g-ps"),
    "ps_sync_2servers_colocated_dgx": dict(
        model="resnet50", strategy="ps-sync", gpus=16, cluster="dgx-a100", ps_servers=2, ps_placement="colocated"
    ),
    "ps_async_resnet18_a10g": dict(model="resnet18", strategy="ps-async", gpus=4, cluster="a10g-ps"),
    "ps_ssp_resnet18_a10g": dict(model="resnet18", strategy="ps-ssp", gpus=4, cluster="a10g-ps"),
    "ps_ssp0_resnet18_a10g": dict(model="resnet18", strategy="ps-ssp", gpus=4, cluster="a10g-ps", staleness_bound=0),
    "ps_sync_sim_a10g": dict(model="resnet18", strategy="ps-sync", gpus=4, cluster="a10g-ps", engine="sim"),
    "ps_async_sim_a10g": dict(model="resnet18", strategy="ps-async", gpus=4, cluster="a10g-ps", engine="sim"),
    "ps_ssp_sim_a10g": dict(
        model="resnet18", strategy="ps-ssp", gpus=4, cluster="a10g-ps", engine="sim", staleness_bound=2
    ),
    "ps_sync_cpu_local_x4": dict(model="resnet18", strategy="ps-sync", gpus=3, cluster=LAB_LOCAL_X4),
    "ps_async_cpu_local_x4_sim": dict(
        model="resnet18", strategy="ps-async", gpus=3, cluster=LAB_LOCAL_X4, engine="sim"
    ),
}

SWEEP = dict(
    model="resnet18",
    strategy=["ddp", "fsdp-full", "fsdp-none", "ps-sync"],
    gpus=[2, 4],
    cluster="a10g-ps",
    executor="serial",
    progress=False,
)
RECOMMEND = dict(model="resnet18", cluster="a100-40gb-2node", gpus=8, batch_sizes=[32], precisions=["fp32"], jobs=1)


def _jsonable(x):
    """A JSON-safe copy (tuples as lists, numpy scalars as numbers, NaN as a string)."""
    return json.loads(json.dumps(x, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def _predict(kw: dict) -> dict:
    return _jsonable(simdl.predict(**kw).to_dict())


def _sweep() -> list:
    rows = simdl.sweep(**SWEEP)
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    return _jsonable(rows)


def _recommend() -> dict:
    r = simdl.recommend(**RECOMMEND)
    return _jsonable({"ranked": r.ranked, "rejected": r.rejected, "explanation": r.explanation})


def _all() -> dict:
    out = {name: _predict(kw) for name, kw in CASES.items()}
    out["sweep"] = _sweep()
    out["recommend"] = _recommend()
    return out


def _diff(want, got, path: str, out: list[str]) -> None:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            out.append(f"{path}: {got!r} is not a mapping")
            return
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                _diff(v, got[k], f"{path}.{k}", out)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            out.append(f"{path}: {got!r} != {want!r}")
            return
        for i, (a, b) in enumerate(zip(want, got)):
            _diff(a, b, f"{path}[{i}]", out)
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        same_nan = math.isnan(want) and math.isnan(got)
        if not (same_nan or want == got or math.isclose(want, got, rel_tol=REL, abs_tol=0.0)):
            out.append(f"{path}: {got!r} != {want!r}")
    elif want != got:
        out.append(f"{path}: {got!r} != {want!r}")


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("SIMDL_REGEN_GOLDEN"):
        FIXTURE.write_text(json.dumps(_all(), indent=1, sort_keys=True) + "\n")
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_prediction_unchanged(golden, name):
    out: list[str] = []
    _diff(golden[name], _predict(CASES[name]), name, out)
    assert not out, "\n".join(out[:20])


def test_sweep_unchanged(golden):
    out: list[str] = []
    _diff(golden["sweep"], _sweep(), "sweep", out)
    assert not out, "\n".join(out[:20])


def test_recommend_unchanged(golden):
    out: list[str] = []
    _diff(golden["recommend"], _recommend(), "recommend", out)
    assert not out, "\n".join(out[:20])


def test_fixture_covers_every_case(golden):
    assert set(CASES) | {"sweep", "recommend"} == set(golden)
