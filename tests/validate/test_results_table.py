"""validate/README's results table against the records it cites: each row's figures are what
``simdl report`` computes from the row's golden fixture (tests/fixtures/records/, the record
in lab/records/ less its memory timelines), and one full report is regenerated from one."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from simdl.cli import main
from simdl.report.metrics import read_result_files, summary
from simdl.report.validation import _pct, band_coverage, goals
from validate.records import RECORDS, fixture_text

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "validate" / "README.md"
FIXTURES = ROOT / "tests" / "fixtures" / "records"
ROW = re.compile(
    r"^\| (?P<host>[^|]+) \| (?P<ranks>[^|]+) \| \[`(?P<id>[a-z0-9.-]+)`\]\([^)]*\) \| (?P<profile>[^|]+) \| "
    r"(?P<runs>\d+) \| (?P<step>[^|]+) \| (?P<memory>[^|]+) \| (?P<staleness>[^|]+) \| (?P<order>[^|]+) \| "
    r"(?P<band>[^|]+) \|$"
)


def table_rows() -> list[dict[str, str]]:
    rows = [m.groupdict() for m in map(ROW.match, README.read_text().splitlines()) if m]
    return [{k: v.strip() for k, v in r.items()} for r in rows]


def figures(path: Path) -> dict[str, str]:
    """A row's figures as the report prints them (analytic engine)."""
    records, _ = read_result_files([path])
    s = summary(records, "analytic")
    ok = [r for r in records if r.get("status") == "ok"]
    band = band_coverage(records)
    stale = s["staleness"]
    order = {goal: achieved.split()[0] for goal, _, achieved, _ in goals(records) if goal.startswith("strategy order")}
    return {
        "runs": str(len(ok)),
        "step": f"{_pct(s['step_time']['mape'])} / {_pct(s['step_time']['max'])}",
        "memory": f"{_pct(s['peak_memory']['mape'])} / {_pct(s['peak_memory']['max'])}",
        "staleness": f"{_pct(stale['mape'])} ({stale['n']} runs)" if stale["n"] else "-",
        "order": f"{order['strategy order by time']} / {order['strategy order by memory']}",
        "band": f"{band['inside']}/{band['runs']}" if band["runs"] else "-",
    }


def test_the_table_has_a_row_per_processor():
    rows = table_rows()
    assert len(rows) >= 8
    assert len({r["id"] for r in rows}) == len(rows)


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: r["id"])
def test_a_rows_figures_are_its_fixtures(row):
    fixture = FIXTURES / f"{row['id']}.jsonl.gz"
    # the fixture is the committed record less its memory timelines, nothing else
    assert gzip.decompress(fixture.read_bytes()).decode() == fixture_text(RECORDS / f"{row['id']}.jsonl.xz")
    got = figures(fixture)
    assert {k: row[k] for k in got} == got


def test_simdl_report_regenerates_a_rows_report(tmp_path, capsys):
    row = next(r for r in table_rows() if r["id"] == "epyc-zen4-keepheap-3")
    assert main(["report", str(FIXTURES / "epyc-zen4-keepheap-3.jsonl.gz"), "-o", str(tmp_path)]) in (0, None)
    md = (tmp_path / "README.md").read_text()
    step_mape, step_max = (x.strip() for x in row["step"].split("/"))
    mem_mape, mem_max = (x.strip() for x in row["memory"].split("/"))
    assert f"| steady-state step time | {row['runs']} | {step_mape} | {step_max} |" in md
    assert f"| peak memory per rank (allocator) | {row['runs']} | {mem_mape} | {mem_max} |" in md
    inside, runs = row["band"].split("/")
    assert f"band: {inside} of {runs} runs" in md
    assert f"| strategy order by time | matches in every model | {row['order'].split(' / ')[0]} groups |" in md
    assert "uncalibrated" not in md  # the profile it names is found (lab/profiles/)
