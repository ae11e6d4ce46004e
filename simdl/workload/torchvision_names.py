"""torchvision's own model names as ``--model NAME``: traced on demand like a zoo model.

Only looked up for a name that is neither a zoo name nor a ``module:factory`` spec, so a
built-in model never imports torch. The names are what
``torchvision.models.list_models(module=torchvision.models)`` lists: the classification
models (detection, segmentation and video builders take other inputs and are not listed).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import SimdlError

INSTALL = "pip install 'simdl[torch]'"


@lru_cache(maxsize=1)
def torchvision_model_names() -> tuple[str, ...]:
    """The classification model names of the installed torchvision; SimdlError without it."""
    try:
        import torchvision
    except ImportError as e:
        raise SimdlError(f"torchvision model names need torch and torchvision ({e}): {INSTALL}") from None
    return tuple(torchvision.models.list_models(module=torchvision.models))


def is_torchvision_model(name: str) -> bool:
    return name in torchvision_model_names()


def vit_patch(name: str) -> int | None:
    """Patch size of a torchvision VisionTransformer name (``vit_b_16`` -> 16), else None:
    these builders take ``image_size`` and need H = W a multiple of the patch."""
    m = re.fullmatch(r"vit_[a-z]_(\d+)", name)
    return int(m.group(1)) if m else None
