"""The memory_format knob: contiguous (NCHW, PyTorch's default) pays cuDNN's layout copies around
tensor-core convolutions (simdl.costs.gpu_rows), channels_last (NHWC) does not; nothing else moves."""

from __future__ import annotations

import numpy as np
import pytest

from simdl import Job, predict
from simdl.cli import main
from simdl.cluster import allocate
from simdl.errors import SimdlError

AMP_A100 = dict(model="resnet50", strategy="ddp", gpus=1, cluster="dgx-a100", dataset="imagenet", batch_size=64)


def test_channels_last_removes_exactly_the_layout_copies(monkeypatch):
    import simdl.costs.gpu_rows as rows
    from simdl.workload.library import load_workload

    t = load_workload("resnet50", "imagenet")
    profile = allocate("a100-80gb-nvlink", 1).spec.gpu.kernels
    for precision in ("tf32", "fp16-amp", "bf16"):
        nchw = rows.kernel_row_times(t, 32, profile, precision, 0.5, "contiguous")
        nhwc = rows.kernel_row_times(t, 32, profile, precision, 0.5, "channels_last")
        with monkeypatch.context() as m:
            m.setattr(rows, "_layout_copies", lambda *a: (0.0, 0.0))
            no_copies = rows.kernel_row_times(t, 32, profile, precision, 0.5, "contiguous")
        assert np.array_equal(nhwc[0], no_copies[0]) and np.array_equal(nhwc[1], no_copies[1])
        assert nchw[0].sum() > nhwc[0].sum() and nchw[1].sum() > nhwc[1].sum()


def test_channels_last_is_faster_on_tensor_core_convolutions_and_echoed():
    nchw = predict(**AMP_A100, precision="fp16-amp")
    nhwc = predict(**AMP_A100, precision="fp16-amp", memory_format="channels_last")
    assert nhwc.iteration_time_s < nchw.iteration_time_s
    assert nhwc.peak_memory_bytes == nchw.peak_memory_bytes  # the tensors' sizes do not change
    assert nchw.config["memory_format"] == "contiguous" and nhwc.config["memory_format"] == "channels_last"
    why = nchw.config["assumed"]["memory_format"]
    assert "PyTorch's default" in why and "NCHW" in why and "channels_last" in why and "layout copies" in why
    assert "memory_format" not in nhwc.config["assumed"]
    given = predict(**AMP_A100, precision="fp16-amp", memory_format="contiguous")
    assert "memory_format" not in given.config["assumed"]
    assert given.iteration_time_s == nchw.iteration_time_s
    job = predict(Job(**AMP_A100, precision="fp16-amp", memory_format="channels_last"))
    assert job.iteration_time_s == nhwc.iteration_time_s


@pytest.mark.parametrize(
    "kw",
    [
        # fp32 on a V100: cuDNN's SIMT (NCHW) kernels, no TF32 tensor cores, no copies to skip.
        dict(model="resnet50", strategy="ddp", gpus=2, cluster="v100-dgx1", dataset="imagenet", precision="fp32"),
        # a CPU device: no kernel model, no layout term.
        dict(model="resnet18", strategy="ddp", gpus=2, cluster="cpu-local"),
    ],
    ids=["v100-fp32", "cpu"],
)
def test_channels_last_changes_nothing_without_tensor_core_convolutions(kw):
    nchw, nhwc = predict(**kw), predict(**kw, memory_format="channels_last")
    assert nhwc.iteration_time_s == nchw.iteration_time_s
    assert nhwc.step_split_s == nchw.step_split_s
    assert nhwc.peak_memory_bytes == nchw.peak_memory_bytes
    assert nhwc.config["memory_format"] == "channels_last"


@pytest.mark.parametrize("bad", ["nhwc", "NCHW", "channels-last", "", 1, ["channels_last"]])
def test_a_bad_memory_format_names_it_and_the_accepted_ones(bad):
    with pytest.raises(SimdlError) as e:
        predict("resnet18", memory_format=bad)
    msg = str(e.value)
    assert f"unknown memory format {bad!r}" in msg and "accepted: channels_last, contiguous" in msg


def test_cli_memory_format_one_line_exit_2_and_accepted(capsys):
    assert main(["predict", "--model", "resnet18", "--memory-format", "nhwc"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert "unknown memory format 'nhwc'" in err and "channels_last, contiguous" in err
    assert main(["predict", "--model", "resnet18", "--memory-format", "channels_last", "--json"]) == 0
    assert '"memory_format": "channels_last"' in capsys.readouterr().out


def test_help_says_it_changes_nothing_on_cpu(capsys):
    assert main(["predict", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--memory-format" in text and "changes nothing on CPU devices" in text
