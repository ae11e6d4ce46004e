"""simdl's prediction of one single-GPU training step of :mod:`validate.gpu_check`.

The cluster preset is chosen from the device's name (``torch.cuda.get_device_name``; on a
host without CUDA, the CPU preset of this processor); the run feeds one batch made on the
device before the timed steps, so the prediction is given a host that spends nothing on
loading (the preset's DataLoader cost per sample replaced by 0, said so in the record).
Besides the step, the record holds simdl's time per op class of the workload table's rows
(the analytic engine's row times, :func:`simdl.costs.tasks.row_times`: the GPU kernel model where
the GPU file has a ``kernels:`` block, else the roofline), which the report
sets beside the profiled kernels.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from simdl.errors import SimdlError

# Substring of torch.cuda.get_device_name() -> cluster preset; the first match wins, so the
# more specific names come first ('NVIDIA H100 PCIe' before any 'H100').
GPU_PRESETS = (
    ("H200", "h200"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-hgx"),
    ("A100-SXM4-80GB", "dgx-a100"),
    ("A100 80GB PCIe", "a100-80gb-pcie"),
    ("A100-PCIE-80GB", "a100-80gb-pcie"),
    ("A100-SXM4-40GB", "a100-40gb-2node"),
    ("A10G", "a10g-ps"),
    ("V100", "v100-dgx1"),
)
# The image size of each input: the dataset whose shipped workload table simdl predicts with.
DATASET_OF_SIZE = {224: "imagenet", 32: "cifar10"}
OPTIMIZER = "momentum"  # torch.optim.SGD(momentum=0.9), what validate.gpu_measure steps
NO_LOADER = (
    "validate/gpu_check.py: one batch is made on the device before the timed steps and fed "
    "to every step; no DataLoader runs"
)


def preset_for_device(device_name: str) -> str:
    """The cluster preset of a CUDA device name, or the CPU preset of this host for ``cpu``."""
    if device_name == "cpu":
        from simdl.cluster.host import preset_for_this_host

        return preset_for_this_host() or "cpu-local"
    for needle, preset in GPU_PRESETS:
        if needle.lower() in device_name.lower():
            return preset
    raise SimdlError(
        f"no cluster preset for GPU {device_name!r}; accepted: a name containing one of "
        f"{', '.join(n for n, _ in GPU_PRESETS)} (or give --cluster PRESET)"
    )


def cluster_without_loader(preset: str, cuda: str | None = None):
    """The preset's ClusterSpec with no DataLoader cost (see the module docstring) and, where
    given, the CUDA major version of the torch build that measures (its context's size)."""
    from simdl.cluster import load_cluster
    from simdl.provenance import Sourced

    spec = load_cluster(preset)
    host = dataclasses.replace(spec.host, dataloader_sample=Sourced(0.0, "derived", NO_LOADER))
    return dataclasses.replace(spec, host=host, **({"cuda": cuda} if cuda else {}))


def build_cuda() -> str | None:
    """The CUDA major version of this interpreter's torch build (``torch.version.cuda``; no
    CUDA context is made), None for a CPU build or without torch."""
    try:
        import torch
    except ImportError:
        return None
    from simdl.memory.device import cuda_major

    return cuda_major(torch.version.cuda) if torch.version.cuda else None


def _memory_fields(r) -> dict[str, Any]:
    """Allocator peaks and the device total from the Result; where the Result has no allocator
    figure (simdl models the caching allocator on CUDA devices only), null with the reason
    (never a stand-in number)."""
    out: dict[str, Any] = {
        "max_memory_allocated_bytes": r.max_memory_allocated_bytes,
        "max_memory_reserved_bytes": r.max_memory_reserved_bytes,
    }
    reasons = {}
    if out["max_memory_allocated_bytes"] is None:
        reasons["max_memory_allocated_bytes"] = (
            "no caching-allocator model on this device (not CUDA); peak_tensor_bytes (live tensors) is compared instead"
        )
    if out["max_memory_reserved_bytes"] is None:
        reasons["max_memory_reserved_bytes"] = "no caching-allocator model on this device (not CUDA)"
    cuda = out["max_memory_reserved_bytes"] is not None
    out["device_total_bytes"] = r.peak_memory_bytes
    reasons["device_total_bytes"] = (
        "Result.peak_memory_bytes: the device total as nvidia-smi shows it (max reserved + CUDA context + NCCL buffers)"
        if cuda
        else "Result.peak_memory_bytes: simdl's process total (tensors + context + "
        "workspace + fragmentation), not a model of nvidia-smi's figure"
    )
    out["memory_field_notes"] = reasons
    return out


def by_op_class(model: str, dataset: str, batch: int, precision: str, cluster) -> dict[str, float]:
    """Seconds of forward + backward kernels per op class of the table's rows
    (simdl.workload.op_classes). On a GPU priced by the kernel model, a row's time includes
    the device's wait for the eager host (simdl.costs.gpu_rows.fed_by_host): that wait is
    taken out here, as the step's split does (``host_bound``), so the classes hold kernel time."""
    import numpy as np

    from simdl.cluster import allocate
    from simdl.costs.tasks import device_rates, row_times
    from simdl.workload.library import load_workload

    table = load_workload(model, dataset=dataset)
    rates = device_rates(allocate(cluster, 1, None), precision)
    rows = row_times(table, batch, rates)
    fwd, bwd = np.asarray(rows.fwd, dtype=float), np.asarray(rows.bwd, dtype=float)
    if rows.wait_cum is not None:
        fwd = fwd - np.diff(rows.wait_cum["fwd"])
        bwd = bwd - np.diff(rows.wait_cum["bwd"])
    out: dict[str, float] = {}
    for cls, f, b in zip(table.op_classes, fwd, bwd):
        out[str(cls)] = out.get(str(cls), 0.0) + float(f) + float(b)
    return out


def predict_config(cfg: dict, cluster, engines=("analytic",)) -> dict:
    """The prediction record of one configuration (written before anything is measured)."""
    import simdl
    from validate.run import summarise_result

    kw = dict(
        model=cfg["model"],
        strategy="ddp",
        gpus=1,
        cluster=cluster,
        dataset=cfg["dataset"],
        batch_size=cfg["batch"],
        train_samples=cfg["batch"] * cfg["steps"],
        epochs=1,
        optimizer=OPTIMIZER,
        precision=cfg["precision"],
        loader_workers=1,
    )
    out: dict[str, Any] = {"kwargs": {k: (v if k != "cluster" else cluster.name) for k, v in kw.items()}}
    for engine in engines:
        t = time.perf_counter()
        try:
            r = simdl.predict(**kw, engine=engine)
            out[engine] = {**summarise_result(r), **_memory_fields(r), "predict_s": time.perf_counter() - t}
            if engine == "analytic":
                per = by_op_class(cfg["model"], cfg["dataset"], cfg["batch"], cfg["precision"], cluster)
                out[engine]["by_op_class_s"] = per
                # The row times should be the step's forward and backward compute; say so where not.
                compute = (r.step_split_s or {}).get("compute")
                if compute and abs(sum(per.values()) - compute) > 0.01 * compute:
                    out[engine]["by_op_class_note"] = (
                        f"rows sum to {sum(per.values()):.4g} s, the step's compute "
                        f"is {compute:.4g} s: the engine priced rows otherwise"
                    )
        except Exception as e:  # noqa: BLE001 -- recorded; the measurement still runs
            out[engine] = {"error": f"{type(e).__name__}: {e}"}
    return out
