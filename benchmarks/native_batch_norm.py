"""ATen's native CUDA BatchNorm kernels against the H200's profiled ones: fit their rates on one
configuration, check them on the others.

``python benchmarks/native_batch_norm.py [--fit RUN_ID] [--records lab/records/gpu-h200]``

Under bf16 autocast BatchNorm runs ATen's native kernels, not cuDNN's (simdl.hosts.cuda
native_batch_norm). The kernel profiles (kernels.jsonl.gz: torch.profiler, one step of each
configuration, seconds per kernel name) give three sums per bf16 configuration:
batch_norm_collect_statistics_kernel, batch_norm_transform_input_kernel and
batch_norm_backward_kernel. simdl prices each BatchNorm row of the shipped workload table by
:func:`simdl.costs.gpu_rows.native_batch_norm_times`; its three rates (the statistics and
backward kernels' bytes per second per thread block, the transform kernel's fraction of the
norm rate) are solved, each by bisection, so that the fit configuration's three sums come
out; the table prints every configuration's sums measured and predicted, the fit's marked.
The fp32 rows print cuDNN's BatchNorm kernels (cudnn::bn_*) beside the bytes they move, for
comparison. ``--write-yaml`` prints the ``native_batch_norm`` line of the GPU file.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
from pathlib import Path

import numpy as np

from simdl.cluster import load_gpu
from simdl.costs.gpu_profile import NativeBatchNorm
from simdl.costs.gpu_rows import native_batch_norm_times
from simdl.workload.library import load_workload

RECORDS = Path(__file__).resolve().parents[1] / "lab" / "records" / "gpu-h200"
FIT = "gpu/resnet50/224px/b32/bf16"
KERNELS = {
    "stats": "batch_norm_collect_statistics_kernel",
    "transform": "batch_norm_transform_input_kernel",
    "backward": "batch_norm_backward_kernel",
}
DATASET = {"224px": "imagenet", "32px": "cifar10"}


def measured(records: Path) -> dict[str, dict[str, float]]:
    """{run id: {kernel: seconds}} of the bf16 configurations with native BatchNorm kernels."""
    out = {}
    with gzip.open(records / "kernels.jsonl.gz", "rt") as f:
        for line in f:
            r = json.loads(line)
            sums = {k: sum(x[2] for x in r["kernels"] if name in x[0]) for k, name in KERNELS.items()}
            if sums["stats"] > 0:
                out[r["run_id"]] = sums
    return out


def bn_rows(run_id: str):
    """(input bytes, output bytes, channels) of the configuration's BatchNorm rows at 2 bytes."""
    _, model, px, b, _ = run_id.split("/")
    t = load_workload(model, DATASET[px])
    bn = np.array([x.startswith("BatchNorm") for x in t.types]) & (t.fixed["params"] > 0)
    batch = int(b[1:])
    half = 2.0 / t.dtype_bytes
    return (
        t.per_sample["read_bytes"][bn] * batch * half,
        t.per_sample["write_bytes"][bn] * batch * half,
        t.fixed["params"][bn] / 2,
    )


def predicted(profile, rows) -> dict[str, float]:
    times = native_batch_norm_times(profile, *rows)
    return {k: float(t.sum()) for k, t in zip(KERNELS, times)}


def fit(profile, rows, target: dict[str, float]) -> NativeBatchNorm:
    """The three rates that reproduce ``target``, each by bisection on a log scale."""
    nb = profile.native_batch_norm
    for key, field in (
        ("stats", "stats_block_bandwidth"),
        ("transform", "transform_fraction"),
        ("backward", "backward_block_bandwidth"),
    ):
        lo, hi = (1e6, 1e12) if field != "transform_fraction" else (1e-3, 1.5)
        for _ in range(80):
            mid = (lo * hi) ** 0.5
            trial = dataclasses.replace(profile, native_batch_norm=dataclasses.replace(nb, **{field: mid}))
            if predicted(trial, rows)[key] > target[key]:
                lo = mid
            else:
                hi = mid
        nb = dataclasses.replace(nb, **{field: (lo * hi) ** 0.5})
    return nb


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/native_batch_norm.py", description=__doc__.splitlines()[0])
    p.add_argument("--fit", default=FIT, help="the run id the rates are solved on")
    p.add_argument("--records", default=str(RECORDS), help="a validate.gpu_check folder with kernels.jsonl.gz")
    p.add_argument("--write-yaml", action="store_true", help="print the GPU file's native_batch_norm line")
    a = p.parse_args(argv)
    meas = measured(Path(a.records))
    profile = load_gpu("H200").kernels
    start = NativeBatchNorm(1e9, 1e9, 1.0, "calibrated", "")
    profile = dataclasses.replace(profile, native_batch_norm=start)
    nb = fit(profile, bn_rows(a.fit), meas[a.fit])
    profile = dataclasses.replace(profile, native_batch_norm=nb)
    print(
        f"fitted on {a.fit}: statistics {nb.stats_block_bandwidth / 1e9:.3f} GB/s per block, backward "
        f"{nb.backward_block_bandwidth / 1e9:.3f} GB/s per block, transform {nb.transform_fraction:.4f} of the norm rate"
    )
    print(f"{'configuration':40s} {'stats ms meas/pred':>20s} {'transform ms':>16s} {'backward ms':>16s}  total err")
    errs: dict[str, list[float]] = {}
    for rid, m in meas.items():
        pr = predicted(profile, bn_rows(rid))
        e = sum(pr.values()) / sum(m.values()) - 1
        if rid != a.fit:
            errs.setdefault(rid.split("/")[2], []).append(e)
        cells = " ".join(f"{m[k] * 1e3:7.2f}/{pr[k] * 1e3:7.2f}" for k in KERNELS)
        print(f"{rid:40s} {cells}  {100 * e:+6.1f} %{'  (fit)' if rid == a.fit else ''}")
    for px, e in sorted(errs.items()):
        print(
            f"held out, {px}: native BatchNorm kernel time MAPE {100 * statistics.fmean(abs(x) for x in e):.1f} % over {len(e)}"
        )
    if a.write_yaml:
        print(
            f"  native_batch_norm: {{stats_block_GB_per_s: {nb.stats_block_bandwidth / 1e9:.4g}, backward_block_GB_per_s: "
            f"{nb.backward_block_bandwidth / 1e9:.4g}, transform_fraction: {nb.transform_fraction:.4g}, kind: calibrated, "
            f'source: "benchmarks/native_batch_norm.py --fit {a.fit}"}}'
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
