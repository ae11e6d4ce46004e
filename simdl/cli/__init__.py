"""The ``simdl`` command line.

Kept small and fast: each subcommand imports what it needs when it runs, so
``simdl predict`` on a built-in model never imports torch (or networkx, matplotlib).
Bad input prints one line ``simdl: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..startup import configure_process

configure_process()  # before numpy loads (simdl.startup)

from ..errors import SimdlError  # noqa: E402
from .explore import add_recommend_parser, add_sweep_parser  # noqa: E402
from .lab import add_calibrate_parser, add_report_parser  # noqa: E402
from .listing import add_listing_parsers  # noqa: E402
from .options import Parser  # noqa: E402
from .run import add_memory_parsers, add_run_parsers  # noqa: E402

__all__ = ["build_parser", "error_line", "main"]


def _version() -> str:
    from .. import __version__

    return f"simdl {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="simdl", description="Predict time and memory of distributed PyTorch training.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_run_parsers(sub)  # predict, trace, plot
    add_listing_parsers(sub)  # models, clusters
    add_report_parser(sub)
    add_calibrate_parser(sub)
    add_sweep_parser(sub)
    add_recommend_parser(sub)
    add_memory_parsers(sub)  # maxbatch, memplot
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
