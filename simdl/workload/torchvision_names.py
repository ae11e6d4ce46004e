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
    if not _may_be_listed(name):
        return False  # certain without importing torch (seconds): see _may_be_listed
    return name in torchvision_model_names()


def _may_be_listed(name: str) -> bool:
    """False only when ``name`` cannot be a listed model: list_models(module=torchvision.models)
    lists builders defined in torchvision/models/*.py (one level; subpackages are other
    modules) and registered under their function name or a name given to register_model
    (torchvision/models/_api.py), so a listed name appears as a word in those files. Read
    without importing torchvision; True when the files cannot be read."""
    import importlib.util
    from pathlib import Path

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return False  # not an identifier: no builder is called that
    try:
        spec = importlib.util.find_spec("torchvision")
        folders = list(spec.submodule_search_locations or ()) if spec else []
        files = [f for d in folders for f in sorted((Path(d) / "models").glob("*.py"))]
        if not files:
            return True
        word = re.compile(rf"\b{re.escape(name)}\b")
        return any(word.search(f.read_text(encoding="utf-8", errors="replace")) for f in files)
    except (OSError, ImportError, ValueError):
        return True


def vit_patch(name: str) -> int | None:
    """Patch size of a torchvision VisionTransformer name (``vit_b_16`` -> 16), else None:
    these builders take ``image_size`` and need H = W a multiple of the patch."""
    m = re.fullmatch(r"vit_[a-z]_(\d+)", name)
    return int(m.group(1)) if m else None
