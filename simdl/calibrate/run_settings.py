"""The settings of a calibration run: what ``simdl calibrate`` measures (stages, models and
batch sizes, time budget, torchrun options), as :func:`make_settings` writes them to the run's
``run.json`` and :func:`read_run_settings` reads them back for ``--resume``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import SimdlError
from .records import STAGES

DEFAULT_BUDGET = {True: 150.0, False: 900.0}  # quick / full, seconds of measurement
# Compute stage: fit models first, the held-out model last (predicted, never fitted).
COMPUTE_MODELS = {
    # vgg16 (large, efficient convolutions and a 400 MB classifier) pins the FLOP and memory
    # efficiencies that mnist_cnn and resnet18 alone leave loose.
    True: ("mnist_cnn:mnist:8,32;resnet18:cifar10:4,8;vgg16:cifar10:2,4;densenet121:cifar10:2,4", ["densenet121"]),
    False: ("mnist_cnn:mnist:16,64;resnet18:cifar10:4,16;vgg16:cifar10:2,8;densenet121:cifar10:4,8", ["densenet121"]),
}
# Strategy stage (calibration/strategies.py): models and batch sizes no validation run uses.
# wide_resnet101_2 (127 M parameters, 507 MB of fp32 gradients, 25 MB DDP buckets and
# 17-67 MB FSDP units) puts the large-message steps of the models users train into the fit;
# the three others have 45-111 MB. wide_mlp's first layer is one 403 MB message, the size of
# VGG-style classifiers. Together they add about 10 minutes at 2 CPU ranks, 25 at 4.
STRATEGY_MODELS = {
    True: "resnet18:cifar10:16;convnext_tiny:cifar10:16",
    False: (
        "resnet18:cifar10:32;convnext_tiny:cifar10:32;efficientnet_v2_s:cifar10:16;wide_resnet101_2:cifar10:16;"
        "wide_mlp:cifar10:16"
    ),
}
TORCHRUN_OPTIONS = ("nnodes", "node_rank", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "master_addr", "master_port")


def make_settings(
    *,
    nproc_per_node: int,
    quick: bool,
    time_budget: float | None,
    output: str | None,
    name: str | None = None,
    gpu: str | None = None,
    stages: tuple[str, ...] = STAGES,
    profile_models: str | None = None,
    collective_passes: int | None = None,
    compute_models: str | None = None,
    **torchrun: Any,
) -> dict[str, Any]:
    if nproc_per_node < 1:
        raise SimdlError(f"--nproc-per-node {nproc_per_node}: must be >= 1")
    budget = DEFAULT_BUDGET[quick] if time_budget is None else float(time_budget)
    if budget <= 0:
        raise SimdlError(f"--time-budget {time_budget}: must be > 0 seconds")
    if collective_passes is not None and collective_passes < 1:
        raise SimdlError(f"--collective-passes {collective_passes}: must be >= 1 (passes over the size grid)")
    models, held = COMPUTE_MODELS[quick]
    if compute_models:
        # The caller's fit set, the last model held out (predicted, never fitted) when there are two or more.
        chosen = parse_profile_models(compute_models, "--compute-models")
        models = ";".join(f"{m}:{d}:{','.join(map(str, b))}" for m, d, b in chosen)
        held = [chosen[-1][0]] if len(chosen) > 1 else []
    extra = parse_profile_models(profile_models)
    # The strategy stage's models: the compute stage profiles them at the same batch sizes,
    # so that the strategy fit sees the communication, not the compute model's error.
    strategy_models = STRATEGY_MODELS[quick]
    if "strategies" in stages or not compute_models:
        extra += [(m, d, [int(b)]) for m, d, b in (x.rsplit(":", 2) for x in strategy_models.split(";"))]
    return {
        "nproc_per_node": int(nproc_per_node),
        "quick": bool(quick),
        "time_budget_s": budget,
        "output": output,
        "name": name,
        "gpu": gpu,
        "stages": list(stages),
        "compute_models": ";".join([models] + [f"{m}:{d}:{','.join(map(str, b))}" for m, d, b in extra]),
        "compute_held_out": held,
        # How many leading --models entries the compute stage measures before its microbenchmarks.
        "compute_fit_models": len(models.split(";")),
        # Models profiled for their own predictions only (compute profiles), kept out of the
        # generic compute fit so that its held-out check stays a check.
        "compute_profile_only": sorted({m for m, _, _ in extra} - {item.split(":")[0] for item in models.split(";")}),
        "strategy_models": strategy_models,
        # None: calibration/collectives.py's default (7, --quick 3). More passes narrow each
        # size's 25th percentile on a noisy host (bootstrap SE ~6 % at 7 passes here).
        "collective_passes": None if collective_passes is None else int(collective_passes),
        "torchrun": {k: v for k, v in torchrun.items() if k in TORCHRUN_OPTIONS and v is not None},
    }


def parse_profile_models(spec: str | None, flag: str = "--profile-models") -> list[tuple[str, str, list[int]]]:
    """``model:dataset:b1,b2;...`` -> [(model, dataset, [b1, b2])] (``--profile-models``, or
    the option named by ``flag`` in errors)."""
    if not spec:
        return []
    from ..workload.datasets import get_dataset
    from ..workload.zoo import check_model_name

    out = []
    for item in spec.split(";"):
        parts = item.strip().rsplit(":", 2)
        if len(parts) != 3:
            raise SimdlError(f"{flag} {item!r}: accepted: MODEL:DATASET:B1,B2[;...] (e.g. vgg16:cifar10:24,48)")
        model, dataset, batches = parts
        check_model_name(model)
        get_dataset(dataset)
        try:
            bs = sorted({int(b) for b in batches.split(",")})
        except ValueError:
            raise SimdlError(f"{flag} {item!r}: batch sizes must be integers, got {batches!r}") from None
        if not bs or bs[0] < 2:
            raise SimdlError(f"{flag} {item!r}: batch sizes must be >= 2 (BatchNorm in training)")
        out.append((model, dataset, bs))
    return out


# What a resumed run reads of run.json (written by make_settings), with the type each must have.
_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "nproc_per_node": int,
    "quick": bool,
    "time_budget_s": (int, float),
    "stages": list,
    "torchrun": dict,
    "compute_models": str,
}


def read_run_settings(path: Path) -> dict[str, Any]:
    """run.json as written by :func:`make_settings`; one-line :class:`SimdlError` when it is
    empty, not JSON, or not shaped as that function writes it (a file edited or torn)."""
    where = f"--resume {path.parent}: {path.name}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SimdlError(f"{where} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if not text.strip():
        raise SimdlError(f"{where} is empty; start a new run (simdl calibrate --nproc-per-node P)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SimdlError(f"{where} is not valid JSON (line {e.lineno}: {e.msg}); start a new run") from None
    if not isinstance(data, dict):
        raise SimdlError(f"{where} holds a JSON {type(data).__name__}, not the run's settings; start a new run")
    for key, kind in _SETTING_TYPES.items():
        v = data.get(key)
        if key not in data or isinstance(v, bool) and kind is not bool or not isinstance(v, kind):
            raise SimdlError(f"{where}: {key} = {str(v)[:60]!r} is not what simdl calibrate writes; start a new run")
    bad = [st for st in data["stages"] if st not in STAGES]
    if bad or data["nproc_per_node"] < 1 or not 0 < data["time_budget_s"] < float("inf"):
        raise SimdlError(
            f"{where}: stages {data['stages']!r}, nproc_per_node {data['nproc_per_node']!r} or "
            f"time_budget_s {data['time_budget_s']!r} out of range; start a new run"
        )
    return data
