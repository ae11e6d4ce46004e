"""Make this folder's compact copy of the NeuSight kernel latencies (see README.md).

Reads the shared copy (``<device>/<op>.csv.gz`` as published, MIT) and writes one xz CSV
per operator family with only what simdl's kernel model uses: device, operator, shape,
latency (microseconds) and the main kernel's family. Run once; the output is committed.
"""

import csv
import gzip
import lzma
import re
import sys
from pathlib import Path

FAMILIES = {
    "gemm": ("linear", "bmm"),
    "conv": ("conv",),
    "elementwise": ("add", "addu", "div", "divu", "mul", "mulu", "pow", "powu", "relu", "gelu", "tanh"),
    "norm": ("ln",),
    "softmax": ("softmax",),
}
SHAPES = {
    "gemm": ("B", "M", "N", "K"),
    "conv": ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"),
    "elementwise": ("B", "H"),
    "norm": ("B", "H"),
    "softmax": ("B", "H"),
}
HEAD = {"Input_Channel": "Cin", "Output_Channel": "Cout", "Kernel_Szie": "R", "Input_Size": "HW"}


def kernel_family(name: str) -> str:
    """A short name for the main kernel: sgemm tile, winograd, implicit, fft, ... ."""
    low = name.lower()
    m = re.search(r"sgemm_(\d+x\d+)", low)
    if m:
        return "sgemm_" + m.group(1)
    for key in ("winograd", "implicit", "fft", "gcgemm", "scudnn", "s1688", "elementwise", "layer_norm", "softmax"):
        if key in low:
            return key
    return "other"


def main(src: Path, dst: Path) -> None:
    for fam, ops in FAMILIES.items():
        cols = SHAPES[fam]
        with lzma.open(dst / f"{fam}.csv.xz", "wt", newline="") as out:
            w = csv.writer(out)
            w.writerow(["device", "op", *(HEAD.get(c, c) for c in cols), "latency_us", "kernel"])
            for dev in sorted(p for p in src.iterdir() if p.is_dir()):
                for op in ops:
                    f = dev / f"{op}.csv.gz"
                    if not f.exists():
                        continue
                    with gzip.open(f, "rt") as g:
                        for r in csv.DictReader(g):
                            lat_us = float(r["Latency"]) * 1e3
                            w.writerow(
                                [
                                    dev.name,
                                    op,
                                    *(int(float(r[c])) for c in cols),
                                    f"{lat_us:.4g}",
                                    kernel_family(r["Kernel Name"]),
                                ]
                            )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/data/gpu_kernels_neusight"), Path(__file__).parent)
