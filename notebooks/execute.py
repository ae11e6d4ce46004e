"""Run the notebooks and store them with their outputs: ``python notebooks/execute.py [NAME ...]``.

The committed notebooks carry the outputs and figures of this run (tests/explore/test_notebooks.py
executes them again and fails on any cell error). Timing metadata is not recorded, so a re-run
changes a notebook only where its results change.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 120  # per cell


def execute(path: Path):
    """The notebook at ``path`` executed in its own folder (a fresh python3 kernel)."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    return nb


def main(argv: list[str]) -> int:
    import nbformat

    paths = [HERE / a if not a.endswith(".ipynb") else Path(a) for a in argv] or sorted(HERE.glob("*.ipynb"))
    for path in paths:
        path = path if path.suffix == ".ipynb" else path.with_suffix(".ipynb")
        t0 = time.perf_counter()
        nb = execute(path)
        nbformat.write(nb, path)
        print(f"{path.name}: {time.perf_counter() - t0:.1f} s wall, {path.stat().st_size / 1024:.0f} KiB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
