"""Kernel-level check of simdl's GPU kernel model on measured latencies it was not fitted to.

Data: benchmarks/data/gpu_kernels_neusight (NeuSight, MIT; five GPUs, fp32 forward kernels,
one operator call per row). Two checks, each printing MAPE and max |error| per op class
and per GPU:

1. held-out GPU: for each of the five GPUs, its values are the geometric mean of the other
   four GPUs' fitted values (each a fraction of its own datasheet peaks, or seconds,
   :func:`simdl.costs.kernel_fit.mean_params`), and it predicts every row of the fifth; a
   second table takes instead the values of the measured GPU nearest in architecture
   (:data:`NEAREST`), the rule simdl's GPU files without rows follow;
2. held-out shapes: each GPU is fitted on 80 % of its rows (numpy seed 0) and predicts the
   other 20 %.

Batched GEMMs (bmm rows with B > 1) choose among the tiles that the GPU's own batched rows
ran (their ``kernel`` column, :func:`kernel_rows.batched_tiles`: of the fitted rows only in
check 2): cuBLAS's strided-batched sgemm ran one tile on the A100 (128x128) and on the P100
and P4 (128x64), three or four on the V100 and T4, while its single-product heuristics pick
among all. A held-out GPU's batched rows choose among the tiles its measured
same-architecture peers' batched rows ran (:data:`ARCH`: the P100 and P4), else among all of
:data:`simdl.costs.gpu_kernels.TILES` (its library's choice is not known without its rows).
simdl itself prices single products only (B = 1, :mod:`simdl.costs.gpu_rows`).

``--yaml``: also print the ``kernels:`` block of each GPU fitted on all its rows (what the
GPU YAMLs under simdl/cluster/data/gpus carry). Usage:
``PYTHONPATH=. python benchmarks/gpu_kernels.py [--yaml]``
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from kernel_power import held_out_gpu_sustained  # noqa: E402
from kernel_rows import GPUS, batched_tiles, hardware, load, subset  # noqa: E402

from simdl.costs.gpu_kernels import GEMM_CLASSES  # noqa: E402
from simdl.costs.kernel_fit import KernelFit, mean_params  # noqa: E402

SEED = 0
TRAIN_FRACTION = 0.8
TARGET_MAPE = 15.0


def kind(cls: str) -> str:
    return cls if cls in GEMM_CLASSES else "stream"


def estimator(data: dict, gpu: str, cls: str, mask=None) -> KernelFit:
    """The class's estimator on ``gpu``; a GEMM one prices batched calls with the tiles that
    ``gpu``'s batched rows ran (``mask``: of those rows only)."""
    if cls != "gemm":
        return KernelFit(kind(cls))
    return KernelFit("gemm", batched_tiles=batched_tiles(data[(gpu, cls)], mask))


# SM architecture of each measured GPU (NVIDIA's architecture whitepapers: GA100 Ampere,
# GV100 Volta, TU104 Turing, GP100 and GP104 Pascal): cuBLAS's kernel heuristics are per
# architecture, so a held-out GPU's batched calls take the tiles its same-architecture peers'
# batched rows ran, or all of TILES when none was measured.
ARCH = {"A100-PCIe": "Ampere", "V100-PCIe": "Volta", "T4": "Turing", "P100-PCIe": "Pascal", "P4": "Pascal"}


def held_out_estimator(data: dict, gpu: str, cls: str) -> KernelFit:
    """The estimator that prices a held-out ``gpu``'s rows: batched tiles from its peers."""
    peers = [g for g in GPUS if g != gpu and ARCH[g] == ARCH[gpu] and (g, cls) in data]
    if cls != "gemm" or not peers:
        return KernelFit(kind(cls))
    return KernelFit("gemm", batched_tiles=tuple(sorted({t for g in peers for t in batched_tiles(data[(g, cls)])})))


def errors(fit: KernelFit, params, d: dict) -> np.ndarray:
    pred = fit.predict_with(params, d["shapes"], hardware(d["device"][0]))
    return pred / d["seconds"] - 1.0


def fit_all(data: dict) -> dict:
    out = {}
    for (gpu, cls), d in data.items():
        out[(gpu, cls)] = estimator(data, gpu, cls).fit(d["shapes"], d["seconds"], hardware(d["device"][0]))
    return out


def held_out_gpu(data: dict, fits: dict) -> dict:
    res = {}
    for (gpu, cls), d in data.items():
        others = [fits[(g, cls)].params_ for g in GPUS if g != gpu and (g, cls) in fits]
        res[(gpu, cls)] = errors(held_out_estimator(data, gpu, cls), mean_params(others), d)
    return res


# The measured GPU nearest in architecture to each (SM generation; the rule simdl's GPU files
# without rows use: A100-SXM4, H100 and A10G take the A100's values).
NEAREST = {"A100-PCIe": "V100-PCIe", "V100-PCIe": "A100-PCIe", "T4": "V100-PCIe", "P100-PCIe": "P4", "P4": "P100-PCIe"}


def held_out_gpu_nearest(data: dict, fits: dict) -> dict:
    return {
        (gpu, cls): errors(held_out_estimator(data, gpu, cls), fits[(NEAREST[gpu], cls)].params_, d)
        for (gpu, cls), d in data.items()
        if (NEAREST[gpu], cls) in fits
    }


def held_out_shapes(data: dict) -> dict:
    res = {}
    rng = np.random.default_rng(SEED)
    for (gpu, cls), d in sorted(data.items()):
        train = rng.random(len(d["seconds"])) < TRAIN_FRACTION
        tr, te = subset(d, train), subset(d, ~train)
        f = estimator(data, gpu, cls, train).fit(tr["shapes"], tr["seconds"], hardware(d["device"][0]))
        res[(gpu, cls)] = errors(f, f.params_, te)
    return res


def table(title: str, res: dict) -> list[float]:
    classes = sorted({c for _, c in res})
    print(f"\n{title}: MAPE % / max |error| % (rows)")
    print(f"{'GPU':<11}" + "".join(f"{c:>22}" for c in classes))
    for gpu in GPUS:
        cells = []
        for c in classes:
            e = res.get((gpu, c))
            cells.append(
                f"{'-':>22}"
                if e is None
                else f"{100 * np.abs(e).mean():>8.1f} / {100 * np.abs(e).max():>6.0f} ({len(e):>5})"
            )
        print(f"{gpu:<11}" + "".join(cells))
    worst = []
    line = f"{'all GPUs':<11}"
    for c in classes:
        e = np.concatenate([v for (g, cc), v in res.items() if cc == c])
        mape = 100 * np.abs(e).mean()
        worst.append(mape)
        line += f"{mape:>8.1f} / {100 * np.abs(e).max():>6.0f} ({len(e):>5})"
    print(line)
    per_gpu = [100 * np.abs(v).mean() for v in res.values()]
    print(
        f"classes within {TARGET_MAPE:.0f} % MAPE (all GPUs): "
        f"{sum(m <= TARGET_MAPE for m in worst)} of {len(worst)}; GPU x class cells within: "
        f"{sum(m <= TARGET_MAPE for m in per_gpu)} of {len(per_gpu)}"
    )
    return worst


def yaml_blocks(fits: dict) -> None:
    for gpu in GPUS:
        print(f"\n# {gpu}")
        for (g, cls), f in sorted(fits.items()):
            if g != gpu:
                continue
            vals = ", ".join(f"{k}: {v:.4g}" for k, v in f.params_.__dict__.items())
            e = np.abs(np.exp(f.residuals_) - 1)
            print(f"  {cls}: {{{vals}}}  # in-sample MAPE {100 * e.mean():.1f} %, {len(e)} rows")


GPU_DIR = Path(__file__).parent.parent / "simdl" / "cluster" / "data" / "gpus"
# simdl GPU file -> (measured GPU its values come from, kind, SMs and their source).
TARGETS = {
    "A100-PCIe-80GB": ("A100-PCIe", "calibrated", 108, "NeuSight devices/NVIDIA_A100_80GB_PCIe.json: 108 SMs"),
    "V100-SXM2": (
        "V100-PCIe",
        "calibrated",
        80,
        "NVIDIA Tesla V100 datasheet: 80 SMs (NeuSight devices/Tesla_V100-PCIE-32GB.json)",
    ),
    "A100-SXM4-40GB": ("A100-PCIe", "derived", 108, "NeuSight devices/NVIDIA_A100-SXM4-40GB.json: 108 SMs"),
    "A100-SXM4-80GB": ("A100-PCIe", "derived", 108, "same GA100 die as the 40 GB part: 108 SMs"),
    "H100-SXM": ("A100-PCIe", "derived", 132, "NeuSight devices/NVIDIA_H100_80GB_HBM3.json: 132 SMs"),
    "A10G": ("A100-PCIe", "derived", 72, "NVIDIA A10 datasheet: 72 SMs (the A10 proxy this file's peaks use)"),
    "H200": (
        "A100-PCIe",
        "derived",
        132,
        "the H100 SXM5's GH100 configuration, 132 SMs (glennklockwood.com/garden/processors/h100: H200 GPUs are the same as H100 GPUs with HBM3e)",
    ),
    "H100-PCIe": (
        "A100-PCIe",
        "derived",
        114,
        "NVIDIA H100 architecture whitepaper as quoted by mil-ic.com/en/new/new-6-335.html: H100 PCIe 114 SMs per GPU",
    ),
}
DERIVED_WHY = {
    "calibrated": "fitted on {src}'s measured fp32 kernels (benchmarks/data/gpu_kernels_neusight, NeuSight, MIT) "
    "by benchmarks/gpu_kernels.py --write-yaml; efficiencies are fractions of this file's peaks",
    "derived": "no measured kernels for this GPU: {src}'s fitted fractions (benchmarks/gpu_kernels.py --write-yaml, "
    "NeuSight data) applied to this file's datasheet peaks, bandwidth and SM count; the held-out-GPU "
    "check of that rule is the first table benchmarks/gpu_kernels.py prints",
}


def yaml_number(v: float) -> str:
    """4 significant digits as YAML 1.1 reads a float (``2e-06`` alone would be a string)."""
    text = f"{v:.4g}"
    if "e" in text and "." not in text.split("e")[0]:
        text = text.replace("e", ".0e")
    return text


def write_yaml(fits: dict) -> None:
    """Replace the ``kernels:`` block at the end of each :data:`TARGETS` GPU file."""
    for name, (src, kind, sms, sms_source) in TARGETS.items():
        path = GPU_DIR / f"{name}.yaml"
        text = path.read_text()
        cut = text.find("\nkernels:\n")
        if cut >= 0:
            text = text[: cut + 1]
        lines = [
            "kernels:",
            f"  kind: {kind}",
            f'  source: "{DERIVED_WHY[kind].format(src=src)}"',
            f'  sm_count: {{value: {sms}, kind: datasheet, source: "{sms_source}"}}',
        ]
        for cls in ("gemm", "conv", "elementwise", "norm", "softmax"):
            f = fits[(src, cls)]
            vals = ", ".join(f"{k}: {yaml_number(v)}" for k, v in f.params_.__dict__.items())
            e = np.abs(np.exp(f.residuals_) - 1)
            lines.append(f"  {cls}: {{{vals}}}  # {len(e)} rows, in-sample MAPE {100 * e.mean():.1f} %")
        path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n")
        print(f"wrote {path}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yaml", action="store_true", help="print each GPU's fitted kernels block")
    ap.add_argument("--write-yaml", action="store_true", help="rewrite the kernels blocks of the GPU files")
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    data = load()
    fits = fit_all(data)
    table("Held-out GPU (fitted on the other four, geometric mean of their values)", held_out_gpu(data, fits))
    table("Held-out GPU (the values of the measured GPU nearest in architecture)", held_out_gpu_nearest(data, fits))
    table(
        "Held-out GPU (mean rule, GEMM/conv compute at each GPU's sustained share from datasheet power, "
        "benchmarks/kernel_power.py)",
        held_out_gpu_sustained(data, fits, kind, errors, mean_params, lambda g, c: held_out_estimator(data, g, c)),
    )
    table(f"Held-out shapes ({TRAIN_FRACTION:.0%} of each GPU's rows fitted, seed {SEED})", held_out_shapes(data))
    if args.yaml:
        yaml_blocks(fits)
    if args.write_yaml:
        write_yaml(fits)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"\nwall {time.perf_counter() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s "
        f"(user {ru.ru_utime:.1f} s; host shared with other jobs)"
    )


if __name__ == "__main__":
    main()
