"""Every training throughput in published_hardware.md section 3 predicted from simdl's presets.

Published side: NVIDIA DeepLearningExamples (PyTorch/Classification/ConvNets, resnet50v1.5
and efficientnet READMEs, images/s on one GPU), as quoted in
/work/shared/data/published_hardware.md section 3 (rows copied into :data:`ROWS`).
Predicted side: ``simdl.predict`` on the preset named per row, one GPU, DDP (no
communication on one rank), the analytic engine. The GPU kernel model behind the
prediction is fitted on the NeuSight kernels (benchmarks/gpu_kernels.py), except the values
of :data:`SOLVED`, each solved on one row here (``--solve``; those rows are marked and left
out of the MAPE). The cluster presets' older ``matmul*`` efficiencies, once solved on three
of these rows (column ``fit``: "old fit"), no longer price GPU rows, so those rows count.

Each row's setting, where the source does not state it, is an assumption printed in the
``assumed`` column: per-GPU batch from configs.yml (DGXA100: resnet50 256/256,
efficientnet-b0 256/256, -b4 AMP 128 / TF32 64; DGX1V resnet50 FP32 112 / AMP 256;
DGX1V-16G at configs.yml@0fadac23: efficientnet-b0 AMP 128 / FP32 64, -b4 AMP 32 / FP32 16,
the platform of the efficientnet README's DGX-1 16GB scripts,
``efficientnet/training/<AMP|FP32>/DGX1V-16G_efficientnet-b0_*.sh``; its benchmark
commands' ``--platform DGX1V`` has no EfficientNet entry there, and launch.py indexes the
entry directly), B4 at 380 px (EfficientNet's B4 resolution, Tan & Le 2019, Table 1 of the
compound-scaling rule; the README's table does not restate it), DataLoader workers as
configs.yml's platform entries (DGXA100 16, DGX1V 8). The ``widese`` EfficientNets (wide
squeeze-excitation) have no torchvision model and are listed as not predicted.

Memory format per row (column ``format``, :func:`memory_format`): the 21.03 rows and the
2021-03-04 ResNet-50 rows were run by ``launch.py --mode benchmark_training`` (the READMEs'
benchmark commands), which takes configs.yml's entry; every AMP entry there sets
``memory_format: nhwc`` (``torch.channels_last``: configs.yml@097c7ff9 for resnet50,
@0fadac23 for the EfficientNets, DGXA100 and DGX1V-16G alike; the efficientnet README: "We
use NHWC data layout when training using Mixed Precision"), no FP32/TF32 entry does, and
main.py's ``--memory-format`` defaults to ``nchw`` (contiguous). The 2020-10-21 rows were run by
``main.py`` without ``--memory-format`` (README@90610830: "We are currently working on adding
NHWC data layout support for Mixed Precision training"): contiguous.

Usage: ``PYTHONPATH=. python benchmarks/published_throughput.py [--ratios] [--solve]``;
``--ratios`` also prints simdl's FSDP/DDP step ratio per study-1 model on 2 and 4 A100s;
``--solve`` re-solves :data:`SOLVED` and writes the values into the GPU files (run after
``benchmarks/gpu_kernels.py --write-yaml``).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from simdl import predict

PRECISION = {"TF32": "tf32", "AMP": "fp16-amp", "FP32": "fp32"}
MODEL = {
    "resnet50": ("resnet50", "imagenet", None),
    "efficientnet-b0": ("torchvision.models:efficientnet_b0", None, "3x224x224"),
    "efficientnet-b4": ("torchvision.models:efficientnet_b4", None, "3x380x380"),
}
CLUSTER = {
    "DGX A100 (8x A100 80GB)": ("dgx-a100", 16),
    "A100 80GB (DGX A100 nodes)": ("dgx-a100", 16),
    "DGX A100 (8x A100 40GB)": ("a100-40gb-2node", 16),
    "DGX-1 (8x V100 16GB)": ("v100-dgx1", 8),
    "DGX-1 (8x V100 32GB)": ("v100-dgx1", 8),
}
# (model, system, precision, published images/s, batch, batch source, used in an old fit)
ROWS = (
    ("resnet50", "DGX A100 (8x A100 80GB)", "TF32", 938, 256, "configs.yml", "tf32"),
    ("resnet50", "DGX A100 (8x A100 80GB)", "AMP", 2470, 256, "configs.yml", True),
    ("resnet50", "DGX A100 (8x A100 80GB)", "TF32", 945, 256, "configs.yml", False),
    ("resnet50", "DGX A100 (8x A100 80GB)", "AMP", 2461, 256, "configs.yml", False),
    ("resnet50", "DGX A100 (8x A100 40GB)", "TF32", 680.15, 256, "assumed as 80GB", False),
    ("resnet50", "DGX A100 (8x A100 40GB)", "AMP", 1240.81, 256, "assumed as 80GB", False),
    ("resnet50", "DGX-1 (8x V100 16GB)", "FP32", 367, 112, "configs.yml", True),
    ("resnet50", "DGX-1 (8x V100 16GB)", "AMP", 1200, 256, "configs.yml", False),
    ("resnet50", "DGX-1 (8x V100 32GB)", "FP32", 356, 112, "configs.yml", False),
    ("resnet50", "DGX-1 (8x V100 32GB)", "AMP", 1156, 256, "configs.yml", False),
    ("resnet50", "DGX-1 (8x V100 16GB)", "FP32", 373.21, 112, "configs.yml", False),
    ("resnet50", "DGX-1 (8x V100 16GB)", "AMP", 856.52, 256, "configs.yml", False),
    ("efficientnet-b0", "A100 80GB (DGX A100 nodes)", "TF32", 1078, 256, "configs.yml", "low_reuse"),
    ("efficientnet-b0", "A100 80GB (DGX A100 nodes)", "AMP", 2489, 256, "configs.yml", False),
    ("efficientnet-b4", "A100 80GB (DGX A100 nodes)", "TF32", 157, 64, "configs.yml", False),
    ("efficientnet-b4", "A100 80GB (DGX A100 nodes)", "AMP", 331, 128, "configs.yml", False),
    ("efficientnet-widese-b0", "A100 80GB (DGX A100 nodes)", "TF32", 1078, 256, "configs.yml", False),
    ("efficientnet-widese-b0", "A100 80GB (DGX A100 nodes)", "AMP", 2512, 256, "configs.yml", False),
    ("efficientnet-widese-b4", "A100 80GB (DGX A100 nodes)", "TF32", 157, 64, "configs.yml", False),
    ("efficientnet-widese-b4", "A100 80GB (DGX A100 nodes)", "AMP", 331, 128, "configs.yml", False),
    ("efficientnet-b0", "DGX-1 (8x V100 16GB)", "FP32", 655, 64, "configs.yml", "low_reuse_v100"),
    ("efficientnet-b0", "DGX-1 (8x V100 16GB)", "AMP", 1301, 128, "configs.yml", False),
    ("efficientnet-b4", "DGX-1 (8x V100 16GB)", "FP32", 83, 16, "configs.yml", False),
    ("efficientnet-b4", "DGX-1 (8x V100 16GB)", "AMP", 204, 32, "configs.yml", False),
)
# Rows of the 2020-10-21 README (resnet50v1.5/README.md@90610830): older container, slower
# software on the same GPUs (its A100 AMP row is half the 21.03 one).
OLD_README = (680.15, 1240.81, 373.21, 856.52)
# (memory format, source key) by precision, as the rows' runs set it (module docstring), and
# the sources the table's legend prints.
FORMAT_CONFIGS = {"AMP": ("channels_last", "c"), "TF32": ("contiguous", "d"), "FP32": ("contiguous", "d")}
FORMAT_2020 = ("contiguous", "r")
FORMAT_SOURCES = {
    "c": "configs.yml AMP entries: memory_format: nhwc (resnet50 @097c7ff9, efficientnet @0fadac23), run by launch.py",
    "d": "configs.yml FP32/TF32 entries set none; main.py --memory-format defaults to nchw",
    "r": "README@90610830: main.py without --memory-format; 'working on adding NHWC ... for Mixed Precision'",
}
STUDY1 = (
    "vgg16",
    "resnet18",
    "resnet50",
    "densenet121",
    "mobilenet_v3_large",
    "efficientnet_v2_s",
    "efficientnet_v2_l",
    "convnext_tiny",
    "vit_b_16",
)


def memory_format(precision: str, published: float) -> tuple[str, str]:
    """(memory format, its :data:`FORMAT_SOURCES` key) of the run behind a published row."""
    return FORMAT_2020 if published in OLD_README else FORMAT_CONFIGS[precision]


def predicted(model: str, system: str, precision: str, batch: int, published: float) -> tuple[float, dict]:
    name, dataset, shape = MODEL[model]
    cluster, workers = CLUSTER[system]
    r = predict(
        name,
        "ddp",
        1,
        cluster=cluster,
        dataset=dataset,
        input_shape=shape,
        num_classes=1000 if shape else None,
        batch_size=batch,
        precision=PRECISION[precision],
        memory_format=memory_format(precision, published)[0],
        loader_workers=workers,
    )
    return batch / r.iteration_time_s, r.step_split_s


def table() -> None:
    print(
        "model | system | precision | format | batch | published img/s | simdl img/s | error | fit | host_bound share"
    )
    errs, errs_eff, software = [], [], []
    for model, system, prec, pub, batch, bsrc, fit in ROWS:
        fmt = "{} [{}]".format(*memory_format(prec, pub))
        if model not in MODEL:
            print(
                f"{model} | {system} | {prec} | {fmt} | {batch} | {pub:g} | not predicted (no torchvision model) | | |"
            )
            continue
        ips, split = predicted(model, system, prec, batch, pub)
        e = ips / pub - 1
        if fit not in SOLVED:  # the rows a value of the prediction was solved on
            errs.append(e)
            software.append(bsrc != "assumed as 80GB" and pub not in OLD_README)
            if model.startswith("efficientnet"):
                errs_eff.append(e)
        hb = split.get("host_bound", 0.0) / max(sum(split.values()), 1e-12)
        print(
            f"{model} | {system} | {prec} | {fmt} | {batch} ({bsrc}) | {pub:g} | {ips:,.0f} | {100 * e:+.1f} % | "
            f"{'solved on (excluded)' if fit in SOLVED else 'old fit' if fit else ''} | {100 * hb:.0f} %"
        )
    a = np.abs(errs)
    print("\nformat: " + "; ".join(f"[{k}] {v}" for k, v in FORMAT_SOURCES.items()))
    print(
        f"MAPE over {len(a)} predicted rows no fit used: {100 * a.mean():.1f} % (max {100 * a.max():.1f} %); "
        f"EfficientNet rows: {100 * np.abs(errs_eff).mean():.1f} % over {len(errs_eff)}; "
        f"ResNet-50 rows: {100 * np.abs(errs[: len(errs) - len(errs_eff)]).mean():.1f} %"
    )
    same = np.abs([e for e, sw in zip(errs, software) if sw])
    print(
        f"of which the {len(same)} rows measured with the 21.03 container (the others: 2020 READMEs, older "
        f"software): MAPE {100 * same.mean():.1f} % (max {100 * same.max():.1f} %)"
    )


def ratios() -> None:
    print("\nFSDP / DDP iteration time, study-1 models, CIFAR-10, batch 32 per GPU, a100-80gb-nvlink (fp32)")
    print(
        "FSDP-DDP: the 4-GPU difference; per unit: that difference over FSDP's units (block wrap); "
        "host: step_split_s host (framework host work the device waited for), 4 GPUs"
    )
    print(
        "model | 2 GPUs | 4 GPUs | units | params | FSDP-DDP ms | per unit ms | host DDP ms | host FSDP ms "
        "| host_bound share of the DDP step (4 GPUs)"
    )
    for m in STUDY1:
        cells = []
        for g in (2, 4):
            d = predict(m, "ddp", g)
            f = predict(m, "fsdp", g)
            cells.append(f"{f.iteration_time_s / d.iteration_time_s:.2f}")
        units = f.config.get("units") or _units(m)
        diff = f.iteration_time_s - d.iteration_time_s
        hb = d.step_split_s.get("host_bound", 0.0) / max(sum(d.step_split_s.values()), 1e-12)
        print(
            f"{m} | {cells[0]} | {cells[1]} | {units} | {_params(m)} | {1e3 * diff:.1f} | {1e3 * diff / units:.2f} "
            f"| {1e3 * d.step_split_s['host']:.1f} | {1e3 * f.step_split_s['host']:.1f} | {100 * hb:.0f} %"
        )


def _units(model: str) -> int:
    from simdl.strategies.fsdp_units import fsdp_units
    from simdl.workload.library import load_workload

    return len(fsdp_units(load_workload(model, dataset="cifar10"), "block").units)


def _params(model: str) -> int:
    from simdl.workload.library import load_workload

    return len(load_workload(model, dataset="cifar10").params)


# The values solved on published rows (and the rows, excluded from the MAPE): the depthwise
# bandwidth fraction on EfficientNet-B0 (no depthwise kernel is in the measured data), on
# the A100 (TF32 row; used by every Ampere/Hopper file) and on the V100 (FP32 row;
# V100-SXM2 only), and the TF32 tensor-core scale on ResNet-50 TF32 (no TF32
# kernel in the data either).
SOLVED = {
    "low_reuse": ("efficientnet-b0", "A100 80GB (DGX A100 nodes)", "TF32", 1078, 256),
    "low_reuse_v100": ("efficientnet-b0", "DGX-1 (8x V100 16GB)", "FP32", 655, 64),
    "tf32": ("resnet50", "DGX A100 (8x A100 80GB)", "TF32", 938, 256),
}
GPU_FILES = ("A100-PCIe-80GB", "V100-SXM2", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM", "A10G", "H200", "H100-PCIe")


def _with(base, low_reuse: float, tf32: float):
    import dataclasses

    k = base.gpu.kernels
    scale = dict(k.tensor_scale, tf32=tf32)
    k = dataclasses.replace(k, low_reuse_fraction=low_reuse, tensor_scale=tuple(sorted(scale.items())))
    return dataclasses.replace(base, gpu=dataclasses.replace(base.gpu, kernels=k))


def _ips(row, spec) -> float:
    model, system, prec, pub, batch = row
    name, dataset, shape = MODEL[model]
    r = predict(
        name,
        "ddp",
        1,
        cluster=spec,
        dataset=dataset,
        input_shape=shape,
        num_classes=1000 if shape else None,
        batch_size=batch,
        precision=PRECISION[prec],
        memory_format=memory_format(prec, pub)[0],
        loader_workers=CLUSTER[system][1],
    )
    return batch / r.iteration_time_s


def _bisect(f, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] (log scale) where the increasing-in-x throughput f(x) meets target."""
    lo, hi = np.log(lo), np.log(hi)
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(np.exp(mid)) < target else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def solve() -> tuple[float, float]:
    """Solve the values (the A100's two alternating: each row depends on both a little) and
    write them into every GPU file's kernels block."""
    from pathlib import Path

    from simdl.cluster import load_cluster

    base = load_cluster("dgx-a100")
    low, tf32 = 1.0, 1.0
    for _ in range(3):
        tf32 = _bisect(lambda x: _ips(SOLVED["tf32"], _with(base, low, x)), SOLVED["tf32"][3], 0.05, 2.0)
        low = _bisect(lambda x: _ips(SOLVED["low_reuse"], _with(base, x, tf32)), SOLVED["low_reuse"][3], 0.005, 1.5)
    v100 = load_cluster("v100-dgx1")
    row = SOLVED["low_reuse_v100"]
    low_v = _bisect(lambda x: _ips(row, _with(v100, x, tf32)), row[3], 0.005, 1.5)
    why = (
        "solved so that simdl's {0} at batch {4}, {2}, on one {1} GPU reproduces the published {3} img/s "
        "(published_hardware.md s.3, DeepLearningExamples README) by benchmarks/published_throughput.py --solve; "
        "that row is excluded from the table's MAPE"
    )
    for g in GPU_FILES:
        path = Path(__file__).parent.parent / "simdl" / "cluster" / "data" / "gpus" / f"{g}.yaml"
        lines = [ln for ln in path.read_text().splitlines() if not ln.startswith(("  low_reuse:", "  tensor_core:"))]
        key, f = ("low_reuse_v100", low_v) if g == "V100-SXM2" else ("low_reuse", low)
        lines.append(f'  low_reuse: {{fraction: {f:.4g}, kind: calibrated, source: "{why.format(*SOLVED[key])}"}}')
        lines.append(f'  tensor_core: {{tf32: {tf32:.4g}, kind: calibrated, source: "{why.format(*SOLVED["tf32"])}"}}')
        path.write_text("\n".join(lines) + "\n")
    print(
        f"low_reuse fraction {low:.4g} (V100 {low_v:.4g}), tf32 tensor-core scale {tf32:.4g} written to "
        f"{len(GPU_FILES)} GPU files"
    )
    return low, tf32


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", action="store_true")
    ap.add_argument("--solve", action="store_true", help="solve and write the two values solved on published rows")
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    if args.solve:
        solve()
        return
    table()
    if args.ratios:
        ratios()
    print(
        f"\nwall {time.perf_counter() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s, "
        f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (host shared)"
    )


if __name__ == "__main__":
    main()
