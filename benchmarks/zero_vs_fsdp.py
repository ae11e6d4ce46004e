"""DeepSpeed ZeRO-0..3 beside FSDP full / grad_op / none: simdl's predicted per-GPU peak and step.

For ResNet-50, ViT-B/16 and VGG16 on ImageNet-sized inputs at per-GPU batch 4-64, on 8 A100-SXM4-40GB
over 2 nodes (the a100-40gb-2node preset: 4 GPUs per node, one 200 Gb/s NIC per node, NIC count
assumed). Every figure is simdl's prediction (analytic engine), not a measurement: "alloc" is the
tensor peak (torch.cuda.max_memory_allocated), "smi" the process total as nvidia-smi would show it
(tensors + the profile's CUDA context, workspace and fragmentation), "ms" the step time.

    PYTHONPATH=. python benchmarks/zero_vs_fsdp.py [--precision fp32|bf16|fp16-amp] [--optimizer adam]
"""

from __future__ import annotations

import argparse
import resource
import time

import simdl

MODELS = ("resnet50", "vit_b_16", "vgg16")
BATCHES = (4, 8, 16, 32, 64)
STRATEGIES = (
    ("zero0", {}),
    ("zero1", {}),
    ("zero2", {}),
    ("zero3", {}),
    ("fsdp-full", {"sharding": "full"}),
    ("fsdp-grad_op", {"sharding": "grad_op"}),
    ("fsdp-none", {"sharding": "none"}),
)
CLUSTER = "a100-40gb-2node"
GIB = 2**30


def _predict(model, label, knobs, batch, precision, optimizer):
    strategy = "fsdp" if label.startswith("fsdp") else label
    return simdl.predict(
        model,
        strategy=strategy,
        gpus=8,
        cluster=CLUSTER,
        dataset="imagenet",
        batch_size=batch,
        precision=precision,
        optimizer=optimizer,
        **knobs,
    )


def table(precision: str, optimizer: str) -> list[str]:
    lines = [
        f"8 x A100-SXM4-40GB ({CLUSTER}), ImageNet 3x224x224, {precision}, {optimizer}; "
        "each cell: alloc GiB / smi GiB / step ms (simdl analytic predictions)",
        "",
    ]
    head = "| model | batch | " + " | ".join(label for label, _ in STRATEGIES) + " | smallest (alloc) |"
    lines += [head, "|" + "---|" * (len(STRATEGIES) + 3)]
    for model in MODELS:
        for batch in BATCHES:
            cells, peaks = [], {}
            for label, knobs in STRATEGIES:
                r = _predict(model, label, knobs, batch, precision, optimizer)
                peaks[label] = r.peak_tensor_bytes
                cells.append(
                    f"{r.peak_tensor_bytes / GIB:.2f} / {r.peak_memory_bytes / GIB:.2f} / "
                    f"{r.iteration_time_s * 1e3:.1f}" + ("" if r.fits_in_memory else " (OOM)")
                )
            best = min(peaks, key=peaks.get)
            lines.append(f"| {model} | {batch} | " + " | ".join(cells) + f" | {best} |")
    return lines


def breakdowns(precision: str, optimizer: str, batch: int = 16) -> list[str]:
    """Where each strategy's peak goes at one batch: the reason behind the ranking."""
    lines = ["", f"Peak breakdown at batch {batch} (GiB: params / grads / optimizer / activations / comm buffers)", ""]
    for model in MODELS:
        lines.append(f"{model}:")
        for label, knobs in STRATEGIES:
            r = _predict(model, label, knobs, batch, precision, optimizer)
            b = r.memory_breakdown_bytes
            parts = " / ".join(
                f"{b[k] / GIB:.2f}" for k in ("params", "grads", "optimizer", "activations", "comm_buffers")
            )
            bufs = r.config.get("buffers_bytes", {})
            named = ", ".join(f"{k} {v / GIB:.2f}" for k, v in bufs.items() if v >= 0.01 * GIB)
            lines.append(f"  {label:13s} {parts}" + (f"   [{named}]" if named else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--optimizer", default="adam")
    a = ap.parse_args()
    wall, cpu = time.perf_counter(), time.process_time()
    lines = table(a.precision, a.optimizer) + breakdowns(a.precision, a.optimizer)
    print("\n".join(lines))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"\n{time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU "
        f"(user {ru.ru_utime:.1f} s; shared host)"
    )


if __name__ == "__main__":
    main()
