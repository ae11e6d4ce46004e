"""Bad and hostile inputs, one table: each ends with exit status 2, nothing on stdout, exactly
one line on stderr that names the bad value, and no traceback. Run in-process through
simdl.cli.main (fast); docs/bad_inputs.md lists the same cases with what a user sees.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from simdl.cli import main

BOMB = (
    "".join(
        f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['xxxxxxxx'] * 9)}]\n"
        for p, k in zip([None, "a", "b", "c", "d", "e", "f", "g"], "abcdefgh")
    )
    + "name: *h\n"
)

FILES = {
    # results files for `simdl report`
    "empty.jsonl": "",
    "list.jsonl": '[{"run_id": "a", "status": "ok"}]\n',
    "doc.jsonl": '[\n  {"run_id": "a", "status": "ok"}\n]\n',
    "torn_mid.jsonl": '{"run_id": "a", "status": "ok", "spec": {"model": "m", "strategy": "ddp"}}\n{"run_id": "b", "st\n'
    '{"run_id": "c", "status": "ok", "spec": {"model": "m", "strategy": "ddp"}}\n',
    "schema.jsonl": '{"schema": "other/2", "run_id": "a", "status": "ok"}\n',
    "nospec.jsonl": '{"run_id": "a", "status": "ok"}\n',
    "number.jsonl": "42\n",
    # cluster files
    "bomb.yaml": BOMB,
    "deep.yaml": "name: x\nnotes: " + "[" * 3000 + "]" * 3000 + "\n",
    "longstr.yaml": "name: x\nnotes: " + "x" * (70 * 1024) + "\n",
    "huge.yaml": "name: x\nnotes: |\n" + ("  " + "y" * 1000 + "\n") * 4300,
    "extends.yaml": "extends: nosuch\nname: x\n",
    "devzero.yaml": "extends: a10g-ps\nname: z\ncompute_profile: /dev/zero\n",
    "outside.yaml": "extends: a10g-ps\nname: z\ncompute_profile: ../outside.compute.json\n",
    "dir.yaml/": None,
    "list.yaml": "- 1\n- 2\n",
    "tabs.yaml": "name: x\n\tgpu: a100\n",
    # model factories
    "mymodel.py": "def boom(num_classes=10):\n    raise RuntimeError('factory exploded')\n"
    "def needs(width):\n    pass\n"
    "def notmod(num_classes=10):\n    return 42\n",
    "badimport.py": "raise ImportError('broken inside')\n",
    # calibration run directories
    "run_empty/run.json": "",
    "run_torn/run.json": '{"nproc_per_node": 2, "quick"',
    "run_list/run.json": "[1, 2]\n",
    "run_shape/run.json": '{"nproc_per_node": "2", "quick": true}\n',
    "run_none/": None,
    # outputs
    "afile": "x\n",
    "outdir/": None,
}

P = ["predict", "--gpus", "2", "--strategy", "ddp"]
CASES = [
    # --- numbers and names (predict)
    ("epochs nan", ["predict", "--epochs", "nan"], "'nan' is not a finite number"),
    ("epochs inf", ["predict", "--epochs", "inf", "--json"], "'inf' is not a finite number"),
    ("bucket cap negative", [*P, "--bucket-cap-mb", "-25"], "--bucket-cap-mb -25: accepted"),
    ("bucket cap nan", [*P, "--bucket-cap-mb", "nan"], "'nan'"),
    ("unknown option", ["predict", "--foo"], "simdl predict: error: unrecognized arguments: --foo"),
    ("argparse prefix once", ["predict", "--gpus", "x"], "simdl predict: error: argument --gpus"),
    ("sweep nan", ["sweep", "--epochs", "nan,1"], "not a finite number"),
    ("iterations huge", [*P, "--engine", "sim", "--iterations", "1000000"], "--iterations 1000000"),
    (
        "ps servers beyond cluster",
        ["predict", "--strategy", "ps-sync", "--cluster", "a10g-ps", "--ps-servers", "1000000"],
        "--ps-servers 1000000",
    ),
    (
        "ps servers beyond cluster, sim",
        ["predict", "--strategy", "ps-sync", "--cluster", "a10g-ps", "--ps-servers", "2", "--engine", "sim"],
        "--ps-servers 2",
    ),
    # --- small commands
    ("maxbatch batch", ["maxbatch", "--batch-size", "-1"], "--batch-size"),
    (
        "memory format unknown",
        ["predict", "--memory-format", "nhwc"],
        "unknown memory format 'nhwc'; accepted: channels_last, contiguous",
    ),
    ("memory format maxbatch", ["maxbatch", "--memory-format", "1"], "unknown memory format '1'"),
    ("memory format memplot", ["memplot", "--memory-format", "NHWC", "-o", "m.png"], "memory format 'NHWC'"),
    ("memory format sweep", ["sweep", "--memory-format", "contiguous,nchw"], "memory_format: unknown memory_format"),
    ("trace max-links", ["trace", "--max-links", "-1", "-o", "t.json"], "--max-links -1"),
    ("sweep jobs 0", ["sweep", "--jobs", "0"], "--jobs 0"),
    ("clusters list name", ["clusters", "list", "nosuch"], "'nosuch'"),
    ("clusters bad action", ["clusters", "frob"], "'frob'"),
    # --- results files (report)
    ("report empty", ["report", "empty.jsonl", "-o", "rep"], "empty.jsonl: no run records"),
    ("report list", ["report", "list.jsonl", "-o", "rep"], "list.jsonl:1: a JSON list"),
    ("report json document", ["report", "doc.jsonl", "-o", "rep"], "doc.jsonl: a JSON document"),
    ("report torn mid-file", ["report", "torn_mid.jsonl", "-o", "rep"], "torn_mid.jsonl:2:"),
    ("report wrong schema", ["report", "schema.jsonl", "-o", "rep"], "schema.jsonl:1: schema 'other/2'"),
    ("report no spec", ["report", "nospec.jsonl", "-o", "rep"], "nospec.jsonl:1: run 'a' has no spec"),
    ("report a number", ["report", "number.jsonl", "-o", "rep"], "number.jsonl:1: a JSON int"),
    ("report directory", ["report", "outdir", "-o", "rep"], "outdir: is a directory"),
    ("report missing", ["report", "nosuch.jsonl", "-o", "rep"], "nosuch.jsonl: no such results file"),
    # --- output paths, checked before the work
    ("report -o a file", ["report", "nospec.jsonl", "-o", "afile"], "-o afile: is a file"),
    ("report -o missing parent", ["report", "nospec.jsonl", "-o", "no/such/rep"], "'no/such' does not exist"),
    ("predict takes no -o", [*P, "-o", "no/such/t.json"], "unrecognized arguments: -o"),
    ("trace -o missing dir", ["trace", "--gpus", "2", "-o", "no/such/t.json"], "'no/such' does not exist"),
    ("trace -o a directory", ["trace", "--gpus", "2", "-o", "outdir"], "-o outdir: is a directory"),
    ("trace -o under a file", ["trace", "--gpus", "2", "-o", "afile/t.json"], "'afile' is a file"),
    ("plot -o missing dir", ["plot", "--gpus", "2", "-o", "no/such/t.png"], "does not exist"),
    ("plot -o a directory", ["plot", "--gpus", "2", "-o", "outdir.png"], "-o outdir.png: is a directory"),
    ("memplot -o wrong suffix", ["memplot", "-o", "mem.txt"], ".png"),
    ("sweep -o missing dir", ["sweep", "--gpus", "2,4", "-o", "no/such/rows.csv"], "'no/such' does not exist"),
    ("sweep -o a directory", ["sweep", "--gpus", "2,4", "-o", "outdir.csv"], "-o outdir.csv: is a directory"),
    ("sweep --plot missing dir", ["sweep", "--gpus", "2,4", "--plot", "no/such/p.png"], "does not exist"),
    # --- cluster files
    ("cluster alias bomb", [*P, "--cluster", "bomb.yaml"], "more than 200,000 values"),
    ("cluster deep nesting", [*P, "--cluster", "deep.yaml"], "deep.yaml"),
    ("cluster long string", [*P, "--cluster", "longstr.yaml"], "a string of 71,680 characters"),
    ("cluster huge file", [*P, "--cluster", "huge.yaml"], "bytes; a description file is at most"),
    ("cluster extends nosuch", [*P, "--cluster", "extends.yaml"], "extends.yaml: extends: unknown cluster preset"),
    ("cluster /dev/zero profile", [*P, "--cluster", "devzero.yaml"], "'/dev/zero' is outside the profile's folder"),
    ("cluster profile outside", [*P, "--cluster", "outside.yaml"], "outside the profile's folder"),
    ("cluster is a directory", [*P, "--cluster", "dir.yaml"], "'dir.yaml' is a directory"),
    ("cluster not a mapping", [*P, "--cluster", "list.yaml"], "expected a mapping"),
    ("cluster malformed", [*P, "--cluster", "tabs.yaml"], "malformed YAML at line 2"),
    ("cluster missing", [*P, "--cluster", "nosuch.yaml"], "'nosuch.yaml' does not exist"),
    ("cluster /dev/zero itself", [*P, "--cluster", "/dev/zero"], "/dev/zero: not a regular file"),
    # --- calibrate --resume
    ("resume empty run.json", ["calibrate", "--resume", "run_empty"], "run.json is empty"),
    ("resume torn run.json", ["calibrate", "--resume", "run_torn"], "run.json is not valid JSON"),
    ("resume list run.json", ["calibrate", "--resume", "run_list"], "holds a JSON list"),
    ("resume wrong shape", ["calibrate", "--resume", "run_shape"], "nproc_per_node = '2'"),
    ("resume no run.json", ["calibrate", "--resume", "run_none"], "no run.json there"),
]

TORCH_CASES = [
    (
        "factory raises",
        [*P, "--model", "./mymodel.py:boom"],
        "'./mymodel.py:boom' (called with keywords num_classes) raised RuntimeError: factory exploded",
    ),
    ("factory missing argument", [*P, "--model", "./mymodel.py:needs"], "TypeError: needs() missing 1 required"),
    ("factory not a module", [*P, "--model", "./mymodel.py:notmod"], "returned int, expected a torch.nn.Module"),
    ("factory file missing", [*P, "--model", "./nosuch.py:make"], "no such file './nosuch.py'"),
    ("factory import raises", [*P, "--model", "./badimport.py:make"], "raised ImportError: broken inside"),
    ("factory module not on path", [*P, "--model", "mymodel:boom"], "--model ./mymodel.py:boom"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name, text in FILES.items():
        p = tmp_path / name
        if text is None:
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    (tmp_path / "outdir.png").mkdir()
    (tmp_path / "outdir.csv").mkdir()
    (tmp_path.parent / "outside.compute.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    # The working directory is not on the import path, as for the `simdl` console script.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    return tmp_path


def _check(args, needle, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("simdl"), err
    if needle:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args, needle", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_ends_in_one_line_exit_2(args, needle, workdir, capsys):
    _check(args, needle, capsys)


@pytest.mark.torch
@pytest.mark.parametrize("args, needle", [c[1:] for c in TORCH_CASES], ids=[c[0] for c in TORCH_CASES])
def test_bad_model_factory_ends_in_one_line_exit_2(args, needle, workdir, capsys):
    _check(args, needle, capsys)


def test_a_torn_last_line_is_skipped_with_a_warning(workdir, capsys):
    rec = {"run_id": "a", "status": "failed", "error": "oom", "spec": {"model": "vgg16", "strategy": "ddp"}}
    (workdir / "torn_last.jsonl").write_text(json.dumps(rec) + "\n" + '{"run_id": "b", "sta')
    from simdl.report.results_file import read_records

    assert [r["run_id"] for r in read_records(workdir / "torn_last.jsonl")] == ["a"]
    assert "torn_last.jsonl:2: skipped a torn last line" in capsys.readouterr().err
    # The same torn line followed by a newline was written whole: an error, not a skip.
    (workdir / "whole.jsonl").write_text(json.dumps(rec) + "\n" + '{"run_id": "b", "sta\n')
    _check(["report", "whole.jsonl", "-o", "rep"], "whole.jsonl:2:", capsys)


def test_read_only_output_is_refused_before_the_work(workdir, monkeypatch, capsys):
    """Root writes anywhere, so the check is exercised with os.access answering as for a user."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if "ro" in str(p) else real(p, mode, **kw))
    (workdir / "ro").mkdir()
    _check(["trace", "--gpus", "2", "-o", "ro/t.json"], "directory 'ro' is not writable", capsys)
    _check(["report", "nospec.jsonl", "-o", "ro"], "-o ro: the directory is not writable", capsys)
    (workdir / "ro.json").write_text("{}")
    _check(["trace", "--gpus", "2", "-o", "ro.json"], "-o ro.json: the file is read-only", capsys)


def test_a_sweep_whose_output_fails_late_keeps_its_rows(workdir, monkeypatch, capsys):
    """The folder passes the check and then cannot be written: the rows go to a named temporary file."""
    import importlib

    sweep_mod = importlib.import_module("simdl.explore.sweep")  # simdl.explore.sweep is also a function
    real = sweep_mod.write_rows

    def failing(rows, path):
        if "rows.csv" in str(path) and "simdl-sweep-" not in str(path):
            raise PermissionError(13, "Permission denied")
        return real(rows, path)

    monkeypatch.setattr(sweep_mod, "write_rows", failing)
    code = main(["sweep", "--gpus", "2,4", "--executor", "serial", "-o", "rows.csv"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    kept = err.split("written to ")[1].strip()
    assert "the 2 rows were written to" in err and kept.endswith(".csv")
    assert len(open(kept).read().splitlines()) == 3  # header + two rows
    os.remove(kept)


def test_the_docs_table_lists_every_case():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "bad_inputs.md").read_text()
    missing = [name for name, *_ in CASES + TORCH_CASES if f"| {name} | `simdl {' '.join(_[0])}` |" not in doc]
    assert not missing, f"docs/bad_inputs.md lacks {missing}"


def test_an_unreadable_cluster_file_is_one_line(workdir, monkeypatch, capsys):
    """Root reads anything, so reading is made to fail as it does for a user without permission."""
    from simdl.cluster import safe_yaml

    (workdir / "locked.yaml").write_text("name: x\n")

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(safe_yaml, "open", refuse, raising=False)
    _check([*P, "--cluster", "locked.yaml"], "locked.yaml: cannot be read (permission denied)", capsys)
