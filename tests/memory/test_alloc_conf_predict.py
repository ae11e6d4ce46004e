"""--cuda-alloc-conf / PYTORCH_CUDA_ALLOC_CONF reach the prediction in both engines
(simdl.predict's ``cuda_alloc_conf``, Job.cuda_alloc_conf, the CLI's flag)."""

import json

import pytest

import simdl
from simdl.cli import main
from simdl.job import Job

KW = dict(model="vgg16", strategy="fsdp", gpus=4)
EXPANDABLE = "expandable_segments:True"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)


def test_the_option_changes_reserved_memory_and_the_memo_keeps_them_apart():
    default = simdl.predict(**KW)
    expandable = simdl.predict(**KW, cuda_alloc_conf=EXPANDABLE)
    again = simdl.predict(**KW)  # after the option: the memoised default, not the option's figure
    assert expandable.max_memory_reserved_bytes < default.max_memory_reserved_bytes
    # The same tensors: allocated differs only by the blocks' rounding (a page-granular
    # segment rounds no request up to 2 MiB).
    assert expandable.max_memory_allocated_bytes == pytest.approx(default.max_memory_allocated_bytes, rel=0.01)
    assert again.max_memory_reserved_bytes == default.max_memory_reserved_bytes
    assert default.config["cuda_alloc_conf_source"] == "default" and default.config["cuda_alloc_conf"] == ""
    assert expandable.config["cuda_alloc_conf_source"] == "flag"
    assert expandable.config["cuda_alloc_conf"] == EXPANDABLE


def test_the_simulator_takes_it_too_and_agrees_with_the_analytic_engine():
    a = simdl.predict(**KW, cuda_alloc_conf=EXPANDABLE)
    s = simdl.predict(**KW, cuda_alloc_conf=EXPANDABLE, engine="sim", iterations=2, warmup=1)
    assert s.max_memory_reserved_bytes == a.max_memory_reserved_bytes
    assert s.peak_memory_bytes == a.peak_memory_bytes


def test_the_environment_variable_is_read_and_named(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", EXPANDABLE)
    r = simdl.predict(**KW)
    assert r.config["cuda_alloc_conf_source"] == "env" and r.config["cuda_alloc_conf"] == EXPANDABLE
    assert r.max_memory_reserved_bytes == simdl.predict(**KW, cuda_alloc_conf=EXPANDABLE).max_memory_reserved_bytes
    flag = simdl.predict(**KW, cuda_alloc_conf="max_split_size_mb:64")
    assert flag.config["cuda_alloc_conf_source"] == "flag"


def test_a_job_field():
    job = Job(**KW, cuda_alloc_conf=EXPANDABLE)
    assert simdl.predict(job).config["cuda_alloc_conf"] == EXPANDABLE
    assert simdl.predict(job.replace(cuda_alloc_conf=None)).config["cuda_alloc_conf_source"] == "default"


def test_cli_predict_and_maxbatch_take_the_flag(capsys):
    assert (
        main(
            [
                "predict",
                "--model",
                "vgg16",
                "--strategy",
                "fsdp",
                "--gpus",
                "4",
                "--json",
                "--cuda-alloc-conf",
                EXPANDABLE,
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["cuda_alloc_conf"] == EXPANDABLE
    assert (
        main(["maxbatch", "--model", "resnet18", "--strategy", "ddp", "--gpus", "2", "--cuda-alloc-conf", EXPANDABLE])
        == 0
    )
    assert "largest batch" in capsys.readouterr().out


def test_a_bad_option_is_a_one_line_error_with_exit_2(capsys):
    assert main(["predict", "--model", "vgg16", "--cuda-alloc-conf", "max_split_size_mb:5"]) == 2
    err = capsys.readouterr().err
    assert "max_split_size_mb:5" in err and "Traceback" not in err
