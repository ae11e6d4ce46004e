"""Settings of the ``simdl`` command's own process, applied before numpy is imported.

OpenBLAS (the BLAS numpy's wheels ship, scipy-openblas 0.3.31 here) starts one thread per
core when numpy is imported, and its threads spin waiting for work: on a 2-core host that
is 65-120 ms of CPU per ``simdl predict`` (getrusage of the child, with and without
``OPENBLAS_NUM_THREADS=1``; benchmarks/bench_predict.py), for a command whose numpy work
is elementwise and small. The command line therefore runs BLAS on one thread unless the
user's environment says otherwise; ``import simdl`` as a library changes nothing.
"""

from __future__ import annotations

import os

#: Environment defaults of the command's process (a value the user set is kept).
CLI_ENV = {"OPENBLAS_NUM_THREADS": "1"}


def configure_process() -> None:
    """Apply :data:`CLI_ENV` (call before anything imports numpy)."""
    for key, value in CLI_ENV.items():
        os.environ.setdefault(key, value)


def terminal_columns(fallback: int = 80) -> int:
    """The terminal's width as :func:`shutil.get_terminal_size` finds it (``COLUMNS``, else the
    width of stdout's terminal, else ``fallback``), without importing shutil: argparse sizes
    a help formatter for every option it adds, and its own lookup imports shutil, which
    imports bz2 and lzma (~2 ms of every command's start)."""
    import sys

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else fallback
