"""The largest per-GPU batch that fits: binary search on the memory model.

Peak memory grows with the batch (activations scale with it, nothing shrinks), so the
largest fitting batch is found by doubling until it does not fit, then bisecting.
"""

from __future__ import annotations

from typing import Any

from ..errors import SimdlError

MAX_BATCH = 1 << 20


def max_batch(**predict_kwargs: Any) -> tuple[int, Any]:
    """(largest batch whose process peak fits the GPU, the prediction at that batch).

    Takes :func:`simdl.predict` keyword arguments (without ``batch_size``). Returns
    ``(0, prediction at batch 1)`` when not even one sample fits.
    """
    from ..predict import predict

    if "batch_size" in predict_kwargs:
        raise SimdlError("maxbatch searches the batch size; do not give --batch-size")
    cache: dict[int, Any] = {}

    def run(b: int):
        if b not in cache:
            cache[b] = predict(batch_size=b, **predict_kwargs)
        return cache[b]

    if not run(1).fits_in_memory:
        return 0, run(1)
    lo, hi = 1, 2
    while hi <= MAX_BATCH and run(hi).fits_in_memory:
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH:
        return lo, run(lo)
    while hi - lo > 1:  # run(lo) fits, run(hi) does not
        mid = (lo + hi) // 2
        if run(mid).fits_in_memory:
            lo = mid
        else:
            hi = mid
    return lo, run(lo)
