"""``simdl predict``, ``trace``, ``plot``, ``maxbatch`` and ``memplot``: one configuration, predicted."""

from __future__ import annotations

import argparse
import sys

from ..errors import SimdlError
from .options import (
    PREDICT_EXAMPLES,
    add_alloc_conf_arg,
    add_prediction_args,
    add_sim_args,
    integer,
    prediction_kwargs,
    sim_kwargs,
)


def _cmd_predict(a: argparse.Namespace) -> int:
    from ..predict import predict

    result = predict(**prediction_kwargs(a), **sim_kwargs(a))
    if a.json:
        print(result.to_json())
    else:
        from ..report.text import format_result

        print(format_result(result))
    return 0


def _progress(a: argparse.Namespace) -> None:
    """One line on stderr before a long simulation, so that a run of many iterations is not silent."""
    if (a.iterations or 0) > 20:
        print(f"simdl: simulating {a.iterations} iterations of {a.gpus} ranks...", file=sys.stderr, flush=True)


def _simulated_run(a: argparse.Namespace):
    from ..predict import predict

    a.engine = "sim"
    return predict(**prediction_kwargs(a), **sim_kwargs(a), return_run=True)


def _cmd_trace(a: argparse.Namespace) -> int:
    from ..outpaths import check_output_file
    from ..sim.trace import write_chrome_trace

    if a.max_links is not None and a.max_links < 0:
        raise SimdlError(f"--max-links {a.max_links}: accepted: an integer >= 0 (link tracks to keep)")
    check_output_file(a.output)  # before the simulation, not after
    _progress(a)
    n = write_chrome_trace(_simulated_run(a), a.output, max_links=a.max_links)
    print(f"wrote {a.output}: {n} trace events (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def _cmd_plot(a: argparse.Namespace) -> int:
    from ..memory.commands import check_figure_path, sim_memory_plot_command

    check_figure_path(a.output)  # before minutes of simulation, not after
    _progress(a)
    if a.memory:
        return sim_memory_plot_command(_simulated_run(a), a.output)
    from ..sim.plot import plot_run

    plot_run(_simulated_run(a), a.output)
    print(f"wrote {a.output}")
    return 0


def _cmd_maxbatch(a: argparse.Namespace) -> int:
    """The largest per-GPU batch that fits: binary search on the memory model."""
    from ..memory.maxbatch import max_batch
    from ..units import format_bytes

    kw = prediction_kwargs(a)
    if kw.pop("batch_size") is not None:
        raise SimdlError(f"simdl maxbatch: searches the batch size; do not give --batch-size ({a.batch_size})")
    batch, r = max_batch(**kw)
    if a.json:
        from ..jsonout import dumps

        print(dumps({"max_batch_size": batch, "prediction": r.to_dict()}, default=str))
        return 0
    c = r.config
    if batch == 0:
        print(
            f"{c.get('model')} / {c.get('label')} on {c.get('gpus')} x {c.get('gpu')}: not even batch 1 fits "
            f"(peak {format_bytes(r.peak_memory_bytes)} of {format_bytes(r.memory_capacity_bytes)})"
        )
        return 1
    print(
        f"{c.get('model')} / {c.get('label')} on {c.get('gpus')} x {c.get('gpu')} ({c.get('cluster')}): "
        f"largest batch per GPU that fits: {batch} (peak {format_bytes(r.peak_memory_bytes)} of "
        f"{format_bytes(r.memory_capacity_bytes)}; tensors {format_bytes(r.peak_tensor_bytes)})"
    )
    return 0


def _cmd_memplot(a: argparse.Namespace) -> int:
    """Memory over one iteration on the analytic schedule, per rank role, as a PNG."""
    from ..memory.commands import memplot_command

    return memplot_command(
        prediction_kwargs(a), a.output, first_iteration=a.first_iteration, cuda_alloc_conf=a.cuda_alloc_conf
    )


def add_memory_parsers(sub) -> None:
    mb = sub.add_parser("maxbatch", help="largest per-GPU batch that fits in GPU memory")
    mb_out = add_prediction_args(mb)["output"]
    mb_out.add_argument("--json", action="store_true", help="print one JSON object")
    add_alloc_conf_arg(mb_out)
    mb.set_defaults(func=_cmd_maxbatch)
    mp = sub.add_parser("memplot", help="per-rank memory over one iteration (analytic schedule) as a PNG")
    out = add_prediction_args(mp)["output"]
    out.add_argument("-o", "--output", default="mem.png", help="PNG file (default mem.png)")
    out.add_argument(
        "--first-iteration", action="store_true", help="the first iteration: optimizer state created at the step"
    )
    add_alloc_conf_arg(out)
    mp.set_defaults(func=_cmd_memplot)


def add_run_parsers(sub) -> None:
    """predict, trace and plot: the prediction options, the simulator's, and each one's output."""
    p = sub.add_parser(
        "predict",
        help="predict one configuration",
        epilog=PREDICT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = add_prediction_args(p)
    add_sim_args(g["engine"])
    g["output"].add_argument("--json", action="store_true", help="print one JSON object")
    add_alloc_conf_arg(g["output"])
    p.set_defaults(func=_cmd_predict)
    t = sub.add_parser("trace", help="simulate and write a Chrome trace (Perfetto)")
    g = add_prediction_args(t)
    add_sim_args(g["engine"])
    g["output"].add_argument("-o", "--output", default="trace.json", help="output file (default trace.json)")
    g["output"].add_argument(
        "--max-links", type=integer, default=None, help="link tracks to keep, busiest first (default all)"
    )
    t.set_defaults(func=_cmd_trace)
    pl = sub.add_parser("plot", help="simulate and draw the timeline and memory over time (PNG)")
    g = add_prediction_args(pl)
    add_sim_args(g["engine"])
    g["output"].add_argument("-o", "--output", default="timeline.png", help="output PNG (default timeline.png)")
    g["output"].add_argument(
        "--memory",
        action="store_true",
        help="only per-rank memory over time, stacked by category (as the studies draw it)",
    )
    pl.set_defaults(func=_cmd_plot)
