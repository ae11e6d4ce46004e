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
