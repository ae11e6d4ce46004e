"""Every notebook in notebooks/ is committed executed, and runs clean again (nbclient).

Each notebook ends with asserts on its own results, so a notebook that breaks -- or whose
conclusions stop holding -- fails here. The stored copies carry their outputs and inline
figures (``python notebooks/execute.py`` writes them), small enough to read on GitHub.
"""

from __future__ import annotations

import ast
import base64
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 120  # per cell; each notebook runs well under a minute here
MAX_NOTEBOOK_BYTES = 1_500_000  # outputs and figures included
MAX_FIGURE_BYTES = 200_000  # one inline PNG


def _read(path):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(path, as_version=4)


def _text(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_there_are_four_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_executed_with_its_figures(path):
    nb = _read(path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name}: run python notebooks/execute.py"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), f"{path.name}: run top to bottom"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: stored with an error: {errors[0].get('ename')}"
    text = _text(nb)
    assert "all checks passed" in text or "SKIPPED" in text
    figures = [o["data"]["image/png"] for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    has_plot_code = any(
        "plt.subplots" in c.source or "plot_sweep" in c.source or "run_figure" in c.source for c in code
    )
    if has_plot_code and "SKIPPED" not in text:
        assert figures, f"{path.name}: no inline figure stored (is matplotlib on a non-inline backend?)"
    for png in figures:
        assert len(base64.b64decode(png)) <= MAX_FIGURE_BYTES, f"{path.name}: a figure over {MAX_FIGURE_BYTES} B"
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_uses_no_private_helpers_and_draws_inline(path):
    nb = _read(path)
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        assert 'matplotlib.use("Agg")' not in c.source, f"{path.name}: Agg stops inline figures"
        source = "\n".join(line for line in c.source.splitlines() if not line.lstrip().startswith("%"))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name}: imports private {private} from {node.module}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_clean(path):
    """nbclient raises CellExecutionError on the first cell that fails, which fails this test."""
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("pandas")
    nb = _read(path)
    t0 = time.perf_counter()
    nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    took = time.perf_counter() - t0
    text = _text(nb)
    assert "all checks passed" in text or "SKIPPED" in text, text[-2000:]
    assert took < 90, f"{path.name} took {took:.0f} s; keep notebooks well under a minute"
