"""Reading a results JSONL (``python -m validate.run``'s output) for ``simdl report``, strictly.

A report of "0 runs" from an empty file, or one that silently drops a record, is a wrong
answer. Only a torn *last* line -- a run killed while its record was written, so the file
does not end in a newline -- is skipped, with a warning on stderr; anything else that is
not one JSON object per line is an error naming the file and the line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..errors import SimdlError

SCHEMA_PREFIX = "simdl-validation/"  # validate/run.py's "schema" field
REQUIRED_KEYS = ("run_id", "status")
# What a report reads of every record (simdl.report.validation): the run's configuration.
REPORT_SPEC_KEYS = ("model", "strategy")
MAX_BYTES = 1 << 30  # a results file of 1 GiB is not a sweep's output (committed ones are under 10 MB)


def _open_text(path: Path) -> str:
    if path.is_dir():
        raise SimdlError(f"{path}: is a directory; accepted: a results JSONL file (python -m validate.run -o)")
    if not path.exists():
        raise SimdlError(f"{path}: no such results file")
    if not path.is_file():
        raise SimdlError(f"{path}: not a regular file; accepted: a results JSONL file")
    if path.stat().st_size > MAX_BYTES:
        raise SimdlError(
            f"{path}: {path.stat().st_size:,} bytes is larger than a results file can be ({MAX_BYTES:,} bytes at most)"
        )
    try:
        from ..textfile import read_text

        return read_text(path)
    except PermissionError:
        raise SimdlError(f"{path}: cannot be read (permission denied)") from None
    except UnicodeDecodeError as e:
        raise SimdlError(f"{path}: not UTF-8 text (byte {e.start}); accepted: a results JSONL file") from None
    except (OSError, EOFError) as e:  # a corrupt .gz / .xz
        raise SimdlError(f"{path}: cannot be decompressed ({e}); accepted: a results JSONL file") from None


def _check_record(rec: Any, path: Path, line: int, for_report: bool) -> dict:
    if isinstance(rec, list):
        raise SimdlError(f"{path}:{line}: a JSON list; accepted: one JSON object (a run's record) per line")
    if not isinstance(rec, dict):
        raise SimdlError(f"{path}:{line}: a JSON {type(rec).__name__}; accepted: one JSON object per line")
    schema = rec.get("schema")
    if schema is not None and not (isinstance(schema, str) and schema.startswith(SCHEMA_PREFIX)):
        raise SimdlError(
            f"{path}:{line}: schema {str(schema)[:60]!r} is not a results record "
            f"({SCHEMA_PREFIX}N, written by python -m validate.run)"
        )
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        raise SimdlError(
            f"{path}:{line}: not a results record (no {', '.join(missing)}); "
            "accepted: the JSONL python -m validate.run writes"
        )
    if for_report:
        spec = rec.get("spec")
        if not isinstance(spec, dict) or any(k not in spec for k in REPORT_SPEC_KEYS):
            raise SimdlError(
                f"{path}:{line}: run {str(rec['run_id'])[:60]!r} has no spec with "
                f"{', '.join(REPORT_SPEC_KEYS)}; accepted: the JSONL python -m validate.run writes"
            )
    return rec


def read_records(path: str | Path, warn=None, for_report: bool = False) -> list[dict]:
    """Every record of the file, in order; raises :class:`SimdlError` naming the file and line
    of the first bad one. ``warn``: where the torn-last-line warning goes (default stderr);
    ``for_report``: also require what ``simdl report`` reads of each run (its spec)."""
    path = Path(path)
    text = _open_text(path)
    lines = text.split("\n")
    torn_tail = not text.endswith("\n")
    out = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, ln in enumerate(lines):
        ln = ln.strip()
        if not ln:
            continue
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError as e:
            if i == last and torn_tail:
                print(
                    f"simdl: warning: {path}:{i + 1}: skipped a torn last line (a run stopped while "
                    "writing its record)",
                    file=warn or sys.stderr,
                )
                continue
            if i == 0 and ln.startswith("["):
                raise SimdlError(
                    f"{path}: a JSON document, not JSON lines; accepted: one JSON object (a run's record) per line"
                ) from None
            raise SimdlError(
                f"{path}:{i + 1}: not a JSON object ({e.msg} at column {e.colno}); only a torn last line may be skipped"
            ) from None
        out.append(_check_record(rec, path, i + 1, for_report))
    if not out:
        raise SimdlError(f"{path}: no run records (empty file); accepted: the JSONL python -m validate.run writes")
    return out
