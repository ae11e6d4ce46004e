"""``simdl calibrate`` and ``simdl report``: measuring a cluster and reporting validation runs."""

from __future__ import annotations

import argparse
import sys

from ..errors import SimdlError
from .options import integer, number, wait_seconds


def _cmd_calibrate(a: argparse.Namespace) -> int:
    """Measure this cluster with torchrun and write a profile."""
    from ..calibrate.run import StageFailed, calibrate, make_settings, new_run_dir, resume

    try:
        if a.resume:
            resume(a.resume, output=a.output, wait_quiet_s=a.wait_quiet)
            return 0
        if a.nproc_per_node is None:
            raise SimdlError("simdl calibrate: give --nproc-per-node P (ranks per node), or --resume RUN_DIR")
        settings = make_settings(
            nproc_per_node=a.nproc_per_node,
            quick=a.quick,
            time_budget=a.time_budget,
            output=a.output,
            name=a.name,
            gpu=a.gpu,
            stages=_stages(a.stages),
            profile_models=a.profile_models,
            compute_models=a.compute_models,
            collective_passes=a.collective_passes,
            nnodes=a.nnodes,
            node_rank=a.node_rank,
            rdzv_backend=a.rdzv_backend,
            rdzv_endpoint=a.rdzv_endpoint,
            rdzv_id=a.rdzv_id,
            master_addr=a.master_addr,
            master_port=a.master_port,
        )
        calibrate(settings, new_run_dir(a.run_root), wait_quiet_s=a.wait_quiet)
        return 0
    except StageFailed as e:
        print(f"simdl: calibration stopped: {e}", file=sys.stderr)
        return 1


def _stages(text: str | None) -> tuple[str, ...]:
    from ..calibrate.records import STAGES

    if not text:
        return STAGES
    chosen = tuple(s.strip() for s in text.split(",") if s.strip())
    for s in chosen:
        if s not in STAGES:
            from ..errors import unknown

            raise unknown("calibration stage", s, STAGES)
    return chosen


def add_calibrate_parser(sub) -> None:
    k = sub.add_parser("calibrate", help="measure this cluster with short torchrun runs and write a profile")
    k.add_argument("--nproc-per-node", type=integer, default=None, help="ranks per node (GPUs, or CPU processes)")
    k.add_argument("--nnodes", default=None, help="torchrun --nnodes (N or MIN:MAX)")
    k.add_argument("--node-rank", type=integer, default=None, help="torchrun --node-rank")
    k.add_argument("--rdzv-backend", default=None, help="torchrun --rdzv-backend (e.g. c10d)")
    k.add_argument("--rdzv-endpoint", default=None, help="torchrun --rdzv-endpoint HOST:PORT")
    k.add_argument("--rdzv-id", default=None, help="torchrun --rdzv-id")
    k.add_argument("--master-addr", default=None, help="torchrun --master-addr")
    k.add_argument("--master-port", type=integer, default=None, help="torchrun --master-port")
    k.add_argument("--quick", action="store_true", help="fewer sizes, models and repeats (a few minutes)")
    k.add_argument(
        "--time-budget",
        type=number,
        default=None,
        help="seconds of measurement over all stages (default 150 quick, 900 full)",
    )
    k.add_argument("-o", "--output", default=None, help="profile YAML to write (also kept in the run directory)")
    k.add_argument("--name", default=None, help="profile name (default: the output file's stem)")
    k.add_argument("--gpu", default=None, help="GPU file for the peaks (default: from the device name; cpu on CPU)")
    k.add_argument(
        "--stages", default=None, help="comma-separated subset of collectives,compute,strategies,ps (default all)"
    )
    k.add_argument(
        "--profile-models",
        default=None,
        metavar="M:D:B1,B2;...",
        help="also profile these models' rows at these batch sizes (e.g. vgg16:cifar10:24,48): "
        "predictions of them then use the measured row times (a compute profile)",
    )
    k.add_argument(
        "--compute-models",
        default=None,
        metavar="M:D:B1,B2;...",
        help="the compute stage's models instead of its default set: the roofline is fitted on all "
        "but the last, which is held out (e.g. resnet18:cifar10:32,128;vgg16:cifar10:32,128)",
    )
    k.add_argument(
        "--collective-passes",
        type=integer,
        default=None,
        metavar="N",
        help="passes over the collective size grid (default 7, --quick 3); more narrow each size's "
        "time on a noisy host, in proportion more time (within the collectives' budget share)",
    )
    k.add_argument("--run-root", default="runs", help="where run directories go (default runs/, git-ignored)")
    k.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue an interrupted run")
    k.add_argument(
        "--wait-quiet",
        type=wait_seconds,
        default=120.0,
        metavar="SECONDS",
        help="before measuring, wait up to this long while other processes keep more than a quarter of "
        "a core busy, then start anyway (the profile records how busy the machine was before and "
        "during each stage); default 120, 0: measure without waiting, -1: do not measure",
    )
    k.set_defaults(func=_cmd_calibrate)


def _cmd_report(a: argparse.Namespace) -> int:
    from pathlib import Path

    if not a.results and not a.paper:
        raise SimdlError("simdl report: give a results JSONL (from python -m validate.run) or --paper")
    if not a.results:  # --paper alone: the predictions at the studies' scale, printed
        from ..report.paper import paper_tables

        print(paper_tables())
        return 0
    import io

    from ..outpaths import check_output_dir
    from ..report.results_file import read_records

    check_output_dir(a.output)
    for f in a.results:  # every file read and checked before anything is written
        read_records(Path(f), warn=io.StringIO(), for_report=True)  # the report's own read gives the warning
    from ..report.validation import build_report

    md = build_report(
        a.results,
        a.output,
        paper=a.paper,
        repeats=a.repeats,
        command=f"simdl report {' '.join(a.results)} -o {a.output}"
        + (" --paper" if a.paper else "")
        + (" --repeats" if a.repeats else ""),
    )
    print(md)
    return 0


def add_report_parser(sub) -> None:
    r = sub.add_parser("report", help="validation report from a results JSONL; --paper: the studies at full scale")
    r.add_argument(
        "results",
        nargs="*",
        default=None,
        help="results JSONL written by python -m validate.run; several are reported as one sweep "
        "(a run in a later file replaces its record from an earlier one)",
    )
    r.add_argument("-o", "--output", default="report", help="output directory (default report/)")
    r.add_argument("--paper", action="store_true", help="add simdl's predictions of the studies at their own scale")
    r.add_argument(
        "--repeats",
        action="store_true",
        help="the files are repeated sweeps: a run in several of them is pooled over its repeats instead of replaced",
    )
    r.set_defaults(func=_cmd_report)
