"""Output paths checked before the work that fills them starts.

A sweep of minutes, a simulation or a report should not end in a traceback because its
``-o`` names a missing folder, a folder, a read-only place, or a file where a folder is
expected. Each check raises :class:`simdl.errors.SimdlError` with one line naming the
option, the path and what is wrong; nothing is created.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from .errors import SimdlError


def _writable_dir(d: Path) -> bool:
    return os.access(d, os.W_OK | os.X_OK)


def check_output_file(path: str | os.PathLike, option: str = "-o", suffixes: Iterable[str] = ()) -> Path:
    """A file simdl may create or replace: not a folder, in a folder that exists and is
    writable, and (when ``suffixes`` are given) ending in one of them."""
    p = Path(path)
    text = os.fspath(path)
    suffixes = tuple(suffixes)
    if not text:
        raise SimdlError(f"{option}: an empty path; accepted: a file name")
    if suffixes and p.suffix.lower() not in suffixes:
        raise SimdlError(f"{option} {text}: accepted: a {', '.join(suffixes)} file")
    if p.is_dir():
        raise SimdlError(f"{option} {text}: is a directory; accepted: a file name")
    parent = p.parent
    if not parent.exists():
        raise SimdlError(f"{option} {text}: directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise SimdlError(f"{option} {text}: {str(parent)!r} is a file, not a directory")
    if p.exists() and not os.access(p, os.W_OK):
        raise SimdlError(f"{option} {text}: the file is read-only")
    if not p.exists() and not _writable_dir(parent):
        raise SimdlError(f"{option} {text}: directory {str(parent)!r} is not writable")
    return p


def check_output_dir(path: str | os.PathLike, option: str = "-o") -> Path:
    """A folder simdl may create (its parent must exist) or write into."""
    p = Path(path)
    text = os.fspath(path)
    if not text:
        raise SimdlError(f"{option}: an empty path; accepted: a directory name")
    if p.exists():
        if not p.is_dir():
            raise SimdlError(f"{option} {text}: is a file; accepted: a directory (created if missing)")
        if not _writable_dir(p):
            raise SimdlError(f"{option} {text}: the directory is not writable")
        return p
    parent = p.parent
    if not parent.is_dir():
        what = "is a file" if parent.exists() else "does not exist"
        raise SimdlError(f"{option} {text}: parent directory {str(parent)!r} {what}")
    if not _writable_dir(parent):
        raise SimdlError(f"{option} {text}: parent directory {str(parent)!r} is not writable")
    return p
