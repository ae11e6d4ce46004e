"""Open a text file that may be compressed, chosen by its suffix.

Validation records are kept compressed in the repository (``lab/records/*.jsonl.xz``,
test fixtures ``*.jsonl.gz``); everything that reads JSON lines reads them through
:func:`open_text`, so a compressed file and its plain form read the same. Writers append to
plain files only (an interrupted sweep keeps every finished line; ``--resume`` reads it).
"""

from __future__ import annotations

import gzip
import lzma
import os
from typing import IO

COMPRESSED_SUFFIXES = (".gz", ".xz")


def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """``path`` opened for reading text: gzip for ``.gz``, xz for ``.xz``, else plain."""
    name = os.fspath(path)
    if name.endswith(".gz"):
        return gzip.open(name, "rt", encoding=encoding)
    if name.endswith(".xz"):
        return lzma.open(name, "rt", encoding=encoding)
    return open(name, encoding=encoding)


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """The whole text of ``path``, decompressed as :func:`open_text` does."""
    with open_text(path, encoding) as f:
        return f.read()
