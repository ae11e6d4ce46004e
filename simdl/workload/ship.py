"""Regenerate the workload tables shipped in ``simdl/workload/data/`` (needs torch).

    python -m simdl.workload.ship                       # every zoo model x dataset
    python -m simdl.workload.ship --models vgg16 resnet18 --datasets cifar10

Files are byte-identical when their content is (see ``save_table``), so a
regeneration with the same torch only shows changes in git where numbers changed
(plus the extraction date).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .datasets import DATASETS
from .zoo import MODELS

DATA_DIR = Path(__file__).resolve().parent / "data"


def ship(model: str, dataset: str, out_dir: Path = DATA_DIR) -> Path:
    from .extract import extract, save_table

    ds = DATASETS[dataset]
    table = extract(model, ds.input_shape, ds.num_classes, dataset=dataset)
    return save_table(table, out_dir / f"{model}__{dataset}.json.gz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    for model in args.models:
        for dataset in args.datasets:
            t0 = time.perf_counter()
            path = ship(model, dataset, args.out)
            print(
                f"{path.name:45s} {path.stat().st_size / 1024:7.1f} KiB {time.perf_counter() - t0:6.2f} s", flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
