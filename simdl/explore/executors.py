"""Where a sweep's chunks run: worker processes on this machine, or a Dask or Ray cluster.

Each executor takes the chunks (lists of grid points) and returns their rows chunk by chunk,
in the chunks' order, calling ``tick(n)`` as chunks finish (a progress bar).
"""

from __future__ import annotations

import sys
from typing import Callable

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


def _run_processes(
    chunks: list[list], jobs: int, tick: Callable[[int], None], vector: bool = False
) -> tuple[list[list[dict]], int]:
    """Rows per chunk, and how many points the workers answered by link groups (``vector``)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from .sweep import run_chunk_counted

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
