"""FSDP against DDP on study 1's models, predicted on A100s: the ratio and where it comes from.

Study 1 (/work/shared/docs/origins.md) trained VGG16, EfficientNet-V2-L and ConvNeXt-Large on
CIFAR-10 with DDP and FSDP on 2 and 4 A100 80 GB GPUs. At 32x32 a step is host-bound on a GPU
(the host issues ops slower than the device runs them), so what FSDP adds on top of DDP is mostly
its per-unit host work (simdl.costs.gpu_framework: copy-in/copy-out, hooks, reshards) and its
exposed collectives. This prints, per model and GPU count, simdl's analytic step for DDP and
each FSDP sharding, the step's host, host-bound and exposed-communication parts, the FSDP/DDP
ratio and difference, with the FSDP unit and parameter-tensor counts that the per-unit and
per-parameter host costs scale with: the model of many small units (EfficientNet-V2-L, 80 units,
897 parameter tensors) has by far the largest difference.

``python benchmarks/fsdp_ddp_ratio.py [--cluster a100-80gb-nvlink] [--batch 32] [--markdown]``

Predictions only (presets; nothing here is measured).
"""

from __future__ import annotations

import argparse

import simdl

MODELS = ("vgg16", "efficientnet_v2_l", "convnext_large")
FSDP = ("full", "grad_op", "none")


def parameter_tensors(model: str) -> int:
    """The model's parameter tensors (FSDP2's per-parameter host work counts them)."""
    import torch
    import torchvision

    with torch.device("meta"):
        return sum(1 for _ in torchvision.models.get_model(model, num_classes=10).parameters())


def rows(cluster: str, batch: int, gpus_list=(2, 4)) -> list[dict]:
    out = []
    for model in MODELS:
        tensors = parameter_tensors(model)
        for gpus in gpus_list:
            kw = dict(model=model, gpus=gpus, cluster=cluster, dataset="cifar10", batch_size=batch)
            ddp = simdl.predict(strategy="ddp", **kw)
            for sh in FSDP:
                r = simdl.predict(strategy="fsdp", sharding=sh, **kw)
                s, d = r.step_split_s, ddp.step_split_s
                units = int(r.config["fsdp_units"])
                out.append(
                    {
                        "model": model,
                        "gpus": gpus,
                        "sharding": sh,
                        "units": units,
                        "tensors": tensors,
                        "ddp_ms": ddp.iteration_time_s * 1e3,
                        "fsdp_ms": r.iteration_time_s * 1e3,
                        "ratio": r.iteration_time_s / ddp.iteration_time_s,
                        "ddp_host_ms": (d["host"] + d["host_bound"]) * 1e3,
                        "fsdp_host_ms": (s["host"] + s["host_bound"]) * 1e3,
                        "fsdp_exposed_ms": s["exposed_comm"] * 1e3,
                        "diff_ms": (r.iteration_time_s - ddp.iteration_time_s) * 1e3,
                    }
                )
    return out


COLUMNS = (
    ("model", "model", "{}"),
    ("gpus", "GPUs", "{}"),
    ("sharding", "FSDP", "{}"),
    ("units", "units", "{}"),
    ("tensors", "param tensors", "{}"),
    ("ddp_ms", "DDP step ms", "{:.1f}"),
    ("fsdp_ms", "FSDP step ms", "{:.1f}"),
    ("ratio", "FSDP/DDP", "{:.2f}"),
    ("diff_ms", "FSDP - DDP ms", "{:.1f}"),
    ("ddp_host_ms", "DDP host + host-bound ms", "{:.1f}"),
    ("fsdp_host_ms", "FSDP host + host-bound ms", "{:.1f}"),
    ("fsdp_exposed_ms", "FSDP exposed comm ms", "{:.1f}"),
)


def render(table: list[dict], markdown: bool) -> str:
    head = [c[1] for c in COLUMNS]
    body = [[fmt.format(r[k]) for k, _, fmt in COLUMNS] for r in table]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(x.rjust(w) for x, w in zip(line, widths)) for line in [head, *body])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="a100-80gb-nvlink")
    ap.add_argument("--batch", type=int, default=32, help="per-GPU batch (study 1 gives none; simdl's default)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    print(f"simdl analytic engine, cluster {a.cluster}, CIFAR-10, batch {a.batch} per GPU, fp32 (predictions)")
    print(render(rows(a.cluster, a.batch), a.markdown))


if __name__ == "__main__":
    main()
