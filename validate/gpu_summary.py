"""The table that ends :mod:`validate.gpu_check` (``DIR/summary.md``): predicted against
measured per configuration, signed errors; the same table as the GPU section of
``simdl report`` (:func:`simdl.report.gpu.table`)."""

from __future__ import annotations

from pathlib import Path


def write(out: Path) -> str:
    from simdl.report.gpu import error_pivot, table

    from .run import read_results

    records = read_results(Path(out) / "results.jsonl")
    lines = table(records) + ["", "Step-time error by model and configuration:", ""] + error_pivot(records)
    text = "# GPU check: simdl's prediction against the measured step\n\n" + "\n".join(lines) + "\n"
    (Path(out) / "summary.md").write_text(text)
    return text
