"""simdl's predictions of the source studies' experiments exactly as they ran them.

No run here is measured: these are predictions on the built-in presets, for comparison
with the numbers the studies report (origins.md). Every value a study leaves open is an
assumption, listed with the table; the interconnect -- the least certain of them --
is varied in the tables themselves.

Uses only shipped workload tables: no torch needed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..predict import predict

EXP1_MODELS = ("vgg16", "efficientnet_v2_l", "convnext_large")
EXP1_STRATEGIES = (("ddp", None), ("fsdp", "full"), ("fsdp", "grad_op"), ("fsdp", "none"))
EXP1_CLUSTERS = (("a100-80gb-nvlink", "NVLink"), ("a100-80gb-pcie", "PCIe 4.0"))
EXP2_MODELS = ("resnet50", "densenet121", "vgg16")
# Study 1, experiment 2: each mode with the keywords it ran with (SSP with a bound of 3).
EXP2_MODES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ps-sync", {}),
    ("ps-async", {}),
    ("ps-ssp", {"staleness_bound": 3}),
)
EXP2_NICS_Gb = (10, 40, 100)
VIT_MODELS = ("vit_b_32", "vit_b_16")
VIT_BATCHES = (32, 64, 128)
VIT_SHARDINGS = ("full", "hybrid", "none")
VIT_CLUSTERS = (
    ("a100-40gb-2node", "1 NIC/node"),
    ("a100-40gb-2node-2nic", "2 NICs/node"),
    ("a100-40gb-2node-4nic", "4 NICs/node"),
)

ASSUMPTIONS = (
    ("batch size", "32 images per GPU (torchvision references/classification default); study 2's grid: 32/64/128"),
    ("optimizer", "SGD with momentum 0.9 (torchvision reference recipe): one fp32 state copy"),
    ("precision", "fp32, no AMP (torchvision reference default)"),
    ("FSDP wrap policy", "the model's block classes as units (simdl.workload.zoo.DEFAULT_WRAP_TYPES)"),
    ("FSDP implementation", "FSDP2 fully_shard semantics; forward and backward prefetch of one unit"),
    ("data-loader workers", "4 per GPU"),
    (
        "input size",
        "datasets' native sizes: CIFAR-10 32x32 (ViT built with image_size=32), MNIST 28x28 "
        "padded where a model needs it; a study that resized to 224x224 would take far longer",
    ),
    (
        "interconnect (exp. 1)",
        "NVLink between the 4 A100 80 GB (preset a100-80gb-nvlink); PCIe 4.0 (preset a100-80gb-pcie) shown beside",
    ),
    ("interconnect (exp. 2)", "40 Gb/s to the CPU parameter server (preset a10g-ps); 10 and 100 Gb/s shown beside"),
    ("interconnect (study 2)", "one 200 Gb/s NIC per node (preset a100-40gb-2node); 2 and 4 NICs shown beside"),
    ("PS", "one server shard, SSP bound 3"),
)


def _fmt_time(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f}"


def _ps_profiles(tmp: Path) -> list[tuple[str, str]]:
    out = []
    for gb in EXP2_NICS_Gb:
        p = tmp / f"a10g-ps-{gb}g.yaml"
        p.write_text(
            f"extends: a10g-ps\nname: a10g-ps-{gb}g\n"
            f'description: "a10g-ps with a {gb} Gb/s parameter-server NIC (sensitivity variant)"\n'
            f"ps_servers:\n  nic_Gb_per_s:\n    value: {gb}\n    kind: assumed\n"
            f'    source: "sensitivity variant of the assumed 40 Gb/s"\n'
        )
        out.append((str(p), f"{gb} Gb/s"))
    return out


def paper_tables() -> str:
    lines = _assumption_lines() + _exp1_lines() + _exp2_lines() + _vit_lines()
    lines += [
        "",
        "DeepSpeed ZeRO, which study 2 also ran, is the zero0..zero3 strategies (or --deepspeed-config); "
        "benchmarks/zero_vs_fsdp.py sets them beside FSDP on this cluster.",
        "",
    ]
    return "\n".join(lines)


def _assumption_lines() -> list[str]:
    lines = [
        "## simdl's predictions at the source studies' own scale",
        "",
        "Predictions only (no run measured here), analytic engine, built-in presets. "
        "Values the studies do not state are assumptions:",
        "",
        "| open value | assumed |",
        "|---|---|",
    ]
    return lines + [f"| {k} | {v} |" for k, v in ASSUMPTIONS]


def _exp1_lines() -> list[str]:
    """Study 1, experiment 1: each model and strategy on 2 and 4 GPUs over each interconnect."""
    lines = [
        "",
        "### Study 1, experiment 1: CIFAR-10, 10 epochs, 2 and 4 x A100 80 GB",
        "",
        "Total training time (peak memory per GPU in GiB), with the interconnect varied:",
        "",
    ]
    head = "| model | strategy | " + " | ".join(f"{g} GPUs, {lab}" for g in (2, 4) for _, lab in EXP1_CLUSTERS) + " |"
    lines += [head, "|" + "---|" * (2 + 2 * len(EXP1_CLUSTERS))]
    for model in EXP1_MODELS:
        for strategy, sharding in EXP1_STRATEGIES:
            cells = []
            for gpus in (2, 4):
                for cluster, _ in EXP1_CLUSTERS:
                    r = predict(
                        model=model,
                        strategy=strategy,
                        gpus=gpus,
                        cluster=cluster,
                        dataset="cifar10",
                        epochs=10,
                        batch_size=32,
                        sharding=sharding,
                    )
                    cells.append(f"{_fmt_time(r.total_time_s)} ({_gib(r.peak_memory_bytes)})")
            lines.append(f"| {model} | {r.config['label']} | " + " | ".join(cells) + " |")
    return lines + ["", "Hybrid sharding is not listed: experiment 1 ran on one node."]


def _exp2_lines() -> list[str]:
    """Study 1, experiment 2: each model and PS mode with each server NIC."""
    lines = [
        "",
        "### Study 1, experiment 2: MNIST, 100 epochs, 4 x A10G workers + 1 CPU parameter server",
        "",
        "Total training time (mean staleness of an update), with the server's NIC varied:",
        "",
    ]
    with tempfile.TemporaryDirectory() as td:
        profiles = _ps_profiles(Path(td))
        lines += [
            "| model | mode | " + " | ".join(lab for _, lab in profiles) + " |",
            "|" + "---|" * (2 + len(profiles)),
        ]
        for model in EXP2_MODELS:
            for mode, mode_kw in EXP2_MODES:
                cells = []
                for path, _ in profiles:
                    r = predict(
                        model=model,
                        strategy=mode,
                        gpus=4,
                        cluster=path,
                        dataset="mnist",
                        epochs=100,
                        batch_size=32,
                        **mode_kw,
                    )
                    cells.append(f"{_fmt_time(r.total_time_s)} ({r.staleness.mean:.1f})")
                lines.append(f"| {model} | {r.config['label']} | " + " | ".join(cells) + " |")
    return lines + [
        "",
        "simdl predicts no accuracy; the study's lower asynchronous accuracy is put down to the staleness shown here.",
    ]


def _vit_lines() -> list[str]:
    """Study 2: each ViT, sharding and batch size with each number of NICs per node."""
    lines = [
        "",
        "### Study 2: ViT on CIFAR-10, 2 nodes x 4 A100-SXM4 40 GB, 10 epochs",
        "",
        "Throughput in images/s (peak memory per GPU in GiB), with the NICs per node varied:",
        "",
        "| model | sharding | batch/GPU | " + " | ".join(lab for _, lab in VIT_CLUSTERS) + " |",
        "|" + "---|" * (3 + len(VIT_CLUSTERS)),
    ]
    for model in VIT_MODELS:
        for sharding in VIT_SHARDINGS:
            for b in VIT_BATCHES:
                cells = []
                for cluster, _ in VIT_CLUSTERS:
                    r = predict(
                        model=model,
                        strategy="fsdp",
                        gpus=8,
                        cluster=cluster,
                        dataset="cifar10",
                        epochs=10,
                        batch_size=b,
                        sharding=sharding,
                    )
                    cells.append(f"{r.throughput_samples_per_s:,.0f} ({_gib(r.peak_memory_bytes)})")
                lines.append(f"| {model} | {sharding} | {b} | " + " | ".join(cells) + " |")
    return lines
