"""What a prediction echoes in ``result.config``: every value it used, and under
``config["assumed"]`` each default the caller left to simdl, with where it comes from.
"""

from __future__ import annotations

from typing import Any

# Why each default is what it is, echoed in the result when the default is used.
DEFAULT_REASONS = {
    "cluster": "study 1's A100 80 GB node; NVLink assumed (the study does not say)",
    "dataset": "study 1, experiment 1 (CIFAR-10)",
    "batch_size": "torchvision references/classification: 32 images per GPU",
    "epochs": "study 1, experiment 1: 10 epochs",
    "optimizer": "torchvision references/classification: SGD with momentum 0.9",
    "precision": "torchvision references/classification: AMP off by default",
    "memory_format": "contiguous: PyTorch's default memory format (NCHW); channels_last (NHWC) skips cuDNN's "
    "layout copies around tensor-core convolutions",
    "loader_workers": "assumed DataLoader(num_workers=4)",
    "algorithm": "the cheaper of ring and tree per collective, as NCCL's tuner picks",
}  # a strategy's own keywords give their reasons in its registry entry (PredictKey.default_reason)


def echo_config(workload, alloc, config, plan, *, dataset: str, loader_workers: int, engine: str) -> dict[str, Any]:
    """Every value the prediction used (``result.config``), the strategy's own from its registry entry."""
    table = workload.table
    echo = {
        "model": table.model,
        "strategy": config.name,
        "label": config.label,
        "gpus": alloc.gpus,
        "nodes": alloc.nodes,
        "gpus_per_node": alloc.gpus_per_node,
        "cluster": alloc.spec.name,
        "gpu": alloc.spec.gpu.name,
        "dataset": dataset,
        "input_shape": "x".join(str(x) for x in table.input_shape),
        "num_classes": table.num_classes,
        "train_samples": workload.train_samples,
        "batch_size": workload.batch_size,
        "global_batch_size": workload.batch_size * workload.grad_accumulation * plan.data_parallel,
        "epochs": workload.epochs,
        "optimizer": workload.optimizer,
        "precision": workload.precision,
        "memory_format": workload.memory_format,
        "grad_accumulation": workload.grad_accumulation,
        "activation_checkpointing": workload.activation_checkpointing,
        "loader_workers": loader_workers,
        "algorithm": config.algorithm,
        "engine": engine,
    }
    echo.update(config.spec.echo(config, plan))
    if table.adaptation:
        echo["model_adaptation"] = table.adaptation
    echo["compute_source"] = _compute_source(alloc, workload)
    return echo


def echo_assumed(echo: dict, family, given: set, placement_why: str | None, alloc, workload) -> None:
    """``echo["assumed"]``: each default used, with its reason, for the keys this prediction
    echoes; the PS placement and the GPU kernel model's assumptions where they apply."""
    relevant = set(echo) | {"cluster", "dataset"}
    reasons = dict(
        DEFAULT_REASONS, **{k: key.default_reason for k, key in family.predict_keys.items() if key.default_reason}
    )
    echo["assumed"] = {k: why for k, why in reasons.items() if k not in given and k in relevant}
    if placement_why:
        echo["assumed"]["ps_placement"] = placement_why
    for key, (value, why) in _kernel_assumptions(alloc, workload).items():
        echo[key] = value
        echo["assumed"][key] = why
    echo_cuda(echo, alloc.spec)


def echo_cuda(echo: dict, spec) -> None:
    """``echo["cuda"]``: the CUDA version whose context the device total counts (GPUs with a
    ``device_memory:`` block, simdl.memory.device), under ``assumed`` when it is the GPU file's
    default rather than the cluster's or ``--cuda``."""
    from .memory.device import device_memory

    if spec.gpu.kind != "cuda":
        return
    dm = device_memory(spec.gpu, spec.cuda or None)
    if dm is None:
        return
    echo["cuda"] = dm.cuda
    if dm.cuda_source != "cluster":
        echo["assumed"]["cuda"] = (
            f"CUDA {dm.cuda}: the {spec.gpu.name} file's default_cuda (context {dm.context_bytes.value / 2**20:.0f} MiB, "
            f"{dm.context_bytes.kind}); give --cuda with the build's torch.version.cuda"
        )


def echo_input(echo: dict, workload, dataset: str, vocab: int | None, train_samples: int | None) -> None:
    """The input's kind where it is not the dataset's images (simdl.workload.inputs): token ids
    and their vocabulary, and the sample count assumed from the dataset when not given."""
    from .workload.inputs import describe, is_image

    shape = workload.table.input_shape
    if vocab is not None:
        echo["vocab_size"] = vocab
    if not is_image(shape, vocab):
        echo["input"] = describe(shape, vocab)
        if train_samples is None:
            echo["assumed"]["train_samples"] = (
                f"{dataset}'s {workload.train_samples} samples per epoch, for "
                "inputs that are not its images: give --samples for your data set"
            )


def _kernel_assumptions(alloc, workload) -> dict:
    """What the GPU kernel model takes that the user did not give, as {key: (value, why)}: the
    math path per op class (PyTorch's TF32 defaults) and the eager host's per-op cost
    (simdl.costs.gpu_rows)."""
    from .costs.gpu_rows import HOST_BWD_FRACTION, host_op_seconds
    from .costs.tasks import device_rates

    rates = device_rates(alloc, workload.precision)
    if rates.kernels is None or (rates.measured is not None and rates.measured.find(workload.table) is not None):
        return {}
    k, p = rates.kernels, workload.precision
    paths = f"matmul {k.path_of(p, 'matmul')}, conv {k.path_of(p, 'conv')}"
    host = f"{host_op_seconds(k) * 1e6:.0f}us/op"
    out = _native_batch_norm_assumption(k, workload.table)
    return out | {
        "math_path": (paths, k.describe_paths(p)),
        "host_per_op": (
            host,
            f"eager PyTorch: per forward op the measured lone-op floor of {k.kind} kernels "
            f"block, {HOST_BWD_FRACTION:.0%} of it per backward op (simdl.costs.gpu_rows); DDP/FSDP "
            "hooks, launches and stream calls counted from PyTorch's source at that price, "
            "5 us per light call assumed (simdl.costs.gpu_framework)",
        ),
    }


def _native_batch_norm_assumption(k, table) -> dict:
    nb = k.native_batch_norm
    if nb is None or not any(t.startswith("BatchNorm") for t in table.types):
        return {}
    return {
        "batch_norm_kernels": (
            "ATen native",
            "bf16 autocast: cuDNN batch norm needs a non-bf16 input and weight (PyTorch "
            "Normalization.cpp _select_batch_norm_backend); the native kernels' rates are "
            f"{nb.kind}: {nb.source}",
        )
    }


def _compute_source(alloc, workload) -> str:
    """Where the per-row compute times come from: the cluster's compute profile of this model
    (measured rows, simdl.costs.measured) or the roofline of simdl.costs.tasks."""
    from .costs.tasks import device_rates

    rates = device_rates(alloc, workload.precision)
    m = rates.measured.find(workload.table) if rates.measured is not None else None
    if m is None and rates.kernels is not None:
        return f"GPU kernel model ({rates.kernels.kind} kernels block of {alloc.spec.gpu.name}), eager host stream"
    if m is None:
        return "roofline"
    batches = ",".join(str(int(b)) for b in m.batches)
    return f"compute profile ({m.coverage(workload.batch_size)} from rows measured at batch {batches})"
