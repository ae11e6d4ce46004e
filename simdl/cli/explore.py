"""``simdl sweep`` and ``simdl recommend``: many configurations, predicted and ranked."""

from __future__ import annotations

import argparse

from ..errors import SimdlError
from .options import add_prediction_args, integer, number


def _cmd_sweep(a: argparse.Namespace) -> int:
    """A grid of predictions: comma lists and --set key=v1,v2 are the axes."""
    from ..explore.commands import sweep_command

    if a.jobs is not None and a.jobs < 1:
        raise SimdlError(f"simdl sweep: --jobs {a.jobs}: accepted: an integer >= 1 (worker processes)")
    options = {k: getattr(a, k) for k in a.sweep_keys}
    return sweep_command(
        options,
        a.set or (),
        jobs=a.jobs,
        executor=a.executor,
        progress=False if a.no_progress else None,
        output=a.output,
        plot=a.plot,
        x=a.x,
        time_column=a.time,
        list_keys=a.list_keys,
    )


def add_sweep_parser(sub) -> None:
    w = sub.add_parser("sweep", help="predict a grid of configurations (comma lists, --set key=v1,v2) in parallel")
    # The same options as predict, each taking a comma list: read from add_prediction_args so that
    # an option added there is sweepable here too.
    proto = argparse.ArgumentParser(add_help=False)
    add_prediction_args(proto)
    keys = []
    for act in proto._actions:
        if act.option_strings:
            w.add_argument(
                *act.option_strings,
                dest=act.dest,
                default=None,
                metavar="V[,V...]",
                help=f"{act.help}; a comma list sweeps",
            )
            keys.append(act.dest)
    w.set_defaults(sweep_keys=tuple(keys))
    w.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="KEY=V1,V2",
        help="sweep any predict keyword, simulator option or cluster override (repeatable; "
        "--list-keys shows them), e.g. --set nic_Gb_per_s=25,100,400",
    )
    w.add_argument("--list-keys", action="store_true", help="print the keys --set accepts and exit")
    w.add_argument("-o", "--output", default=None, help="write every row to a .csv or .jsonl file")
    w.add_argument("--plot", default=None, metavar="PNG", help="draw time and memory against the swept variable")
    w.add_argument("--x", default=None, help="swept key on the plot's x axis (default: the first swept one)")
    w.add_argument("--time", default="total_time_s", help="time column to plot (default total_time_s)")
    w.add_argument("--jobs", type=integer, default=None, help="worker processes (default: all cores)")
    w.add_argument("--executor", default="process", help="process | serial | dask | ray (dask/ray: the extras)")
    w.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    w.set_defaults(func=_cmd_sweep)


def _cmd_recommend(a: argparse.Namespace) -> int:
    """Rank strategy, sharding, batch, precision and explain the winner."""
    from ..explore.commands import recommend_command

    fixed = {
        k: getattr(a, k)
        for k in (
            "dataset",
            "input_shape",
            "num_classes",
            "vocab",
            "train_samples",
            "epochs",
            "optimizer",
            "memory_format",
            "wrap",
            "loader_workers",
            "grad_accumulation",
        )
    }
    return recommend_command(
        model=a.model,
        cluster=a.cluster,
        gpus=a.gpus,
        memory_budget=a.memory_budget,
        objective=a.objective,
        price_per_gpu_hour=a.price_per_gpu_hour,
        batch_sizes=a.batch_size,
        precisions=a.precision,
        strategies=a.strategy,
        allow_stale=a.allow_stale,
        fixed=fixed,
        top=a.top,
        as_json=a.json,
    )


def add_recommend_parser(sub) -> None:
    r = sub.add_parser("recommend", help="rank strategies, sharding, batch and precision for a model and cluster")
    r.add_argument("--model", required=True, help="zoo model name or package.module:factory")
    r.add_argument("--cluster", default=None, help="preset name or cluster YAML (default a100-80gb-nvlink)")
    r.add_argument(
        "--gpus", type=integer, default=None, help="GPU count (default: try powers of two up to the preset's size)"
    )
    r.add_argument(
        "--memory-budget",
        default=None,
        metavar="GIB",
        help="per-GPU memory limit: a number of GiB, or 40GiB / 42GB / 900MiB (default: the GPU's memory)",
    )
    r.add_argument("--objective", default="time", help="time | memory | cost (default time)")
    r.add_argument(
        "--price-per-gpu-hour",
        type=number,
        default=None,
        help="price of one GPU-hour, for --objective cost (default: rank by GPU-hours)",
    )
    r.add_argument(
        "--strategy",
        default=None,
        metavar="S[,S...]",
        help="strategies to rank (ddp, fsdp-full, fsdp-grad_op, fsdp-hybrid, fsdp-none, ps-sync, ...)",
    )
    r.add_argument("--batch-size", default=None, metavar="B[,B...]", help="per-GPU batch sizes (default 16,32,64,128)")
    r.add_argument(
        "--precision",
        default=None,
        metavar="P[,P...]",
        help="precisions (default: fp32 and what the GPU runs faster: tf32, bf16 or fp16-amp)",
    )
    r.add_argument("--allow-stale", action="store_true", help="also rank ps-async and ps-ssp (stale updates)")
    r.add_argument("--dataset", default=None, help="cifar10 | mnist | imagenet (default cifar10)")
    r.add_argument(
        "--input",
        dest="input_shape",
        default=None,
        help="one sample's shape: CxHxW images, any AxB... for a factory model (as simdl predict)",
    )
    r.add_argument("--vocab", type=integer, default=None, help="inputs are token ids below this vocabulary size")
    r.add_argument("--classes", dest="num_classes", type=integer, default=None, help="number of classes")
    r.add_argument("--samples", dest="train_samples", type=integer, default=None, help="training samples per epoch")
    r.add_argument("--epochs", type=number, default=None, help="epochs (default 10)")
    r.add_argument("--optimizer", default=None, help="sgd | momentum | adam | adamw | lamb (default momentum)")
    r.add_argument(
        "--memory-format",
        default=None,
        help="contiguous (NCHW) | channels_last (NHWC) (default contiguous; GPU kernel model only)",
    )
    r.add_argument("--wrap", default=None, help="FSDP wrap policy: block | size:N | none (default block)")
    r.add_argument("--loader-workers", type=integer, default=None, help="DataLoader workers per rank (default 4)")
    r.add_argument("--grad-accumulation", type=integer, default=None, help="micro-steps per optimizer step")
    r.add_argument("--top", type=integer, default=10, help="rows of the ranking to print (default 10)")
    r.add_argument("--json", action="store_true", help="print the whole ranking as JSON")
    r.set_defaults(func=_cmd_recommend)
