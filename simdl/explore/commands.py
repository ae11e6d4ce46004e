"""The bodies of ``simdl sweep`` and ``simdl recommend`` (the parsers live in :mod:`simdl.cli.explore`)."""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence

from ..errors import SimdlError
from ..units import format_bytes, format_seconds


def sweep_command(
    options: Mapping[str, str | None],
    set_items: Sequence[str],
    *,
    jobs: int | None,
    executor: str,
    progress: bool | None,
    output: str | None,
    plot: str | None,
    x: str | None,
    time_column: str,
    list_keys: bool,
) -> int:
    """``options``: prediction options as given (comma lists, None when not given)."""
    from .grid import describe_keys, parse_set, parse_values
    from .sweep import sweep, write_rows

    if list_keys:
        print(describe_keys())
        return 0
    axes: dict[str, Any] = {}  # lists of values, passed to sweep as keywords
    for key, text in options.items():
        if text is not None:
            axes[key] = parse_values(key, str(text))
    for key, values in parse_set(set_items or ()).items():
        if key in axes:
            raise SimdlError(f"--set {key}: already given as an option; give its values once")
        axes[key] = values
    if output is not None and not output.endswith((".csv", ".jsonl")):
        raise SimdlError(f"-o {output}: unknown output format; accepted: a .csv or .jsonl file name")
    _check_outputs(output, plot)  # before the sweep, not after its rows are computed
    t0 = time.perf_counter()
    rows = sweep(jobs=jobs, executor=executor, progress=progress, as_frame=False, **axes)
    dt = time.perf_counter() - t0
    failed = [r for r in rows if r.get("error")]
    if rows and len(failed) == len(rows):
        first = failed[0]["error"]
        same = all(r["error"] == first for r in failed)
        raise SimdlError(f"every configuration failed{'' if same else ' (first error)'}: {first}")
    if output is not None:
        _write_or_keep(rows, output, write_rows)
    else:
        print(_table(rows, [k for k, v in axes.items() if len(v) > 1]))
    if plot is not None:
        from .plot import plot_sweep

        plot_sweep(rows, x=x, output=plot, time=time_column, keys=list(axes))
    import os

    workers = 1 if executor == "serial" else (jobs or os.cpu_count() or 1)
    msg = (
        f"simdl sweep: {len(rows)} configurations in {dt:.2f} s ({len(rows) / dt:,.0f}/s, "
        f"{executor} executor, {workers} worker{'s' if workers != 1 else ''}; "
        f"{_how(len(rows))})"
    )
    if failed:
        internal = sum(1 for r in failed if r["error"].startswith("internal error"))
        msg += f"; {len(failed)} rejected by simdl (see the error column)"
        if internal:
            msg += f", of which {internal} internal errors (please report)"
    if output:
        msg += f"; wrote {output}"
    if plot:
        msg += f"; plotted {plot}"
    print(msg, file=sys.stderr)
    return 0


def _how(n: int) -> str:
    """Which path answered the rows: link groups (simdl.explore.vector) or one predict each."""
    from .sweep import last_run

    v = last_run["vectorised"] if last_run["points"] == n else 0
    return f"{v} by link groups (simdl.explore.vector), {n - v} by one predict each"


def _check_outputs(output: str | None, plot: str | None) -> None:
    from ..memory.commands import check_figure_path
    from ..outpaths import check_output_file

    if output is not None:
        check_output_file(output, "-o")
    if plot is not None:
        check_figure_path(plot)


def _write_or_keep(rows, output: str, write_rows) -> None:
    """Write the rows to ``output``; if that fails after the checks (the folder removed, the
    disk full), the computed rows go to a temporary file that the one-line error names."""
    import os
    import tempfile

    try:
        write_rows(rows, output)
    except OSError as e:
        fd, kept = tempfile.mkstemp(prefix="simdl-sweep-", suffix=os.path.splitext(output)[1])
        os.close(fd)
        write_rows(rows, kept)
        raise SimdlError(
            f"-o {output}: cannot write ({e.strerror or e}); the {len(rows)} rows were written to {kept}"
        ) from None


def _table(rows: Sequence[Mapping[str, Any]], swept: Sequence[str]) -> str:
    keys = [k for k in swept if k not in ("strategy",)]
    head = ["strategy", *keys, "step", "total", "peak memory", "fits", "note"]
    lines = [head]
    for r in rows:
        cells = [str(r.get("label"))] + [str(r.get(k)) for k in keys]
        if r.get("error"):
            cells += ["-", "-", "-", "-", r["error"]]
        else:
            cells += [
                format_seconds(r["iteration_time_s"]),
                format_seconds(r["total_time_s"]),
                format_bytes(r["peak_memory_bytes"]),
                "yes" if r["fits_in_memory"] else "NO",
                "",
            ]
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[-1]]).rstrip() for row in lines)


def recommend_command(
    *,
    model: str,
    cluster: str | None,
    gpus: int | None,
    memory_budget: str | None,
    objective: str,
    price_per_gpu_hour: float | None,
    batch_sizes: str | None,
    precisions: str | None,
    strategies: str | None,
    allow_stale: bool,
    fixed: Mapping[str, Any],
    top: int,
    as_json: bool,
) -> int:
    from .grid import parse_values
    from .recommend import recommend

    kw: dict[str, Any] = {k: v for k, v in fixed.items() if v is not None}
    if batch_sizes is not None:
        kw["batch_sizes"] = parse_values("batch_size", batch_sizes)
    if precisions is not None:
        kw["precisions"] = parse_values("precision", precisions)
    if strategies is not None:
        kw["strategies"] = parse_values("strategy", strategies)
    rec = recommend(
        model,
        cluster=cluster,
        gpus=gpus,
        memory_budget=memory_budget,
        objective=objective,
        price_per_gpu_hour=price_per_gpu_hour,
        allow_stale=allow_stale,
        **kw,
    )
    if as_json:
        from ..jsonout import dumps

        print(dumps(rec.to_dict(), indent=2, default=str))
    else:
        print(rec.header())
        if rec.ranked:
            print(rec.table(top))
            print()
        print(rec.explanation)
    return 0 if rec.ranked else 1
