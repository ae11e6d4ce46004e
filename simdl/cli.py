"""The ``simdl`` command line.

Kept small and fast: each subcommand imports what it needs when it runs, so
``simdl predict`` on a built-in model never imports torch (or networkx, matplotlib).
Bad input prints one line ``simdl: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

from .startup import configure_process

configure_process()  # before numpy loads (simdl.startup)

from .errors import SimdlError  # noqa: E402

# The simulator keeps every event of every iteration (for traces and plots): a bound keeps a
# mistyped --iterations from running for hours and filling the memory. Measured: 200 iterations
# of the default trace (vgg16, FSDP, 4 ranks) are 137 k events, a 21 MB trace, 2.6 s of CPU and
# 200 MB peak RSS, growing in proportion. Steady state is reached in a few iterations
# (simdl.sim.engine's defaults are 3, more for asynchronous PS).
MAX_SIM_ITERATIONS = 500


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump; main() adds "error:" once
        raise SimdlError(f"{self.prog}: {message}")

    def _get_formatter(self):  # argparse's width (columns - 2), found without shutil (simdl.startup)
        from .startup import terminal_columns

        return self.formatter_class(prog=self.prog, width=terminal_columns() - 2)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _number(text: str) -> float:
    """A finite number: nan and inf are refused here, so none reaches a prediction or its JSON."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def _wait_seconds(text: str) -> float:
    """--wait-quiet: finite seconds >= 0, or -1 for "do not measure"."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (v == -1 or 0 <= v < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0, or -1 (do not measure)")
    return v


def _choices(names) -> str:
    """A metavar that shows the accepted names as argparse shows choices ({a,b,c}); the value
    itself is checked by simdl, whose error suggests the closest name."""
    return "{" + ",".join(names) + "}"


PREDICT_EXAMPLES = """examples:
  simdl predict --model resnet50 --strategy ddp --gpus 8 --cluster dgx-a100
  simdl predict --model vgg16 --strategy fsdp --sharding hybrid --gpus 16 --cluster dgx-a100 --engine sim --json
"""


def _add_prediction_args(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The options every prediction takes, in help groups; returns the groups so that a
    subcommand adds its own options where they belong (engine, output)."""
    from .cluster.ps_placement import PLACEMENTS
    from .strategies import registry
    from .strategies.config import ALGORITHMS, SHARDINGS
    from .workload.datasets import DATASETS
    from .workload.workload import OPTIMIZER_MEANING, OPTIMIZERS, PRECISIONS

    g = {name: p.add_argument_group(name) for name in ("workload", "strategy", "cluster", "engine", "output")}
    w, s, c, e = g["workload"], g["strategy"], g["cluster"], g["engine"]
    w.add_argument("--model", default="vgg16", help="zoo model name, package.module:factory or ./file.py:factory "
                   "(default vgg16; `simdl models` lists the zoo)")
    w.add_argument("--dataset", default=None, metavar=_choices(DATASETS), help="dataset (default cifar10)")
    w.add_argument("--input", dest="input_shape", default=None,
                   help="one sample's shape, overrides the dataset's: CxHxW images; any AxB... for a "
                        "package.module:factory model (128x512 vectors; 512 token ids with --vocab)")
    w.add_argument("--vocab", type=_int, default=None,
                   help="inputs are int64 token ids below this vocabulary size (factory models; passed "
                        "to a factory that takes vocab_size)")
    w.add_argument("--classes", dest="num_classes", type=_int, default=None, help="number of classes")
    w.add_argument("--samples", dest="train_samples", type=_int, default=None, help="training samples per epoch")
    w.add_argument("--batch-size", type=_int, default=None, help="per-GPU batch size (default 32)")
    w.add_argument("--epochs", type=_number, default=None, help="epochs (default 10)")
    w.add_argument("--optimizer", default=None, metavar=_choices(OPTIMIZERS),
                   help="; ".join(f"{k}: {OPTIMIZER_MEANING[k]}" for k in OPTIMIZERS) + " (default momentum)")
    w.add_argument("--precision", default=None, metavar=_choices(PRECISIONS), help="precision (default fp32)")
    w.add_argument("--grad-accumulation", type=_int, default=1, help="micro-steps per optimizer step")
    w.add_argument("--activation-checkpointing", action="store_true",
                   help="checkpoint every block (torch.utils.checkpoint): less memory, recomputed forward")
    w.add_argument("--loader-workers", type=_int, default=None, help="DataLoader workers per rank (default 4)")
    s.add_argument("--strategy", default="fsdp", metavar=_choices(registry.names()), help="strategy (default fsdp)")
    s.add_argument("--sharding", default=None, metavar=_choices(SHARDINGS), help="FSDP sharding (default full)")
    s.add_argument("--wrap", default=None, help="FSDP wrap policy: block | size:N | none (default block)")
    s.add_argument("--cpu-offload", action="store_true",
                   help="FSDP CPUOffloadPolicy: sharded params, grads and optimizer state in host memory")
    s.add_argument("--reshard-root", action="store_true",
                   help="FSDP full/hybrid: the root was given reshard_after_forward=True explicitly, so it is "
                        "resharded after forward and gathered again for backward (default: kept, FSDP2's default)")
    s.add_argument("--shard-group", type=_int, default=None,
                   help="FSDP hybrid: ranks per shard group, the inner dimension of FSDP2's 2-D mesh (default: "
                        "the GPUs of a node); e.g. --gpus 4 --shard-group 2 is 2 replicas x 2 shards on one node")
    s.add_argument("--bucket-cap-mb", type=_number, default=None, help="DDP bucket cap in MiB (default 25)")
    s.add_argument("--staleness-bound", type=_int, default=None, help="ps-ssp staleness bound (default 3)")
    s.add_argument("--ps-servers", type=_int, default=None,
                   help="parameter-server shards, one per server node (default 1)")
    s.add_argument("--ps-placement", default=None, metavar=_choices(PLACEMENTS),
                   help="where the servers run: the cluster's own PS nodes, or a process on a worker node, "
                        "priced on its NIC and host (default dedicated where the cluster has PS nodes)")
    s.add_argument("--algorithm", default=None, metavar=_choices(ALGORITHMS), help="collective algorithm (default auto)")
    c.add_argument("--cluster", default=None, help="preset name or path to a cluster YAML (default a100-80gb-nvlink; "
                   "`simdl clusters` lists them)")
    c.add_argument("--gpus", type=_int, default=4, help="number of GPUs (ranks / PS workers), default 4")
    c.add_argument("--nodes", type=_int, default=None, help="nodes to spread the GPUs over (default: fill nodes)")
    e.add_argument("--engine", default="analytic", metavar=_choices(("analytic", "sim")),
                   help="analytic (closed form) or sim (SimPy simulator); default analytic")
    s.add_argument("--deepspeed-config", default=None, metavar="JSON",
                   help="a DeepSpeed ds_config.json: its ZeRO stage (zero0..zero3), options, batch and precision")
    declared = {act.dest for act in p._actions}
    for key, spec in registry.cli_options(declared):  # a registered strategy's own keywords
        s.add_argument("--" + key.replace("_", "-"), dest=key, type=spec.cli_type, default=None, help=spec.help)
    return g


def _prediction_kwargs(a: argparse.Namespace) -> dict:
    keys = ("model", "strategy", "gpus", "nodes", "cluster", "dataset", "input_shape", "num_classes", "vocab",
            "train_samples", "batch_size", "epochs", "optimizer", "precision", "sharding", "wrap",
            "staleness_bound", "ps_servers", "bucket_cap_mb", "algorithm", "loader_workers",
            "grad_accumulation", "engine", "activation_checkpointing", "cpu_offload", "reshard_root",
            "shard_group", "ps_placement", "deepspeed_config")
    from .strategies import registry

    extra = [k for k, _ in registry.cli_options(set(keys)) if getattr(a, k, None) is not None]
    return {k: getattr(a, k) for k in (*keys, *extra)}


def _add_sim_args(p: argparse.ArgumentParser) -> None:
    """Simulator options, passed to predict(**engine_options) with --engine sim."""
    p.add_argument("--straggler", action="append", default=None, metavar="rank=R,factor=F",
                   help="slow a rank's compute by F (R may be A-B); repeatable; simulator only")
    p.add_argument("--jitter", default=None, metavar="DIST:SPREAD",
                   help="random compute-time factor: lognormal:0.1 | normal:0.05 | uniform:0.2 | none")
    p.add_argument("--seed", type=_int, default=None, help="seed of the jitter draws (default 0)")
    p.add_argument("--iterations", type=_int, default=None,
                   help=f"iterations to simulate (default 3, at most {MAX_SIM_ITERATIONS})")
    p.add_argument("--warmup", type=_int, default=None, help="warm-up iterations excluded (default 1)")


def _sim_kwargs(a: argparse.Namespace) -> dict:
    given = {k: getattr(a, k, None) for k in ("straggler", "jitter", "seed", "iterations", "warmup")}
    given = {k: v for k, v in given.items() if v is not None}
    if given and a.engine != "sim":
        raise SimdlError(f"--{next(iter(given))} needs --engine sim (the analytic engine has no timeline)")
    n = given.get("iterations")
    if n is not None and not 1 <= n <= MAX_SIM_ITERATIONS:
        raise SimdlError(f"--iterations {n}: accepted: 1 to {MAX_SIM_ITERATIONS} (the simulator keeps every "
                         "event; the step settles within a few iterations)")
    return given


def _cmd_predict(a: argparse.Namespace) -> int:
    from .predict import predict

    result = predict(**_prediction_kwargs(a), **_sim_kwargs(a))
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
    if a.name is not None:
        raise SimdlError(f"simdl clusters list: takes no name (got {a.name!r}); accepted: simdl clusters show {a.name}")
    print(format_cluster_list([load_cluster(n) for n in cluster_names()]))
    return 0


def _progress(a: argparse.Namespace) -> None:
    """One line on stderr before a long simulation, so that a run of many iterations is not silent."""
    if (a.iterations or 0) > 20:
        print(f"simdl: simulating {a.iterations} iterations of {a.gpus} ranks...", file=sys.stderr, flush=True)


def _simulated_run(a: argparse.Namespace):
    from .predict import predict

    a.engine = "sim"
    return predict(**_prediction_kwargs(a), **_sim_kwargs(a), return_run=True)


def _cmd_trace(a: argparse.Namespace) -> int:
    from .outpaths import check_output_file
    from .sim.trace import write_chrome_trace

    if a.max_links is not None and a.max_links < 0:
        raise SimdlError(f"--max-links {a.max_links}: accepted: an integer >= 0 (link tracks to keep)")
    check_output_file(a.output)  # before the simulation, not after
    _progress(a)
    n = write_chrome_trace(_simulated_run(a), a.output, max_links=a.max_links)
    print(f"wrote {a.output}: {n} trace events (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _cmd_plot(a: argparse.Namespace) -> int:
    from .memory.commands import check_figure_path, sim_memory_plot_command

    check_figure_path(a.output)  # before minutes of simulation, not after
    _progress(a)
    if a.memory:
        return sim_memory_plot_command(_simulated_run(a), a.output)
    from .sim.plot import plot_run

    plot_run(_simulated_run(a), a.output)
    print(f"wrote {a.output}")
    return 0


def _cmd_calibrate(a: argparse.Namespace) -> int:
    """Measure this cluster with torchrun and write a profile."""
    from .calibrate.run import StageFailed, calibrate, make_settings, new_run_dir, resume

    try:
        if a.resume:
            resume(a.resume, output=a.output, wait_quiet_s=a.wait_quiet)
            return 0
        if a.nproc_per_node is None:
            raise SimdlError("simdl calibrate: give --nproc-per-node P (ranks per node), or --resume RUN_DIR")
        settings = make_settings(
            nproc_per_node=a.nproc_per_node, quick=a.quick, time_budget=a.time_budget, output=a.output,
            name=a.name, gpu=a.gpu, stages=_stages(a.stages), profile_models=a.profile_models,
            compute_models=a.compute_models, collective_passes=a.collective_passes, nnodes=a.nnodes, node_rank=a.node_rank, rdzv_backend=a.rdzv_backend,
            rdzv_endpoint=a.rdzv_endpoint, rdzv_id=a.rdzv_id, master_addr=a.master_addr, master_port=a.master_port)
        calibrate(settings, new_run_dir(a.run_root), wait_quiet_s=a.wait_quiet)
        return 0
    except StageFailed as e:
        print(f"simdl: calibration stopped: {e}", file=sys.stderr)
        return 1


def _stages(text: str | None) -> tuple[str, ...]:
    from .calibrate.records import STAGES

    if not text:
        return STAGES
    chosen = tuple(s.strip() for s in text.split(",") if s.strip())
    for s in chosen:
        if s not in STAGES:
            from .errors import unknown

            raise unknown("calibration stage", s, STAGES)
    return chosen


def _add_calibrate_parser(sub) -> None:
    k = sub.add_parser("calibrate", help="measure this cluster with short torchrun runs and write a profile")
    k.add_argument("--nproc-per-node", type=_int, default=None, help="ranks per node (GPUs, or CPU processes)")
    k.add_argument("--nnodes", default=None, help="torchrun --nnodes (N or MIN:MAX)")
    k.add_argument("--node-rank", type=_int, default=None, help="torchrun --node-rank")
    k.add_argument("--rdzv-backend", default=None, help="torchrun --rdzv-backend (e.g. c10d)")
    k.add_argument("--rdzv-endpoint", default=None, help="torchrun --rdzv-endpoint HOST:PORT")
    k.add_argument("--rdzv-id", default=None, help="torchrun --rdzv-id")
    k.add_argument("--master-addr", default=None, help="torchrun --master-addr")
    k.add_argument("--master-port", type=_int, default=None, help="torchrun --master-port")
    k.add_argument("--quick", action="store_true", help="fewer sizes, models and repeats (a few minutes)")
    k.add_argument("--time-budget", type=_number, default=None,
                   help="seconds of measurement over all stages (default 150 quick, 900 full)")
    k.add_argument("-o", "--output", default=None, help="profile YAML to write (also kept in the run directory)")
    k.add_argument("--name", default=None, help="profile name (default: the output file's stem)")
    k.add_argument("--gpu", default=None, help="GPU file for the peaks (default: from the device name; cpu on CPU)")
    k.add_argument("--stages", default=None, help="comma-separated subset of collectives,compute,strategies,ps (default all)")
    k.add_argument("--profile-models", default=None, metavar="M:D:B1,B2;...",
                   help="also profile these models' rows at these batch sizes (e.g. vgg16:cifar10:24,48): "
                        "predictions of them then use the measured row times (a compute profile)")
    k.add_argument("--compute-models", default=None, metavar="M:D:B1,B2;...",
                   help="the compute stage's models instead of its default set: the roofline is fitted on all "
                        "but the last, which is held out (e.g. resnet18:cifar10:32,128;vgg16:cifar10:32,128)")
    k.add_argument("--collective-passes", type=_int, default=None, metavar="N",
                   help="passes over the collective size grid (default 7, --quick 3); more narrow each size's "
                        "time on a noisy host, in proportion more time (within the collectives' budget share)")
    k.add_argument("--run-root", default="runs", help="where run directories go (default runs/, git-ignored)")
    k.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue an interrupted run")
    k.add_argument("--wait-quiet", type=_wait_seconds, default=120.0, metavar="SECONDS",
                   help="before measuring, wait up to this long while other processes keep more than a quarter of "
                        "a core busy, then start anyway (the profile records how busy the machine was before and "
                        "during each stage); default 120, 0: measure without waiting, -1: do not measure")
    k.set_defaults(func=_cmd_calibrate)


def _cmd_report(a: argparse.Namespace) -> int:
    from pathlib import Path

    if not a.results and not a.paper:
        raise SimdlError("simdl report: give a results JSONL (from python -m validate.run) or --paper")
    if not a.results:  # --paper alone: the predictions at the studies' scale, printed
        from .report.paper import paper_tables

        print(paper_tables())
        return 0
    import io

    from .outpaths import check_output_dir
    from .report.results_file import read_records

    check_output_dir(a.output)
    for f in a.results:  # every file read and checked before anything is written
        read_records(Path(f), warn=io.StringIO(), for_report=True)  # the report's own read gives the warning
    from .report.validation import build_report

    md = build_report(a.results, a.output, paper=a.paper, repeats=a.repeats,
                      command=f"simdl report {' '.join(a.results)} -o {a.output}" + (" --paper" if a.paper else "")
                      + (" --repeats" if a.repeats else ""))
    print(md)
    return 0


def _cmd_sweep(a: argparse.Namespace) -> int:
    """A grid of predictions: comma lists and --set key=v1,v2 are the axes."""
    from .explore.commands import sweep_command

    if a.jobs is not None and a.jobs < 1:
        raise SimdlError(f"simdl sweep: --jobs {a.jobs}: accepted: an integer >= 1 (worker processes)")
    options = {k: getattr(a, k) for k in a.sweep_keys}
    return sweep_command(options, a.set or (), jobs=a.jobs, executor=a.executor,
                         progress=False if a.no_progress else None, output=a.output, plot=a.plot, x=a.x,
                         time_column=a.time, list_keys=a.list_keys)


def _add_sweep_parser(sub) -> None:
    w = sub.add_parser("sweep", help="predict a grid of configurations (comma lists, --set key=v1,v2) in parallel")
    # The same options as predict, each taking a comma list: read from _add_prediction_args so that
    # an option added there is sweepable here too.
    proto = argparse.ArgumentParser(add_help=False)
    _add_prediction_args(proto)
    keys = []
    for act in proto._actions:
        if act.option_strings:
            w.add_argument(*act.option_strings, dest=act.dest, default=None, metavar="V[,V...]",
                           help=f"{act.help}; a comma list sweeps")
            keys.append(act.dest)
    w.set_defaults(sweep_keys=tuple(keys))
    w.add_argument("--set", action="append", default=None, metavar="KEY=V1,V2",
                   help="sweep any predict keyword, simulator option or cluster override (repeatable; "
                        "--list-keys shows them), e.g. --set nic_Gb_per_s=25,100,400")
    w.add_argument("--list-keys", action="store_true", help="print the keys --set accepts and exit")
    w.add_argument("-o", "--output", default=None, help="write every row to a .csv or .jsonl file")
    w.add_argument("--plot", default=None, metavar="PNG", help="draw time and memory against the swept variable")
    w.add_argument("--x", default=None, help="swept key on the plot's x axis (default: the first swept one)")
    w.add_argument("--time", default="total_time_s", help="time column to plot (default total_time_s)")
    w.add_argument("--jobs", type=_int, default=None, help="worker processes (default: all cores)")
    w.add_argument("--executor", default="process", help="process | serial | dask | ray (dask/ray: the extras)")
    w.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    w.set_defaults(func=_cmd_sweep)


def _cmd_recommend(a: argparse.Namespace) -> int:
    """Rank strategy, sharding, batch, precision and explain the winner."""
    from .explore.commands import recommend_command

    fixed = {k: getattr(a, k) for k in ("dataset", "input_shape", "num_classes", "vocab", "train_samples", "epochs",
                                         "optimizer", "wrap", "loader_workers", "grad_accumulation")}
    return recommend_command(model=a.model, cluster=a.cluster, gpus=a.gpus, memory_budget=a.memory_budget,
                             objective=a.objective, price_per_gpu_hour=a.price_per_gpu_hour,
                             batch_sizes=a.batch_size, precisions=a.precision, strategies=a.strategy,
                             allow_stale=a.allow_stale, fixed=fixed, top=a.top, as_json=a.json)


def _add_recommend_parser(sub) -> None:
    r = sub.add_parser("recommend", help="rank strategies, sharding, batch and precision for a model and cluster")
    r.add_argument("--model", required=True, help="zoo model name or package.module:factory")
    r.add_argument("--cluster", default=None, help="preset name or cluster YAML (default a100-80gb-nvlink)")
    r.add_argument("--gpus", type=_int, default=None, help="GPU count (default: try powers of two up to the preset's size)")
    r.add_argument("--memory-budget", default=None, metavar="GIB",
                   help="per-GPU memory limit: a number of GiB, or 40GiB / 42GB / 900MiB (default: the GPU's memory)")
    r.add_argument("--objective", default="time", help="time | memory | cost (default time)")
    r.add_argument("--price-per-gpu-hour", type=_number, default=None,
                   help="price of one GPU-hour, for --objective cost (default: rank by GPU-hours)")
    r.add_argument("--strategy", default=None, metavar="S[,S...]",
                   help="strategies to rank (ddp, fsdp-full, fsdp-grad_op, fsdp-hybrid, fsdp-none, ps-sync, ...)")
    r.add_argument("--batch-size", default=None, metavar="B[,B...]", help="per-GPU batch sizes (default 16,32,64,128)")
    r.add_argument("--precision", default=None, metavar="P[,P...]",
                   help="precisions (default: fp32 and what the GPU runs faster: tf32, bf16 or fp16-amp)")
    r.add_argument("--allow-stale", action="store_true", help="also rank ps-async and ps-ssp (stale updates)")
    r.add_argument("--dataset", default=None, help="cifar10 | mnist | imagenet (default cifar10)")
    r.add_argument("--input", dest="input_shape", default=None,
                   help="one sample's shape: CxHxW images, any AxB... for a factory model (as simdl predict)")
    r.add_argument("--vocab", type=_int, default=None, help="inputs are token ids below this vocabulary size")
    r.add_argument("--classes", dest="num_classes", type=_int, default=None, help="number of classes")
    r.add_argument("--samples", dest="train_samples", type=_int, default=None, help="training samples per epoch")
    r.add_argument("--epochs", type=_number, default=None, help="epochs (default 10)")
    r.add_argument("--optimizer", default=None, help="sgd | momentum | adam | adamw | lamb (default momentum)")
    r.add_argument("--wrap", default=None, help="FSDP wrap policy: block | size:N | none (default block)")
    r.add_argument("--loader-workers", type=_int, default=None, help="DataLoader workers per rank (default 4)")
    r.add_argument("--grad-accumulation", type=_int, default=None, help="micro-steps per optimizer step")
    r.add_argument("--top", type=_int, default=10, help="rows of the ranking to print (default 10)")
    r.add_argument("--json", action="store_true", help="print the whole ranking as JSON")
    r.set_defaults(func=_cmd_recommend)


def _cmd_maxbatch(a: argparse.Namespace) -> int:
    """The largest per-GPU batch that fits: binary search on the memory model."""
    from .memory.maxbatch import max_batch
    from .units import format_bytes

    kw = _prediction_kwargs(a)
    if kw.pop("batch_size") is not None:
        raise SimdlError(f"simdl maxbatch: searches the batch size; do not give --batch-size ({a.batch_size})")
    batch, r = max_batch(**kw)
    if a.json:
        from .jsonout import dumps

        print(dumps({"max_batch_size": batch, "prediction": r.to_dict()}, default=str))
        return 0
    c = r.config
    if batch == 0:
        print(f"{c.get('model')} / {c.get('label')} on {c.get('gpus')} x {c.get('gpu')}: not even batch 1 fits "
              f"(peak {format_bytes(r.peak_memory_bytes)} of {format_bytes(r.memory_capacity_bytes)})")
        return 1
    print(f"{c.get('model')} / {c.get('label')} on {c.get('gpus')} x {c.get('gpu')} ({c.get('cluster')}): "
          f"largest batch per GPU that fits: {batch} (peak {format_bytes(r.peak_memory_bytes)} of "
          f"{format_bytes(r.memory_capacity_bytes)}; tensors {format_bytes(r.peak_tensor_bytes)})")
    return 0


def _cmd_memplot(a: argparse.Namespace) -> int:
    """Memory over one iteration on the analytic schedule, per rank role, as a PNG."""
    from .memory.commands import memplot_command

    return memplot_command(_prediction_kwargs(a), a.output, first_iteration=a.first_iteration)


def _add_memory_parsers(sub) -> None:
    mb = sub.add_parser("maxbatch", help="largest per-GPU batch that fits in GPU memory")
    _add_prediction_args(mb)["output"].add_argument("--json", action="store_true", help="print one JSON object")
    mb.set_defaults(func=_cmd_maxbatch)
    mp = sub.add_parser("memplot", help="per-rank memory over one iteration (analytic schedule) as a PNG")
    out = _add_prediction_args(mp)["output"]
    out.add_argument("-o", "--output", default="mem.png", help="PNG file (default mem.png)")
    out.add_argument("--first-iteration", action="store_true",
                    help="the first iteration: optimizer state created at the step")
    mp.set_defaults(func=_cmd_memplot)


def _version() -> str:
    from . import __version__

    return f"simdl {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simdl", description="Predict time and memory of distributed PyTorch training.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("predict", help="predict one configuration", epilog=PREDICT_EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g = _add_prediction_args(p)
    _add_sim_args(g["engine"])
    g["output"].add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_predict)
    t = sub.add_parser("trace", help="simulate and write a Chrome trace (Perfetto)")
    g = _add_prediction_args(t)
    _add_sim_args(g["engine"])
    g["output"].add_argument("-o", "--output", default="trace.json", help="output file (default trace.json)")
    g["output"].add_argument("--max-links", type=_int, default=None,
                             help="link tracks to keep, busiest first (default all)")
    t.set_defaults(func=_cmd_trace)
    pl = sub.add_parser("plot", help="simulate and draw the timeline and memory over time (PNG)")
    g = _add_prediction_args(pl)
    _add_sim_args(g["engine"])
    g["output"].add_argument("-o", "--output", default="timeline.png", help="output PNG (default timeline.png)")
    g["output"].add_argument("--memory", action="store_true",
                             help="only per-rank memory over time, stacked by category (as the studies draw it)")
    pl.set_defaults(func=_cmd_plot)
    m = sub.add_parser("models", help="list models and shipped workload tables")
    m.set_defaults(func=_cmd_models)
    c = sub.add_parser("clusters", help="list cluster presets, or `clusters show NAME`")
    c.add_argument("action", nargs="?", default=None, help="list | show")
    c.add_argument("name", nargs="?", default=None)
    c.set_defaults(func=_cmd_clusters)
    r = sub.add_parser("report", help="validation report from a results JSONL; --paper: the studies at full scale")
    r.add_argument("results", nargs="*", default=None,
                   help="results JSONL written by python -m validate.run; several are reported as one sweep "
                        "(a run in a later file replaces its record from an earlier one)")
    r.add_argument("-o", "--output", default="report", help="output directory (default report/)")
    r.add_argument("--paper", action="store_true", help="add simdl's predictions of the studies at their own scale")
    r.add_argument("--repeats", action="store_true",
                   help="the files are repeated sweeps: a run in several of them is pooled over its repeats "
                        "instead of replaced")
    r.set_defaults(func=_cmd_report)
    _add_calibrate_parser(sub)
    _add_sweep_parser(sub)
    _add_recommend_parser(sub)
    _add_memory_parsers(sub)
    return parser


def error_line(message: str) -> str:
    """``simdl predict: error: ...`` when the message names its command (argparse's and the
    commands' own), ``simdl: error: ...`` otherwise; one line either way."""
    prog, sep, rest = message.partition(": ")
    if sep and prog.split(" ")[0] == "simdl" and len(prog) < 40:
        return " ".join(f"{prog}: error: {rest}".split())
    return " ".join(f"simdl: error: {message}".split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named with the subcommand they were given to, as argparse's own errors are
            prog = f"simdl {args.command}" if getattr(args, "command", None) else "simdl"
            raise SimdlError(f"{prog}: unrecognized arguments: {' '.join(extra)}")
        if not getattr(args, "command", None):
            parser.print_help()
            return 2
        return args.func(args)
    except SimdlError as e:
        print(error_line(str(e)), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except SystemExit as e:  # --help and --version: argparse exits; main() returns the status
        return e.code if isinstance(e.code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
