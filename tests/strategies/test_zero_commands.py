"""Every ZeRO stage through each command that takes a strategy: trace, plot, memplot, maxbatch
(predict, sweep and recommend are in test_zero.py)."""

import pytest

from simdl.cli import main

COMMON = ["--model", "resnet18", "--gpus", "4", "--cluster", "a100-40gb-2node"]


@pytest.mark.parametrize("stage", ["zero0", "zero1", "zero2", "zero3"])
def test_trace_plot_memplot_and_maxbatch_take_every_stage(stage, tmp_path, capsys):
    trace = tmp_path / f"{stage}.json"
    assert main(["trace", *COMMON, "--strategy", stage, "-o", str(trace)]) == 0
    assert trace.stat().st_size > 0 and f"{stage}" in trace.read_text()
    for command in ("plot", "memplot"):
        png = tmp_path / f"{stage}-{command}.png"
        assert main([command, *COMMON, "--strategy", stage, "-o", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["maxbatch", *COMMON, "--strategy", stage]) == 0
    assert f"resnet18 / {stage}" in capsys.readouterr().out
