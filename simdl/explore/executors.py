"""Where a sweep's chunks run: worker processes on this machine, or a Dask or Ray cluster.

Each executor takes the chunks (lists of grid points) and returns their rows chunk by chunk,
in the chunks' order, calling ``tick(n)`` as chunks finish (a progress bar).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Callable, Mapping

from ..errors import SimdlError


def _progress(total: int, show: bool | None):
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the explore extra)
        return None
    return tqdm(total=total, unit="config", desc="simdl sweep", file=sys.stderr, smoothing=0.1)


def _mp_context():
    import multiprocessing as mp

    # fork: workers inherit the loaded tables and presets and start in milliseconds. Only on
    # Linux: macOS' system libraries are not fork-safe, so there the platform default is kept.
    if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return None


#: Keys a strategy plan does not read (points that differ only in them share one plan).
_PLAN_FREE = ("batch_size", "epochs", "train_samples", "grad_accumulation", "loader_workers")
#: The rank counts a grid sweeps.
_RANKS = ("gpus", "nodes", "gpus_per_node")


def _affinity(p: Mapping[str, Any]) -> tuple:
    from .vector import LINK_KEYS

    # Points that differ only in links next to each other (one group), then only in batch-like keys.
    return (
        tuple(str(v) for k, v in p.items() if k not in _PLAN_FREE and k not in LINK_KEYS),
        tuple(str(v) for k, v in p.items() if k in _PLAN_FREE),
    )


def _family(p: Mapping[str, Any]) -> tuple:
    """Points that differ only in links, rank counts and batch-like keys: their memory
    estimates may be one (a DDP rank's memory reads no rank count; the allocator replays of
    simdl.memory.cuda are memoised on the sequence, not the point)."""
    from .vector import LINK_KEYS

    return tuple(str(v) for k, v in p.items() if k not in _PLAN_FREE and k not in LINK_KEYS and k not in _RANKS)


def _chunks(points: list, jobs: int, sim: bool, chunk_size: int | None) -> list[list]:
    if chunk_size is None:
        # ~8 chunks per worker balance the load; the cap keeps progress moving on huge grids.
        chunk_size = max(1, min(2 if sim else 1000, math.ceil(len(points) / (jobs * 8))))
    return [points[i : i + chunk_size] for i in range(0, len(points), chunk_size)]


def _run_processes(
    chunks: list[list], jobs: int, tick: Callable[[int], None], vector: bool = False, groups: bool = False
) -> tuple[list[list[dict]], int]:
    """Rows per chunk, and how many points the workers answered by link groups (``vector``).
    ``groups``: every chunk is a list of link groups (lists of points; :func:`group_chunks`),
    answered group by group as one process answers them (:func:`_run_shared`)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from .sweep import run_chunk_counted

    if groups:
        return _run_shared(chunks, jobs, tick)
    out: list[list[dict] | None] = [None] * len(chunks)
    vectorised = 0
    with ProcessPoolExecutor(max_workers=jobs, mp_context=_mp_context()) as pool:
        futures = {pool.submit(run_chunk_counted, c, vector): i for i, c in enumerate(chunks)}
        for f in as_completed(futures):
            i = futures[f]
            out[i], n = f.result()
            vectorised += n
            tick(len(chunks[i]))
    return out, vectorised  # type: ignore[return-value]


def _run_shared(chunks: list[list], jobs: int, tick: Callable[[int], None]) -> tuple[list[list[dict]], int]:
    """Chunks of link groups on ``jobs - 1`` worker processes and this one: the workers take
    chunks from the front, this process from the back, until they meet. A worker has two in
    hand (one queued behind the one it answers, so it never waits for the next) until the
    last chunks, topped up between two of this process' groups. This process' rows are never
    pickled, and one worker fewer is started."""
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from .vector import rows_of_groups

    todo = deque(range(len(chunks)))
    out: list[list[dict] | None] = [None] * len(chunks)
    counted = [0]
    running: dict = {}

    def take(i: int, answer: tuple[list[dict], int]) -> None:
        out[i], n = answer
        counted[0] += n
        tick(sum(map(len, chunks[i])))

    with ProcessPoolExecutor(max_workers=max(1, jobs - 1), mp_context=_mp_context()) as pool:

        def feed() -> None:
            for f in [f for f in running if f.done()]:
                take(running.pop(f), f.result())
            workers = max(1, jobs - 1)
            # A chunk queued behind a busy worker only while more are left than the workers
            # hold: the last ones go to whichever process is free first.
            while todo and (len(running) < workers or (len(running) < 2 * workers and len(todo) > workers)):
                i = todo.popleft()
                running[pool.submit(rows_of_groups, chunks[i])] = i

        feed()
        while todo:
            i = todo.pop()
            take(i, rows_of_groups(chunks[i], between=feed))
            feed()
        while running:
            wait(running, return_when=FIRST_COMPLETED)
            feed()
    return out, counted[0]  # type: ignore[return-value]


def group_chunks(
    groups: list[list[int]], jobs: int, chunk_size: int | None = None, family: Callable[[list[int]], Any] = id
) -> list[list[list[int]]]:
    """Link groups (index lists, :func:`simdl.explore.vector.link_groups`) joined into chunks
    of about ``chunk_size`` points. A group is never split: its points share one template
    prediction and one memory estimate. Groups of one ``family`` (groups that may share memory
    estimates, such as a DDP plan's at every rank count) go to one chunk, families whole, a
    family split only where it is over twice the size. Default size: about sixteen chunks per
    process (this one included, :func:`_run_shared`): the last chunks, which one process
    answers while the other has run out, stay short."""
    total = sum(map(len, groups))
    size = chunk_size or max(1, math.ceil(total / (jobs * 16)))
    families: dict[Any, list[list[int]]] = {}
    for g in groups:
        families.setdefault(family(g), []).append(g)
    chunks: list[list[list[int]]] = []
    current: list[list[int]] = []
    count = 0
    for fam in families.values():
        whole = sum(map(len, fam)) <= 2 * size
        for g in fam:
            current.append(g)
            count += len(g)
            if count >= size and not whole:
                chunks.append(current)
                current, count = [], 0
        if count >= size:
            chunks.append(current)
            current, count = [], 0
    if current:
        chunks.append(current)
    return chunks


def _missing_extra(name: str) -> SimdlError:
    return SimdlError(
        f"--executor {name} needs {name}, which is not installed; "
        f"accepted: pip install 'simdl[{name}]', or --executor process"
    )


def _require_extra(name: str) -> None:
    import importlib

    try:
        importlib.import_module(name)
    except ImportError:
        raise _missing_extra(name) from None


def _run_dask(chunks: list[list], tick: Callable[[int], None]) -> list[list[dict]]:
    from .sweep import run_chunk

    try:
        import dask
    except ImportError:
        raise _missing_extra("dask") from None
    try:  # a running dask.distributed Client (possibly a whole cluster) if there is one
        from distributed import as_completed, get_client

        client = get_client()
    except (ImportError, ValueError):
        client = None
    if client is None:
        from dask import delayed

        results = dask.compute(*[delayed(run_chunk)(c) for c in chunks], scheduler="processes")
        tick(sum(len(c) for c in chunks))
        return list(results)
    futures = client.map(run_chunk, chunks, pure=False)
    index = {f.key: i for i, f in enumerate(futures)}
    out: list[list[dict] | None] = [None] * len(chunks)
    for f in as_completed(futures):
        i = index[f.key]
        out[i] = f.result()
        tick(len(chunks[i]))
    return out  # type: ignore[return-value]


def _run_ray(chunks: list[list], tick: Callable[[int], None]) -> list[list[dict]]:
    from .sweep import run_chunk

    try:
        import ray
    except ImportError:
        raise _missing_extra("ray") from None
    if not ray.is_initialized():
        ray.init()  # connects to RAY_ADDRESS if set, else starts a local Ray
    remote = ray.remote(run_chunk)
    refs = [remote.remote(c) for c in chunks]
    index = {ref: i for i, ref in enumerate(refs)}
    out: list[list[dict] | None] = [None] * len(chunks)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            i = index[ref]
            out[i] = ray.get(ref)
            tick(len(chunks[i]))
    return out  # type: ignore[return-value]
