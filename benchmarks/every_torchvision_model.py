"""Every classification model ``torchvision.models.list_models(module=torchvision.models)``
lists, predicted as ``simdl predict --model NAME`` would: traced on demand
(simdl.workload.extract, cached under $SIMDL_CACHE_DIR), DDP on 2 GPUs of the default cluster,
at CIFAR-10 (32x32) and ImageNet (224x224) input sizes.

It prints one line per (model, dataset) as it goes and appends it to ``--out`` (JSONL), so a
killed run resumes where it stopped (``--resume``). A model whose prediction fails is recorded
with the first line of its error; the run goes on. The summary counts what answered.

Run: ``python benchmarks/every_torchvision_model.py --out runs/every_model.jsonl [--resume]``
(about 10 s per model and size on 2 shared cores, traces included).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATASETS = ("cifar10", "imagenet")


def _done(out: Path) -> set[tuple[str, str]]:
    if not out.exists():
        return set()
    done = set()
    for line in out.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:  # a torn last line from a killed run
            continue
        done.add((r["model"], r["dataset"]))
    return done


def _one(name: str, dataset: str) -> dict:
    import simdl

    t0 = time.perf_counter()
    try:
        r = simdl.predict(model=name, strategy="ddp", gpus=2, dataset=dataset)
    except Exception as e:  # recorded, not raised: the point is which models answer
        msg = (str(e).splitlines() or [""])[0][:200]
        return {"model": name, "dataset": dataset, "ok": False, "error": f"{type(e).__name__}: {msg}"}
    return {
        "model": name,
        "dataset": dataset,
        "ok": True,
        "step_s": r.iteration_time_s,
        "peak_memory_bytes": r.peak_memory_bytes,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSONL file the results are appended to")
    ap.add_argument("--resume", action="store_true", help="skip the (model, dataset) pairs already in --out")
    ap.add_argument("--limit", type=int, default=0, help="only the first N models (0: all)")
    args = ap.parse_args(argv)
    if args.out.exists() and args.out.stat().st_size and not args.resume:
        print(f"error: {args.out} already holds results; pass --resume to continue it", file=sys.stderr)
        return 2
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    if args.limit:
        names = names[: args.limit]
    done = _done(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        for name in names:
            for ds in DATASETS:
                if (name, ds) in done:
                    continue
                rec = _one(name, ds)
                f.write(json.dumps(rec) + "\n")
                f.flush()
                state = f"{rec['step_s'] * 1e3:9.2f} ms" if rec["ok"] else rec["error"]
                print(f"{name:<28} {ds:<9} {state}", flush=True)
    rows = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r["ok"]]
    print(f"answered {len(ok)}/{len(rows)} (model, input size) pairs of {len(names)} models")
    for r in rows:
        if not r["ok"]:
            print(f"  failed: {r['model']} {r['dataset']}: {r['error']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
