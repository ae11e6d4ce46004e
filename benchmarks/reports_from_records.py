"""The reports once committed under report/ against the same tables made again from lab/records.

    python benchmarks/reports_from_records.py [COMMIT]    (default bf4cb92, the last commit with report/)

For every ``report/*/README.md`` of COMMIT whose "Report made with" line names results files
of validate/results/ (now packed in lab/records/), the accuracy tables (every metric row, both engines) and the band
line are computed again from the packed records (simdl.report.validation.mape_table,
band_line) and compared with the committed text, row by row; rows the report added after the
old one was written are not compared. Prints each report whose rows differ, with both rows,
and a count of reports the same / differing / not reproducible from committed records.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from simdl.report.metrics import read_result_files
from simdl.report.validation import band_line, engines_present, mape_table

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "lab" / "records"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def report_files(text: str) -> tuple[list[Path], bool] | None:
    """The packed records a report's command read, and whether it pooled repeats."""
    line = next((x for x in text.splitlines() if x.startswith("Report made with: `simdl report ")), None)
    if line is None:
        return None
    args = shlex.split(line.split("`simdl report ", 1)[1].rstrip("`"))
    files, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "--output"):
            skip = True
        elif a.startswith(("validate/results/", "lab/records/")):  # the files now packed in lab/records
            files.append(RECORDS / f"{Path(a).name.split('.')[0]}.jsonl.xz")
        elif not a.startswith("-"):
            return None  # a file outside the committed records (runs/ is git-ignored)
    if not files or not all(f.exists() for f in files):
        return None
    return files, "--repeats" in args


def differing_rows(text: str, files: list[Path], repeats: bool) -> list[tuple[str, str]]:
    records, _ = read_result_files(files, repeats=repeats)
    out = []
    for eng in engines_present(records) or ["analytic"]:
        head = f"## Accuracy per metric ({eng} engine)"
        if head not in text:
            continue
        old_lines = text.split(head, 1)[1].split("\n## ", 1)[0].splitlines()
        for new in mape_table(records, eng)[2:] + band_line(records, eng)[:1]:
            key = new.split(" | ")[0] if new.startswith("|") else "Measured step inside"
            old = next((x for x in old_lines if x.startswith(key)), None)
            cells = 5 if new.startswith("|") else 1
            if old is not None and old.split(" | ")[:cells] != new.split(" | ")[:cells]:
                out.append((old, new))
    return out


def main(argv: list[str]) -> int:
    commit = argv[0] if argv else "bf4cb92"
    names = sorted(
        n for n in _git("ls-tree", "-r", "--name-only", commit, "report/").split() if n.endswith("/README.md")
    )
    same = differ = missing = 0
    for name in names:
        text = _git("show", f"{commit}:{name}")
        found = report_files(text)
        if found is None:
            missing += 1
            print(f"{name}: not reproducible: its command names no committed results file, or one outside them")
            continue
        rows = differing_rows(text, *found)
        same += not rows
        differ += bool(rows)
        for old, new in rows:
            print(f"{name}:\n  committed: {old[:120]}\n  now:       {new[:120]}")
    print(f"{same} reports the same, {differ} differing, {missing} not reproducible ({len(names)} in {commit})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
