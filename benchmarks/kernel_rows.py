"""Read the compact NeuSight kernel latencies (benchmarks/data/gpu_kernels_neusight) as the
shapes, bytes and seconds simdl's kernel model takes, grouped by GPU and op class."""

from __future__ import annotations

import csv
import json
import lzma
from pathlib import Path

import numpy as np

from simdl.costs.gpu_kernels import Hardware

DATA = Path(__file__).parent / "data" / "gpu_kernels_neusight"
F32 = 4  # bytes per fp32 element: every measured call ran in fp32
# The five GPUs with rows; the A100's convolutions were measured on its 80 GB PCIe sibling
# (same SMs and clocks, 1935 instead of 1555 GB/s: each row uses its own device's figures).
GPUS = {
    "A100-PCIe": ("NVIDIA_A100-PCIE-40GB", "NVIDIA_A100_80GB_PCIe"),
    "V100-PCIe": ("Tesla_V100-PCIE-32GB",),
    "T4": ("Tesla_T4",),
    "P100-PCIe": ("Tesla_P100-PCIE-16GB",),
    "P4": ("Tesla_P4",),
}
GPU_OF = {d: g for g, ds in GPUS.items() for d in ds}
BINARY = ("add", "mul", "div", "pow")  # two tensor inputs; the rest read one tensor
# How NeuSight ran a gemm-family row (neusight/Dataset/collect.py, profile_kernel, at the
# README's commit): ``bmm``: torch.bmm(randn(B, M, N), randn(B, N, K)); ``linear``:
# nn.Linear(N, K, bias=True) on randn(B, M, N). Both reduce over the N column and write a
# B x M x K output.
GEMM_COLUMNS = "B x (M x N) @ (N x K), reduction over N"


def hardware(device: str) -> Hardware:
    """The device's datasheet figures as NeuSight recorded them (devices/<device>.json)."""
    j = json.loads((DATA / "devices" / f"{device}.json").read_text())
    return Hardware(sms=int(j["Num_Sm"]), peak_flops=j["SingleFLOPs"] * 1e9, memory_bandwidth=j["Mem_Bw"] * 1e9)


def _read(family: str) -> list[dict]:
    with lzma.open(DATA / f"{family}.csv.xz", "rt") as f:
        return list(csv.DictReader(f))


def _columns(rows: list[dict], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {k: np.array([float(r[k]) for r in rows]) for k in keys}


def load() -> dict[tuple[str, str], dict]:
    """{(gpu, op class): {"device": array of device names, "shapes": {...}, "seconds": array}}."""
    out: dict[tuple[str, str], dict] = {}

    def put(gpu, cls, devices, shapes, seconds):
        out[(gpu, cls)] = {"device": devices, "shapes": shapes, "seconds": seconds}

    for family, cls in (
        ("gemm", "gemm"),
        ("conv", "conv"),
        ("elementwise", "elementwise"),
        ("norm", "norm"),
        ("softmax", "softmax"),
    ):
        rows = _read(family)
        for gpu, devices in GPUS.items():
            mine = [r for r in rows if r["device"] in devices]
            if not mine:
                continue
            dev = np.array([r["device"] for r in mine])
            sec = np.array([float(r["latency_us"]) for r in mine]) * 1e-6
            if cls == "gemm":
                # NeuSight's columns B, M, N, K are the call (B x M x N) @ (B x N x K): N is the
                # reduction and M x K the output (see GEMM_COLUMNS); the model's N is the output
                # width and its K the reduction.
                c = _columns(mine, ("B", "M", "N", "K"))
                c["N"], c["K"] = c["K"], c["N"]
                c["bytes"] = F32 * c["B"] * (c["M"] * c["K"] + c["K"] * c["N"] + c["M"] * c["N"])
                c["kernel"] = np.array([r["kernel"] for r in mine])
            elif cls == "conv":
                c = _columns(mine, ("B", "Cin", "Cout", "R", "HW", "Stride", "Padding"))
                out_side = (c["HW"] + 2 * c["Padding"] - c["R"]) // c["Stride"] + 1
                c = {
                    "B": np.ones_like(c["B"]),
                    "images": c["B"],
                    "M": c["B"] * out_side**2,
                    "N": c["Cout"],
                    "K": c["Cin"] * c["R"] ** 2,
                    "bytes": F32
                    * (
                        c["B"] * c["Cin"] * c["HW"] ** 2
                        + c["Cout"] * c["Cin"] * c["R"] ** 2
                        + c["B"] * c["Cout"] * out_side**2
                    ),
                }
            else:
                c = _columns(mine, ("B", "H"))
                n = c["B"] * c["H"]
                if cls == "elementwise":
                    ops = np.array([r["op"] for r in mine])
                    per = np.where(np.isin(ops, BINARY), 3 * F32, 2 * F32)  # reads + write
                    c["bytes"] = per * n
                else:
                    c["bytes"] = 2 * F32 * n  # read x, write y (the H-sized weights are negligible)
            put(gpu, cls, dev, c, sec)
    return out


def batched_tiles(d: dict, mask: np.ndarray | None = None) -> tuple:
    """The tiles (rows of M, columns of N, tiles resident per SM) of the sgemm kernels that the
    batched rows (B > 1) of ``d`` (a gemm entry of :func:`load`; ``mask``: those rows only) ran.
    cuBLAS is column-major: PyTorch's row-major C = A B runs as C^T = B^T A^T, so kernel
    sgemm_<a>x<b> tiles the output's width (the model's N) by a and its rows (M) by b.
    Residency per SM as :data:`simdl.costs.gpu_kernels.TILES`: halving as the tile doubles,
    one 128x128 tile, at most 8."""
    s = d["shapes"]
    rows = s["B"] > 1 if mask is None else mask & (s["B"] > 1)
    out = set()
    for name in set(s["kernel"][rows].tolist()):
        a, b = (int(x) for x in name.split("_")[1].split("x"))
        out.add((b, a, int(min(8, 128 * 128 // (a * b)))))
    return tuple(sorted(out))


def subset(d: dict, mask: np.ndarray) -> dict:
    return {
        "device": d["device"][mask],
        "shapes": {k: v[mask] for k, v in d["shapes"].items()},
        "seconds": d["seconds"][mask],
    }
