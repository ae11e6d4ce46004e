"""The ``simdl`` command line.

Kept small and fast: each subcommand imports what it needs when it runs, so
``simdl predict`` on a built-in model never imports torch (or networkx, matplotlib).
Bad input prints one line ``simdl: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .errors import SimdlError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise SimdlError(f"{self.prog}: {message}")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _add_prediction_args(p: argparse.ArgumentParser) -> None:
    from .strategies.config import ALGORITHMS, SHARDINGS, STRATEGY_NAMES
    from .workload.workload import OPTIMIZERS, PRECISIONS

    p.add_argument("--model", default="vgg16", help="zoo model name or package.module:factory (default vgg16)")
    p.add_argument("--strategy", default="fsdp", help=f"one of {', '.join(STRATEGY_NAMES)} (default fsdp)")
    p.add_argument("--gpus", type=_int, default=4, help="number of GPUs (ranks / PS workers), default 4")
    p.add_argument("--nodes", type=_int, default=None, help="nodes to spread the GPUs over (default: fill nodes)")
    p.add_argument("--cluster", default=None, help="preset name or path to a cluster YAML (default a100-80gb-nvlink)")
    p.add_argument("--dataset", default=None, help="cifar10 | mnist | imagenet (default cifar10)")
    p.add_argument("--input", dest="input_shape", default=None, help="input shape CxHxW, overrides the dataset's")
    p.add_argument("--classes", dest="num_classes", type=_int, default=None, help="number of classes")
    p.add_argument("--samples", dest="train_samples", type=_int, default=None, help="training samples per epoch")
    p.add_argument("--batch-size", type=_int, default=None, help="per-GPU batch size (default 32)")
    p.add_argument("--epochs", type=_number, default=None, help="epochs (default 10)")
    p.add_argument("--optimizer", default=None, help=f"{' | '.join(OPTIMIZERS)} (default momentum)")
    p.add_argument("--precision", default=None, help=f"{' | '.join(PRECISIONS)} (default fp32)")
    p.add_argument("--sharding", default=None, help=f"FSDP sharding: {' | '.join(SHARDINGS)} (default full)")
    p.add_argument("--wrap", default=None, help="FSDP wrap policy: block | size:N | none (default block)")
    p.add_argument("--staleness-bound", type=_int, default=None, help="ps-ssp staleness bound (default 3)")
    p.add_argument("--ps-servers", type=_int, default=None, help="parameter-server shards (default 1)")
    p.add_argument("--bucket-cap-mb", type=_number, default=None, help="DDP bucket cap in MiB (default 25)")
    p.add_argument("--algorithm", default=None, help=f"collective algorithm: {' | '.join(ALGORITHMS)} (default auto)")
    p.add_argument("--loader-workers", type=_int, default=None, help="DataLoader workers per rank (default 4)")
    p.add_argument("--grad-accumulation", type=_int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--engine", default="analytic", help="analytic | sim (default analytic)")


def _prediction_kwargs(a: argparse.Namespace) -> dict:
    keys = ("model", "strategy", "gpus", "nodes", "cluster", "dataset", "input_shape", "num_classes",
            "train_samples", "batch_size", "epochs", "optimizer", "precision", "sharding", "wrap",
            "staleness_bound", "ps_servers", "bucket_cap_mb", "algorithm", "loader_workers",
            "grad_accumulation", "engine")
    return {k: getattr(a, k) for k in keys}


def _cmd_predict(a: argparse.Namespace) -> int:
    from .predict import predict

    result = predict(**_prediction_kwargs(a))
    if a.json:
        print(result.to_json())
    else:
        from .report.text import format_result

        print(format_result(result))
    return 0


def _cmd_models(a: argparse.Namespace) -> int:
    from .workload.library import shipped_tables
    from .workload.zoo import MODELS

    shipped: dict[str, list[str]] = {}
    for model, dataset in shipped_tables():
        shipped.setdefault(model, []).append(dataset)
    width = max(len(m) for m in MODELS)
    print(f"{'model':<{width}}  shipped tables")
    for m in MODELS:
        print(f"{m:<{width}}  {', '.join(sorted(shipped.get(m, []))) or '-'}")
    print("Any other torchvision classifier or package.module:factory is traced on demand (needs torch).")
    return 0


def _cmd_clusters(a: argparse.Namespace) -> int:
    from .cluster import cluster_names, load_cluster
    from .report.text import format_cluster, format_cluster_list

    if a.action == "show":
        if not a.name:
            raise SimdlError("simdl clusters show: which cluster? accepted: " + ", ".join(cluster_names()))
        print(format_cluster(load_cluster(a.name)))
        return 0
    if a.action not in (None, "list"):
        raise SimdlError(f"simdl clusters: unknown action {a.action!r}; accepted: list, show NAME")
    print(format_cluster_list([load_cluster(n) for n in cluster_names()]))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simdl", description="Predict time and memory of distributed PyTorch training.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("predict", help="predict one configuration")
    _add_prediction_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_predict)
    m = sub.add_parser("models", help="list models and shipped workload tables")
    m.set_defaults(func=_cmd_models)
    c = sub.add_parser("clusters", help="list cluster presets, or `clusters show NAME`")
    c.add_argument("action", nargs="?", default=None, help="list | show")
    c.add_argument("name", nargs="?", default=None)
    c.set_defaults(func=_cmd_clusters)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "command", None):
            parser.print_help()
            return 2
        return args.func(args)
    except SimdlError as e:
        print(f"simdl: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
