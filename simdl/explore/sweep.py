"""Run a grid of predictions: one row per configuration, in parallel on local cores.

>>> df = simdl.sweep(model="resnet50", strategy=["ddp", "fsdp-full"], gpus=[8, 16, 32],
...                  cluster="dgx-a100", nic_Gb_per_s=[100, 400])       # doctest: +SKIP

Every keyword is an axis (a list) or a fixed value; :mod:`simdl.explore.grid` lists the
keys. A configuration that simdl rejects (ps-sync on a cluster without parameter servers,
more GPUs than a one-node preset has) becomes a row with its message in ``error`` instead
of stopping the sweep.

Speed. One process answers hundreds of analytic configurations per second where every point
has its own memory layout (a CUDA caching-allocator replay each) and thousands where points
differ only in links (benchmarks/bench_scale.py prints both), so a 10,000-point grid is
seconds of work and process start-up must not dominate:

* the first configuration of every model runs in this process first, so that the workload
  tables are loaded once and inherited by the workers (``fork`` on Linux);
* the rest goes to a :class:`~concurrent.futures.ProcessPoolExecutor` in chunks (about eight
  per worker: enough to balance the load, few enough that pickling is negligible);
* grids below :data:`SERIAL_BELOW` points run in this process;
* analytic points that differ only in link overrides (NIC rate and count, latencies, the
  intra-node rate) are answered together, one prediction per group and numpy over its
  points (:mod:`simdl.explore.vector`; ``vector=False`` predicts every point alone). With
  ``executor="process"`` every chunk then holds whole groups, and the groups that may share
  a memory estimate (:func:`simdl.explore.executors._family`) together, so that a process
  answers them as a serial sweep does (the same rows); this process answers chunks too,
  beside ``jobs - 1`` workers (:func:`simdl.explore.executors._run_shared`).

``executor="dask"`` or ``"ray"`` sends the same chunks to a Dask or Ray cluster (the
``simdl[dask]`` / ``simdl[ray]`` extras, imported only then). A progress bar (tqdm, if
installed) is drawn when stderr is a terminal.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from ..errors import SimdlError, unknown
from ..result import Result as _Result
from ..result import Staleness as _Staleness
from .executors import (
    _affinity,
    _chunks,
    _family,
    _progress,
    _require_extra,
    _run_dask,
    _run_processes,
    _run_ray,
    group_chunks,
)
from .grid import Grid, default_strategy, sim_keys_without_sim, split_label, to_call
from .whatif import derive_cluster

EXECUTORS = ("process", "serial", "dask", "ray")
#: Below this many analytic configurations a pool costs more than it saves.
SERIAL_BELOW = 400
#: Result fields copied into every row first, in this order (the rest of Result.row() follows).
LEAD_COLUMNS = (
    "label",
    "iteration_time_s",
    "total_time_s",
    "gpu_hours",
    "throughput_samples_per_s",
    "peak_memory_bytes",
    "max_memory_allocated_bytes",
    "max_memory_reserved_bytes",
    "memory_capacity_bytes",
    "fits_in_memory",
    "gpu_utilization",
    "compute_time_s",
    "comm_time_s",
    "exposed_comm_time_s",
    "comm_bytes_per_iteration",
)


# ----------------------------------------------------------------------------- one point


def _label(params: Mapping[str, Any]) -> str:
    """What the result's ``config.label`` would say, for rows that have no result."""
    from ..strategies import StrategyConfig

    strategy = params.get("strategy") or default_strategy()
    try:
        name, over = split_label(strategy)
        kw, _ = to_call(dict(params, strategy=strategy))
        spec = StrategyConfig(name=name).spec
        knobs = {key.field: key.to_field(kw[k]) for k, key in spec.predict_keys.items() if kw.get(k) is not None}
        return StrategyConfig(name=name, **knobs).label
    except SimdlError:
        return str(strategy)


def _plain(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def run_one(params: Mapping[str, Any]) -> dict[str, Any]:
    """Predict one grid point; a rejected configuration gives a row with ``error`` set."""
    from ..predict import DEFAULT_CLUSTER, predict

    row: dict[str, Any] = {k: _plain(v) for k, v in params.items()}
    try:
        kwargs, over = to_call(params)
        if over:
            kwargs["cluster"] = derive_cluster(kwargs.get("cluster") or DEFAULT_CLUSTER, **over)
        result = predict(**kwargs)
    except SimdlError as e:
        row["label"] = _label(params)
        row["error"] = str(e)
        return row
    except Exception as e:  # noqa: BLE001 -- one broken point must not lose a 10,000-point sweep
        row["label"] = _label(params)
        row["error"] = f"internal error: {type(e).__name__}: {e}"
        return row
    return result_row(row, result)


def result_row(row: dict[str, Any], result: Any) -> dict[str, Any]:
    """``row`` (the point's own keys) completed with ``result``'s columns."""
    flat = _flat(result)
    row["label"] = result.config.get("label")
    gpu_hours = result.total_time_s * result.config.get("gpus", 1) / 3600.0
    for k in LEAD_COLUMNS[1:]:
        row[k] = gpu_hours if k == "gpu_hours" else flat.pop(k)
    for k, v in flat.items():
        row.setdefault(k, v)
    row["error"] = None
    return row


def _flat(result: Any) -> dict[str, Any]:
    """What :meth:`simdl.Result.row` gives, without its deep copy of the whole result.

    ``Result.row`` goes through ``dataclasses.asdict``, which copies every list in the config
    (DDP buckets, FSDP units) only for them to be dropped: a quarter of a sweep's time.
    """
    d: dict[str, Any] = {}
    for f in _RESULT_FIELDS:
        if f not in (
            "memory_breakdown_bytes",
            "staleness",
            "step_split_s",
            "config",
            "notes",
            "iteration_time_band_s",
            "device_memory_bytes",
        ):
            d[f] = getattr(result, f)
    # Flattened as Result.row() does: one column per number, so a CSV cell never holds a dict.
    lo, hi = result.iteration_time_band_s or (None, None)
    d["iteration_time_band_low_s"], d["iteration_time_band_high_s"] = lo, hi
    for k, v in result.step_split_s.items():
        d[f"step_{k}_s"] = v
    for k, v in result.memory_breakdown_bytes.items():
        d[f"memory_{k}_bytes"] = v
    for k, v in result.device_memory_bytes.items():
        d[f"device_memory_{k}_bytes"] = v
    st = result.staleness
    for f in _STALENESS_FIELDS:
        d[f"staleness_{f}"] = getattr(st, f)
    for k, v in result.config.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            d[f"config.{k}"] = v
    return d


def _fields(cls: type) -> tuple[str, ...]:
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(cls))


_RESULT_FIELDS = _fields(_Result)
_STALENESS_FIELDS = _fields(_Staleness)


def run_chunk(chunk: Sequence[Mapping[str, Any]], vector: bool = False) -> list[dict[str, Any]]:
    """The unit of work sent to a worker process (module level, so that it pickles).
    ``vector``: points that differ only in links answered together (simdl.explore.vector)."""
    if vector:
        from .vector import rows_by_groups

        return rows_by_groups(chunk)[0]
    return [run_one(p) for p in chunk]


def run_chunk_counted(chunk: Sequence[Mapping[str, Any]], vector: bool) -> tuple[list[dict[str, Any]], int]:
    """:func:`run_chunk`, and how many of its points were answered by link groups."""
    if vector:
        from .vector import rows_by_groups

        return rows_by_groups(chunk)
    return [run_one(p) for p in chunk], 0


# ----------------------------------------------------------------------------- the sweep


def _points(
    grid: Grid | Mapping[str, Any] | Iterable[Mapping[str, Any]] | None, axes: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], Mapping[str, Any]]:
    if grid is None:
        g = Grid(axes)
        return list(g), g.axes
    if axes:
        raise SimdlError("give either a grid (or a list of configurations) or keyword axes, not both")
    if isinstance(grid, Grid):
        return list(grid), grid.axes
    if isinstance(grid, Mapping):
        g = Grid(grid)
        return list(g), g.axes
    points = [dict(p) for p in grid]
    for p in points:
        Grid({k: [v] for k, v in p.items()})  # validates keys and values
    return points, {}


#: What the last :func:`run_points` call did: ``points``, and ``vectorised``: how many of them
#: were answered by link groups (simdl.explore.vector; the rest one by one). Read by ``simdl sweep``.
last_run: dict[str, int] = {"points": 0, "vectorised": 0}


def _warm_up(points: list[dict[str, Any]], rows: list, tick) -> list[int]:
    """The first point of each workload answered here (its table loaded once, for all
    workers) into ``rows``; the indices of the rest."""
    seen: set = set()
    rest: list[int] = []
    for i, p in enumerate(points):
        key = (p.get("model"), p.get("dataset"), p.get("input_shape"), p.get("num_classes"))
        if key in seen:
            rest.append(i)
            continue
        seen.add(key)
        rows[i] = run_one(p)
        tick(1)
    return rest


def run_points(
    points: list[dict[str, Any]],
    *,
    jobs: int | None = None,
    executor: str = "process",
    progress: bool | None = None,
    chunk_size: int | None = None,
    vector: bool = True,
) -> list[dict[str, Any]]:
    """Rows for ``points``, in their order. ``vector``: analytic points that differ only in
    links are answered together (simdl.explore.vector; same rows, the template checked)."""
    if executor not in EXECUTORS:
        raise unknown("executor", executor, EXECUTORS)
    jobs = jobs or os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SimdlError(f"--jobs {jobs!r} must be an integer >= 1")
    if executor in ("dask", "ray"):
        _require_extra(executor)  # before any work: a missing extra is a one-line error at once
    sim = any(p.get("engine") == "sim" for p in points)
    bar = _progress(len(points), progress)
    tick = bar.update if bar is not None else (lambda n: None)
    try:
        rows: list[dict | None] = [None] * len(points)
        rest = _warm_up(points, rows, tick)
        serial = executor == "serial" or (
            executor == "process" and (jobs == 1 or (not sim and len(rest) < SERIAL_BELOW))
        )
        grouped = serial and vector and not sim
        # Link groups in the workers too: whole groups per chunk, in the grid's order.
        pooled = not serial and executor == "process" and vector and not sim
        if not grouped and not pooled:
            # Points that differ only in batch-like keys share a strategy plan (built once per
            # process): keep them in one chunk by ordering the work by everything else, then
            # restore the order. In one process the link groups gather their points themselves.
            rest.sort(key=lambda i: _affinity(points[i]))
        remaining = [points[i] for i in rest]
        last_run.update(points=len(points), vectorised=0)
        if grouped:
            from .vector import rows_by_groups

            done_rows, last_run["vectorised"] = rows_by_groups(remaining)
            for i, r in zip(rest, done_rows):
                rows[i] = r
            tick(len(rest))
        elif serial:
            for i in rest:
                rows[i] = run_one(points[i])
                tick(1)
        elif pooled:
            from .vector import link_groups

            groups = group_chunks(link_groups(remaining), jobs, chunk_size, lambda g: _family(remaining[g[0]]))
            work = [[[remaining[j] for j in g] for g in c] for c in groups]
            done, last_run["vectorised"] = _run_processes(work, jobs, tick, True, groups=True)
            order = (rest[j] for c in groups for g in c for j in g)
            for i, r in zip(order, (r for chunk in done for r in chunk)):
                rows[i] = r
        elif remaining:
            chunks = _chunks(remaining, jobs, sim, chunk_size)
            if executor == "process":
                done, last_run["vectorised"] = _run_processes(chunks, jobs, tick, vector and not sim)
            elif executor == "dask":
                done = _run_dask(chunks, tick)
            else:
                done = _run_ray(chunks, tick)
            flat = [r for chunk in done for r in chunk]
            for i, r in zip(rest, flat):
                rows[i] = r
    finally:
        if bar is not None:
            bar.close()
    return rows  # type: ignore[return-value]


def sweep(
    grid: Grid | Mapping[str, Any] | Iterable[Mapping[str, Any]] | None = None,
    /,
    *,
    jobs: int | None = None,
    executor: str = "process",
    progress: bool | None = None,
    as_frame: bool = True,
    chunk_size: int | None = None,
    vector: bool = True,
    **axes: Any,
):
    """Predict every point of a grid; a pandas DataFrame (or, ``as_frame=False``, a list of dicts).

    Keywords are the axes: a list sweeps, a scalar is fixed (``gpus=[1, 2, 4]``,
    ``cluster="dgx-a100"``, ``nic_Gb_per_s=[25, 100]``). Or pass one mapping of axes, or an
    explicit list of configurations (dicts), as the first argument. Columns: the swept and
    fixed keys as given, ``label`` (the strategy as results name it), the headline numbers
    (:data:`LEAD_COLUMNS`), everything in :meth:`simdl.Result.row`, and ``error`` (None when
    the configuration was predicted).

    ``jobs``: worker processes (default: all cores). ``executor``: ``process`` | ``serial`` |
    ``dask`` | ``ray``. ``progress``: a tqdm bar (default: when stderr is a terminal).
    ``vector``: analytic points that differ only in link overrides answered together
    (:mod:`simdl.explore.vector`; False: every point by its own ``predict``).
    """
    points, ax = _points(grid, axes)
    bad = sim_keys_without_sim(ax)
    if bad:
        raise SimdlError(f"{bad} needs engine=sim (the analytic engine has no per-rank timeline)")
    rows = run_points(points, jobs=jobs, executor=executor, progress=progress, chunk_size=chunk_size, vector=vector)
    if not as_frame:
        return rows
    return to_frame(rows)


def to_frame(rows: list[dict[str, Any]]):
    try:
        import pandas as pd
    except ImportError:
        raise SimdlError(
            "a DataFrame needs pandas, which is not installed; accepted: pip install "
            "'simdl[explore]', or as_frame=False for a list of dicts"
        ) from None
    return pd.DataFrame(rows, columns=columns(rows))


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The union of the rows' keys in first-seen order, ``error`` last."""
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    cols = [k for k in seen if k != "error"]
    return cols + ["error"] if "error" in seen else cols


def write_rows(rows: Sequence[Mapping[str, Any]], path: str) -> None:
    """Write rows as CSV (``.csv``) or JSON lines (``.jsonl``); no pandas needed."""
    import csv
    import json

    if path.endswith(".jsonl"):
        with open(path, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r, default=str) + "\n")
        return
    if not path.endswith(".csv"):
        raise SimdlError(f"-o {path}: unknown output format; accepted: a .csv or .jsonl file name")
    cols = columns(rows)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
