"""Reading a user's YAML file with bounds: size, nesting depth, node count, string length.

A cluster or GPU file comes from the user, and YAML can make a small file expand into a
huge value: aliases (``&a [*b, *b, ...]``) share one object many times over, and anything
that walks or prints the value (an error message, ``copy.deepcopy``) expands it. Each bound
below is far above what a real description needs (the shipped presets: under 90 KB, depth
10, under 6,500 values, strings under 1,400 characters) and far below what would take minutes or gigabytes. A file
beyond one is refused with one line naming the file and the bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from ..errors import SimdlError

MAX_FILE_BYTES = 4 * 1024 * 1024  # the largest shipped preset is 90 KB
MAX_DEPTH = 32  # nesting of mappings and lists; the shipped presets reach 10
MAX_NODES = 200_000  # values, counted as the structure would print (aliases expanded)
MAX_STRING_CHARS = 64 * 1024  # the longest shipped string is under 1,400 characters

# libyaml's C loader when PyYAML was built with it: faster, and its parser has its own
# nesting limit; the pure-Python SafeLoader otherwise. Both construct plain types only.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_text(path: Path) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SimdlError(f"{path}: no such file") from None
    except OSError as e:
        raise SimdlError(f"{path}: cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise SimdlError(f"{path}: is a directory; accepted: a YAML file")
    if not stat.S_ISREG(st.st_mode):
        raise SimdlError(f"{path}: not a regular file; accepted: a YAML file")
    if st.st_size > MAX_FILE_BYTES:
        raise SimdlError(f"{path}: {st.st_size:,} bytes; a description file is at most {MAX_FILE_BYTES:,} bytes")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except PermissionError:
        raise SimdlError(f"{path}: cannot be read (permission denied)") from None
    except UnicodeDecodeError as e:
        raise SimdlError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise SimdlError(f"{path}: cannot be read ({e.strerror})") from None


def check_bounds(data: Any, where: str) -> None:
    """Walk ``data`` as a printer would (aliases expanded), stopping at the first bound crossed."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        obj, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise SimdlError(
                f"{where}: more than {MAX_NODES:,} values (YAML aliases expanded); a description file needs far fewer"
            )
        if depth > MAX_DEPTH:
            raise SimdlError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(obj, str):
            if len(obj) > MAX_STRING_CHARS:
                raise SimdlError(f"{where}: a string of {len(obj):,} characters; at most {MAX_STRING_CHARS:,}")
        elif isinstance(obj, dict):
            for k, v in obj.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(obj, (list, tuple)):
            stack.extend((v, depth + 1) for v in obj)


def load_yaml_file(path: Path) -> Any:
    """The file's YAML value, within the bounds above; :class:`SimdlError` on anything else."""
    text = _read_text(path)
    try:
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 -- a safe loader, C or Python
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SimdlError(" ".join(f"{path}: malformed YAML{at}: {problem}".split())[:300]) from None
    except RecursionError:
        raise SimdlError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    check_bounds(data, str(path))
    return data


MAX_DATA_FILE_BYTES = 64 * 1024 * 1024  # a compute profile; the shipped ones are under 200 KB


def check_data_file(p: Path, folders, where: str) -> Path:
    """A file a description names (a compute profile): a regular file of bounded size inside
    one of ``folders`` (the description's own folder, the shipped data folder), so that a
    file can neither point at a device (``/dev/zero``) nor read files elsewhere."""
    real = p.resolve()
    roots = [Path(f).resolve() for f in folders]
    if not any(real == r or r in real.parents for r in roots):
        raise SimdlError(
            f"{where}: {str(p)!r} is outside the profile's folder {str(roots[0])!r}; accepted: a file in that folder"
        )
    try:
        st = os.stat(real)
    except OSError as e:
        raise SimdlError(f"{where}: {str(p)!r} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise SimdlError(f"{where}: {str(p)!r} is not a regular file")
    if st.st_size > MAX_DATA_FILE_BYTES:
        raise SimdlError(f"{where}: {str(p)!r} has {st.st_size:,} bytes; at most {MAX_DATA_FILE_BYTES:,}")
    return real
