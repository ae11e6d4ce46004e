"""Options shared by the subcommands: argument types and the prediction and simulator options."""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from ..errors import SimdlError

# The simulator keeps every event of every iteration (for traces and plots): a bound keeps a
# mistyped --iterations from running for hours and filling the memory. Measured: 200 iterations
# of the default trace (vgg16, FSDP, 4 ranks) are 137 k events, a 21 MB trace, 2.6 s of CPU and
# 200 MB peak RSS, growing in proportion. Steady state is reached in a few iterations
# (simdl.sim.engine's defaults are 3, more for asynchronous PS).
MAX_SIM_ITERATIONS = 500


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump; main() adds "error:" once
        raise SimdlError(f"{self.prog}: {message}")

    def format_help(self) -> str:
        from .strategy_flags import fill_lazy_help

        fill_lazy_help(self._actions)
        return super().format_help()

    def _get_formatter(self):  # argparse's width (columns - 2), found without shutil (simdl.startup)
        from ..startup import terminal_columns

        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def number(text: str) -> float:
    """A finite number: nan and inf are refused here, so none reaches a prediction or its JSON."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def wait_seconds(text: str) -> float:
    """--wait-quiet: finite seconds >= 0, or -1 for "do not measure"."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v == -1 or 0 <= v < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0, or -1 (do not measure)")
    return v


def choices_metavar(names) -> str:
    """A metavar that shows the accepted names as argparse shows choices ({a,b,c}); the value
    itself is checked by simdl, whose error suggests the closest name."""
    return "{" + ",".join(names) + "}"


PREDICT_EXAMPLES = """examples:
  simdl predict --model resnet50 --strategy ddp --gpus 8 --cluster dgx-a100
  simdl predict --model vgg16 --strategy fsdp --sharding hybrid --gpus 16 --cluster dgx-a100 --engine sim --json
"""


def add_prediction_args(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The options every prediction takes, in help groups; returns the groups so that a
    subcommand adds its own options where they belong (engine, output)."""
    g = {name: p.add_argument_group(name) for name in ("workload", "strategy", "cluster", "engine", "output")}
    s, e = g["strategy"], g["engine"]
    _add_workload_args(g["workload"])
    _add_strategy_args(s)
    _add_cluster_args(g["cluster"])
    e.add_argument(
        "--engine",
        default="analytic",
        metavar=choices_metavar(("analytic", "sim")),
        help="analytic (closed form) or sim (SimPy simulator); default analytic",
    )
    s.add_argument(
        "--deepspeed-config",
        default=None,
        metavar="JSON",
        help="a DeepSpeed ds_config.json: its ZeRO stage (zero0..zero3), options, batch and precision",
    )
    from .strategy_flags import add_strategy_flags

    add_strategy_flags(s, {act.dest for act in p._actions})  # a registered strategy's own keywords
    return g


def _add_workload_args(w: argparse._ArgumentGroup) -> None:
    """The model, its input and the training settings."""
    from ..workload.datasets import DATASETS
    from ..workload.workload import MEMORY_FORMAT_MEANING, MEMORY_FORMATS, OPTIMIZER_MEANING, OPTIMIZERS, PRECISIONS

    w.add_argument(
        "--model",
        default="vgg16",
        help="zoo model name, package.module:factory or ./file.py:factory "
        "(default vgg16; `simdl models` lists the zoo)",
    )
    w.add_argument("--dataset", default=None, metavar=choices_metavar(DATASETS), help="dataset (default cifar10)")
    w.add_argument(
        "--input",
        dest="input_shape",
        default=None,
        help="one sample's shape, overrides the dataset's: CxHxW images; any AxB... for a "
        "package.module:factory model (128x512 vectors; 512 token ids with --vocab)",
    )
    w.add_argument(
        "--vocab",
        type=integer,
        default=None,
        help="inputs are int64 token ids below this vocabulary size (factory models; passed "
        "to a factory that takes vocab_size)",
    )
    w.add_argument("--classes", dest="num_classes", type=integer, default=None, help="number of classes")
    w.add_argument("--samples", dest="train_samples", type=integer, default=None, help="training samples per epoch")
    w.add_argument("--batch-size", type=integer, default=None, help="per-GPU batch size (default 32)")
    w.add_argument("--epochs", type=number, default=None, help="epochs (default 10)")
    w.add_argument(
        "--optimizer",
        default=None,
        metavar=choices_metavar(OPTIMIZERS),
        help="; ".join(f"{k}: {OPTIMIZER_MEANING[k]}" for k in OPTIMIZERS) + " (default momentum)",
    )
    w.add_argument("--precision", default=None, metavar=choices_metavar(PRECISIONS), help="precision (default fp32)")
    w.add_argument(
        "--memory-format",
        default=None,
        metavar=choices_metavar(MEMORY_FORMATS),
        help="; ".join(f"{k}: {MEMORY_FORMAT_MEANING[k]}" for k in MEMORY_FORMATS)
        + " (default contiguous; GPU kernel model only: changes nothing on CPU devices)",
    )
    w.add_argument("--grad-accumulation", type=integer, default=1, help="micro-steps per optimizer step")
    w.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="checkpoint every block (torch.utils.checkpoint): less memory, recomputed forward",
    )
    w.add_argument("--loader-workers", type=integer, default=None, help="DataLoader workers per rank (default 4)")


def _add_strategy_args(s: argparse._ArgumentGroup) -> None:
    """The strategy and the keywords the CLI names itself (a registered strategy's other
    keywords are added by simdl.cli.strategy_flags)."""
    from ..cluster.ps_placement import PLACEMENTS
    from ..strategies import registry
    from ..strategies.config import ALGORITHMS, SHARDINGS

    s.add_argument(
        "--strategy", default="fsdp", metavar=choices_metavar(registry.names()), help="strategy (default fsdp)"
    )
    s.add_argument("--sharding", default=None, metavar=choices_metavar(SHARDINGS), help="FSDP sharding (default full)")
    s.add_argument("--wrap", default=None, help="FSDP wrap policy: block | size:N | none (default block)")
    s.add_argument(
        "--cpu-offload",
        action="store_true",
        help="FSDP CPUOffloadPolicy: sharded params, grads and optimizer state in host memory",
    )
    s.add_argument(
        "--reshard-root",
        action="store_true",
        help="FSDP full/hybrid: the root was given reshard_after_forward=True explicitly, so it is "
        "resharded after forward and gathered again for backward (default: kept, FSDP2's default)",
    )
    s.add_argument(
        "--shard-group",
        type=integer,
        default=None,
        help="FSDP hybrid: ranks per shard group, the inner dimension of FSDP2's 2-D mesh (default: "
        "the GPUs of a node); e.g. --gpus 4 --shard-group 2 is 2 replicas x 2 shards on one node",
    )
    s.add_argument("--bucket-cap-mb", type=number, default=None, help="DDP bucket cap in MiB (default 25)")
    s.add_argument("--staleness-bound", type=integer, default=None, help="ps-ssp staleness bound (default 3)")
    s.add_argument(
        "--ps-servers", type=integer, default=None, help="parameter-server shards, one per server node (default 1)"
    )
    s.add_argument(
        "--ps-placement",
        default=None,
        metavar=choices_metavar(PLACEMENTS),
        help="where the servers run: the cluster's own PS nodes, or a process on a worker node, "
        "priced on its NIC and host (default dedicated where the cluster has PS nodes)",
    )
    s.add_argument(
        "--algorithm", default=None, metavar=choices_metavar(ALGORITHMS), help="collective algorithm (default auto)"
    )


def _add_cluster_args(c: argparse._ArgumentGroup) -> None:
    """The cluster and the ranks on it."""
    c.add_argument(
        "--cluster",
        default=None,
        help="preset name or path to a cluster YAML (default a100-80gb-nvlink; `simdl clusters` lists them)",
    )
    c.add_argument("--gpus", type=integer, default=4, help="number of GPUs (ranks / PS workers), default 4")
    c.add_argument("--nodes", type=integer, default=None, help="nodes to spread the GPUs over (default: fill nodes)")


def prediction_kwargs(a: argparse.Namespace) -> dict:
    keys = (
        "model",
        "strategy",
        "gpus",
        "nodes",
        "cluster",
        "dataset",
        "input_shape",
        "num_classes",
        "vocab",
        "train_samples",
        "batch_size",
        "epochs",
        "optimizer",
        "precision",
        "memory_format",
        "sharding",
        "wrap",
        "staleness_bound",
        "ps_servers",
        "bucket_cap_mb",
        "algorithm",
        "loader_workers",
        "grad_accumulation",
        "engine",
        "activation_checkpointing",
        "cpu_offload",
        "reshard_root",
        "shard_group",
        "ps_placement",
        "deepspeed_config",
    )
    from ..strategies import registry

    extra = [k for k, _, _ in registry.cli_options(set(keys)) if getattr(a, k, None) is not None]
    for key in ("cuda_alloc_conf", "cuda"):  # predict, maxbatch and memplot take them
        if getattr(a, key, None) is not None:
            extra.append(key)
    return {k: getattr(a, k) for k in (*keys, *extra)}


def add_sim_args(p: argparse._ActionsContainer) -> None:
    """Simulator options, passed to predict(**engine_options) with --engine sim."""
    p.add_argument(
        "--straggler",
        action="append",
        default=None,
        metavar="rank=R,factor=F",
        help="slow a rank's compute by F (R may be A-B); repeatable; simulator only",
    )
    p.add_argument(
        "--jitter",
        default=None,
        metavar="DIST:SPREAD",
        help="random compute-time factor: lognormal:0.1 | normal:0.05 | uniform:0.2 | none",
    )
    p.add_argument("--seed", type=integer, default=None, help="seed of the jitter draws (default 0)")
    p.add_argument(
        "--iterations",
        type=integer,
        default=None,
        help=f"iterations to simulate (default 3, at most {MAX_SIM_ITERATIONS})",
    )
    p.add_argument("--warmup", type=integer, default=None, help="warm-up iterations excluded (default 1)")


def sim_kwargs(a: argparse.Namespace) -> dict:
    given = {k: getattr(a, k, None) for k in ("straggler", "jitter", "seed", "iterations", "warmup")}
    given = {k: v for k, v in given.items() if v is not None}
    if given and a.engine != "sim":
        raise SimdlError(f"--{next(iter(given))} needs --engine sim (the analytic engine has no timeline)")
    n = given.get("iterations")
    if n is not None and not 1 <= n <= MAX_SIM_ITERATIONS:
        raise SimdlError(
            f"--iterations {n}: accepted: 1 to {MAX_SIM_ITERATIONS} (the simulator keeps every "
            "event; the step settles within a few iterations)"
        )
    return given


def add_alloc_conf_arg(group) -> None:
    """``--cuda-alloc-conf``: caching allocator options (simdl.memory.allocconf parses them)."""
    group.add_argument(
        "--cuda-alloc-conf",
        metavar="CONF",
        default=None,
        help="allocator options in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "
        "expandable_segments:True,max_split_size_mb:128 (keys: expandable_segments, "
        "max_split_size_mb, roundup_power2_divisions; default: the environment variable)",
    )
    group.add_argument(
        "--cuda",
        metavar="VERSION",
        default=None,
        help="CUDA version of the ranks' PyTorch build (torch.version.cuda, e.g. 12.8 or 13.0): sets the "
        "CUDA context's size in the device total (default: the cluster's cuda, else the GPU file's default_cuda)",
    )
