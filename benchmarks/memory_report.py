"""simdl's peak memory vs PyTorch's own figures: the issue-4 validation report.

Prints, per model / strategy / batch / optimizer, simdl's peak tensor bytes next to
PyTorch's, the error, and the per-category errors; then mean and max |error|.

Sources:
  simdl    - simdl.memory.timeline on the shipped workload tables (cifar10 inputs).
  PyTorch  - MemTracker (single rank, DDP-like) and FSDPMemTracker (FSDP2 fully_shard,
             fake process group of 4 ranks) under FakeTensorMode, computed now
             (simdl/memory/reference.py); real CPU steps measured with torch.profiler
             (single process, and FSDP2 full / grad_op / none and DDP over gloo with 2 processes;
             allocations paired with their frees, simdl.memory.measured).

Run: ``python benchmarks/memory_report.py [--quick] [--no-real]`` (full: ~10-20 min on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.memory.compare import compare_fsdp, compare_single  # noqa: E402

MODELS = [
    "mnist_cnn",
    "resnet18",
    "resnet50",
    "vgg16",
    "densenet121",
    "efficientnet_v2_s",
    "efficientnet_v2_l",
    "convnext_tiny",
    "convnext_large",
    "vit_b_16",
    "vit_b_32",
    "mobilenet_v3_large",
]
BATCHES = (32, 256)
OPTIMIZERS = ("momentum", "adam")


def _row(c, kind: str) -> dict:
    cats = c.category_errors()
    worst = max(cats.items(), key=lambda kv: abs(kv[1][0]) if kv[1][0] != float("inf") else 0)
    print(
        f"{kind:7s} {c.label:48s} simdl {c.ours / 2**20:10.2f} MiB  PyTorch {c.ref / 2**20:10.2f} MiB  "
        f"error {c.error:+7.2%}  worst category {worst[0]} {worst[1][0]:+.1%}"
        f"{'' if all(ok for _, ok in cats.values()) else '  (category out of tolerance)'}",
        flush=True,
    )
    return {"kind": kind, "label": c.label, "error": c.error, "cats": cats, "ref": c.ref}


def _summary(rows: list[dict], kind: str) -> None:
    errs = [abs(r["error"]) for r in rows if r["kind"] == kind]
    if not errs:
        return
    print(f"  {kind}: {len(errs)} cases, peak |error| mean {statistics.mean(errs):.2%}, max {max(errs):.2%}")
    by_cat: dict[str, list[float]] = {}
    for r in rows:
        if r["kind"] != kind:
            continue
        for k, (rel, ok) in r["cats"].items():
            if rel != float("inf"):
                by_cat.setdefault(k, []).append(abs(rel))
    for k, v in sorted(by_cat.items()):
        outside = sum(1 for r in rows if r["kind"] == kind and k in r["cats"] and not r["cats"][k][1])
        print(f"    {k:20s} |error| median {statistics.median(v):.2%}, max {max(v):.2%}; out of tolerance in {outside}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few models only")
    ap.add_argument("--no-real", action="store_true", help="skip the real CPU runs")
    a = ap.parse_args()
    models = ["mnist_cnn", "resnet18", "vit_b_32", "convnext_tiny"] if a.quick else MODELS
    t0 = time.time()
    rows = []
    print("== single rank (DDP replica) vs MemTracker ==")
    for m in models:
        for b in BATCHES:
            for o in OPTIMIZERS:
                rows.append(_row(compare_single(m, b, o), "single"))
    for m in ("resnet18", "convnext_tiny", "vit_b_32", "mobilenet_v3_large"):
        rows.append(_row(compare_single(m, 64, "momentum", ac=True), "ac"))
    print("== FSDP2 (4 ranks) vs FSDPMemTracker ==")
    for m in models:
        for b in BATCHES:
            for o in OPTIMIZERS:
                rows.append(_row(compare_fsdp(m, b, o, sharding="full"), "fsdp"))
    for m in ("mnist_cnn", "resnet18", "vit_b_32", "convnext_tiny"):
        for sh in ("grad_op", "hybrid", "none"):
            rows.append(_row(compare_fsdp(m, 32, "adam", sharding=sh), "fsdp"))
    real = []
    if not a.no_real:
        import simdl
        from simdl.memory.real_ranks import real_fsdp_step
        from simdl.memory.reference import real_single_step
        from simdl.strategies.fsdp_units import fsdp_units
        from simdl.workload.library import load_workload

        print("== real CPU steps (torch.profiler allocations) ==")
        for m, ds, b, o in [
            ("mnist_cnn", "mnist", 32, "momentum"),
            ("mnist_cnn", "mnist", 128, "adam"),
            ("resnet18", "cifar10", 32, "momentum"),
            ("resnet18", "cifar10", 64, "adam"),
        ]:
            t = load_workload(m, dataset=ds)
            meas = real_single_step(m, t.input_shape, t.num_classes, b, o)
            ours = simdl.predict(
                model=m, strategy="ddp", gpus=1, cluster="cpu-local", dataset=ds, batch_size=b, optimizer=o
            ).peak_tensor_bytes
            real.append(ours / meas - 1)
            print(
                f"single  {m} b={b} {o}: measured {meas / 2**20:.2f} MiB, simdl {ours / 2**20:.2f} MiB, "
                f"error {real[-1]:+.2%}",
                flush=True,
            )
        for m, ds, b in [("mnist_cnn", "mnist", 32), ("resnet18", "cifar10", 32)]:
            t = load_workload(m, dataset=ds)
            units = [u.name for u in fsdp_units(t, "block").units[1:]]
            for strategy in ("fsdp-full", "fsdp-grad_op", "fsdp-none", "ddp"):
                sharding = strategy.removeprefix("fsdp-")
                meas = max(
                    max(p)
                    for p in real_fsdp_step(m, t.input_shape, t.num_classes, b, units, world=2, sharding=sharding)
                )
                # real_fsdp_step gives the root reshard_after_forward explicitly (full: True).
                kw = {} if strategy == "ddp" else {"sharding": sharding, "reshard_root": sharding == "full"}
                ours = simdl.predict(
                    model=m,
                    strategy=strategy.split("-")[0],
                    gpus=2,
                    cluster="cpu-local",
                    dataset=ds,
                    batch_size=b,
                    **kw,
                ).peak_tensor_bytes
                real.append(ours / meas - 1)
                print(
                    f"{strategy}x2 {m} b={b} momentum (gloo): measured {meas / 2**20:.2f} MiB per rank, "
                    f"simdl {ours / 2**20:.2f} MiB, error {real[-1]:+.2%}",
                    flush=True,
                )
    print("== summary ==")
    for kind in ("single", "ac", "fsdp"):
        _summary(rows, kind)
    if real:
        print(
            f"  real CPU: {len(real)} runs, |error| mean {statistics.mean(map(abs, real)):.2%}, "
            f"max {max(map(abs, real)):.2%}"
        )
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
