"""A user's model factory: ``package.module:factory`` or ``path/to/file.py:factory``.

The module is imported the way Python would import it; the working directory is not added
to ``sys.path`` behind the user's back (a module there that shadows another would be
imported instead). A model in a file beside the user is named by its path,
``--model ./mymodel.py:make``. Whatever the factory itself raises ends as one line naming
the factory and its error (:class:`simdl.errors.SimdlError`), not a traceback of the
user's code.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from ..errors import SimdlError


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _import_file(spec: str, file: str) -> ModuleType:
    path = Path(file).expanduser()
    if not path.is_file():
        raise SimdlError(f"model factory {spec!r}: no such file {file!r}")
    # A module name per file and content, so that two files called model.py do not collide
    # and an edited file is imported again.
    import hashlib

    digest = hashlib.sha1(str(path.resolve()).encode() + path.read_bytes()).hexdigest()[:12]
    name = f"simdl_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise SimdlError(f"model factory {spec!r}: {file!r} is not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # the user's module failed at import: one line, not its traceback
        del sys.modules[name]
        raise SimdlError(f"model factory {spec!r}: importing {file} raised {_first_line(e)}") from None
    return module


def _import_module(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        hint = ""
        if e.name == module_name.split(".")[0] and Path(f"{module_name.replace('.', '/')}.py").is_file():
            hint = (
                f"; {module_name.replace('.', '/')}.py is in the current directory, which is not on the "
                f"import path: give its file, --model ./{module_name.replace('.', '/')}.py:{spec.partition(':')[2]}"
            )
        raise SimdlError(f"cannot import model factory module {module_name!r}: {e}{hint}") from None
    except Exception as e:
        raise SimdlError(f"model factory {spec!r}: importing {module_name} raised {_first_line(e)}") from None


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``package.module:factory`` (or ``file.py:factory``) and return the callable."""
    module_name, _, attr = spec.rpartition(":") if spec.count(":") > 1 else spec.partition(":")
    if not module_name or not attr:
        raise SimdlError(f"bad model factory {spec!r}; expected package.module:factory or path/to/file.py:factory")
    if module_name.endswith(".py"):
        module = _import_file(spec, module_name)
    else:
        module = _import_module(spec, module_name)
    factory: Any = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise SimdlError(f"model factory {spec!r}: {module_name} has no attribute {attr!r}")
    if not callable(factory):
        raise SimdlError(f"model factory {spec!r} is not callable")
    return factory


def call_factory(spec: str, factory: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``factory(**kwargs)``; an exception the factory raises becomes one line naming it."""
    try:
        return factory(**kwargs)
    except SimdlError:
        raise
    except Exception as e:
        given = "keywords " + ", ".join(kwargs) if kwargs else "no arguments"
        raise SimdlError(f"model factory {spec!r} (called with {given}) raised {_first_line(e)}") from None


def cache_name(spec: str) -> str:
    """The name a traced table of ``spec`` is cached under. A ``file.py:factory`` spec is named
    by the file's content, so that an edited file, or another folder's file of the same name,
    is traced anew instead of reusing a table of a different model."""
    module, _, attr = spec.rpartition(":")
    if not module.endswith(".py"):  # a zoo name or package.module:factory: the name itself
        return spec
    path = Path(module).expanduser()
    if not path.is_file():
        return spec
    import hashlib

    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:12]
    return f"{path.stem}.py-{digest}:{attr}"
