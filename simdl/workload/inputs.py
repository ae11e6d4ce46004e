"""What one training sample is: an image, a tensor of any shape, or a sequence of token ids.

A shipped zoo model takes images (``CxHxW`` float32). A ``package.module:factory`` model
takes whatever its forward accepts: ``--input 128x512`` feeds float32 tensors of shape
``(batch, 128, 512)``; ``--input 512 --vocab 32000`` feeds int64 token ids of shape
``(batch, 512)`` (what ``nn.Embedding`` takes). Importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any

from ..errors import SimdlError

MAX_INPUT_DIMS = 6  # no PyTorch training input the tracer is meant for has more
# int64: the index dtype nn.Embedding and F.embedding take (torch/nn/modules/sparse.py).
TOKEN_DTYPE = "int64"


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``"3x32x32"`` -> ``(3, 32, 32)``; ``"512"`` -> ``(512,)``: positive integers joined by x."""
    parts = str(text).strip().lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not 1 <= len(shape) <= MAX_INPUT_DIMS or min(shape) <= 0:
        raise SimdlError(
            f"bad input shape {text!r}; expected 1 to {MAX_INPUT_DIMS} positive integers joined by x: "
            "CxHxW for images (3x32x32), 128x512 for a sequence of vectors, 512 for token ids with --vocab"
        )
    return shape


def check_vocab(vocab: Any) -> int | None:
    """``None`` (float inputs) or a vocabulary size >= 2 (token-id inputs)."""
    if vocab is None:
        return None
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise SimdlError(f"--vocab {vocab!r} must be an integer >= 2 (the number of distinct token ids)")
    return vocab


def is_image(shape: tuple[int, ...], vocab: int | None) -> bool:
    return vocab is None and len(shape) == 3


def describe(shape: tuple[int, ...], vocab: int | None) -> str:
    dims = "x".join(str(s) for s in shape)
    if vocab is not None:
        return f"token ids {dims} ({TOKEN_DTYPE}, vocabulary {vocab})"
    return f"float32 {dims}"


def sample_batch(batch: int, shape: tuple[int, ...], vocab: int | None, device: str = "meta"):
    """One batch of inputs as the model's forward takes it (needs torch)."""
    import torch

    if vocab is not None:
        return torch.zeros((batch, *shape), dtype=torch.int64, device=device)
    return torch.empty((batch, *shape), device=device)


def forward_error(model: Any, shape: tuple[int, ...], vocab: int | None) -> str | None:
    """Why a batch of 2 at ``shape`` does not go through ``model`` on meta, or None if it does.

    Any exception counts: a user's model may refuse a shape with an AssertionError
    (``nn.MultiheadAttention``'s shape check) as well as a RuntimeError.
    """
    import torch

    try:
        with torch.no_grad():
            model(sample_batch(2, shape, vocab))
    except Exception as e:  # noqa: BLE001 -- the user's forward may raise anything
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
    return None


def input_hint() -> str:
    return (
        "give the input the model's forward takes with --input (128x512: a sequence of 128 vectors "
        "of 512; 512 with --vocab 32000: 512 token ids)"
    )
