"""A held-out GPU's sustained share of its fp32 peak, from datasheet power alone.

A GPU whose board power is low for its peak cannot hold its boost clock under a long
compute-bound kernel; the measured T4 and P4 fits reach about half the fp32 fraction of the
250 W cards. The feature: board power (W) per peak fp32 FLOP/s, against the highest such
value among the measured GPUs of the same process node (same transistor energy per FLOP):
``sustained = min(1, own / highest of its node)``. It uses the datasheets only (TDP, peak,
process node), never the held-out GPU's rows; a GPU with no other measured GPU of its node
gets 1. benchmarks/gpu_kernels.py prints the held-out-GPU table with it.
"""

from __future__ import annotations

import dataclasses
import json

from kernel_rows import DATA, GPUS  # noqa: E402

# Board power (W) and process node per NeuSight device file. TDP: NVIDIA datasheets (A100
# PCIe 40 GB 250 W, A100 80 GB PCIe 300 W: "NVIDIA A100 Tensor Core GPU" datasheet; V100
# PCIe 250 W: "NVIDIA V100 Tensor Core GPU" datasheet; T4 70 W: "NVIDIA T4" datasheet;
# P100 PCIe 250 W: "NVIDIA Tesla P100" datasheet; P4 75 W (its 50-75 W range's top): "NVIDIA
# Tesla P4" datasheet). Node: NVIDIA's architecture whitepapers (Pascal GP100/GP104 16 nm,
# Volta GV100 and Turing TU104 12 nm, Ampere GA100 7 nm).
BOARD = {
    "NVIDIA_A100-PCIE-40GB": (250.0, "7nm"),
    "NVIDIA_A100_80GB_PCIe": (300.0, "7nm"),
    "Tesla_V100-PCIE-32GB": (250.0, "12nm"),
    "Tesla_T4": (70.0, "12nm"),
    "Tesla_P100-PCIE-16GB": (250.0, "16nm"),
    "Tesla_P4": (75.0, "16nm"),
}


def _watts_per_flops(device: str) -> float:
    j = json.loads((DATA / "devices" / f"{device}.json").read_text())
    return BOARD[device][0] / (j["SingleFLOPs"] * 1e9)


def sustained(device: str, known_gpus) -> float:
    """Share of the fp32 peak ``device`` sustains against the measured GPUs ``known_gpus``."""
    node = BOARD[device][1]
    own = _watts_per_flops(device)
    refs = [_watts_per_flops(d) for g in known_gpus for d in GPUS[g] if BOARD[d][1] == node]
    return min(1.0, own / max(refs + [own]))


def held_out_gpu_sustained(data: dict, fits: dict, kind, errors, mean_params, estimator) -> dict:
    """The mean rule of the held-out-GPU check, GEMM-class compute efficiencies taken per
    unit of each GPU's sustained share and put back at the held-out GPU's share;
    ``estimator(gpu, cls)``: the estimator that prices the held-out GPU's rows."""
    res = {}
    for (gpu, cls), d in data.items():
        known = [g for g in GPUS if g != gpu]
        others = []
        for g in known:
            if (g, cls) not in fits:
                continue
            p = fits[(g, cls)].params_
            if kind(cls) != "stream":
                dev = data[(g, cls)]["device"][0]
                p = dataclasses.replace(
                    p, compute_efficiency=p.compute_efficiency / sustained(dev, [h for h in known if h != g])
                )
            others.append(p)
        m = mean_params(others)
        if kind(cls) != "stream":
            m = dataclasses.replace(m, compute_efficiency=m.compute_efficiency * sustained(d["device"][0], known))
        res[(gpu, cls)] = errors(estimator(gpu, cls), m, d)
    return res
