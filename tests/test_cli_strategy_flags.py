"""Strategy keywords the CLI does not declare itself: typed from their options fields."""

import json

import pytest

from simdl.cli import main


def predict(args, capsys):
    code = main(["predict", "--model", "resnet50", "--gpus", "4", "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


@pytest.mark.parametrize("text", ["200000000", "2e8"])
def test_integer_option_takes_plain_and_exponent_form(text, capsys):
    code, d, err = predict(["--strategy", "zero2", "--reduce-bucket-size", text], capsys)
    assert code == 0, err
    assert d["config"]["reduce_bucket_size"] == 200_000_000


def test_boolean_option_changes_the_prediction(capsys):
    # overlap_comm doubles the ipg bucket (DeepSpeed stage_1_and_2.py): more memory when on.
    peaks = {}
    for value in ("true", "false"):
        code, d, err = predict(["--strategy", "zero2", "--overlap-comm", value], capsys)
        assert code == 0, err
        assert d["config"]["overlap_comm"] is (value == "true")
        peaks[value] = d["max_memory_allocated_bytes"]
    assert peaks["true"] > peaks["false"]


def test_float_and_choice_options(capsys):
    code, d, err = predict(["--strategy", "zero2", "--gradient-clipping", "1.0", "--offload-optimizer", "cpu"], capsys)
    assert code == 0, err
    assert d["config"]["gradient_clipping"] == 1.0 and d["config"]["offload_optimizer"] == "cpu"


@pytest.mark.parametrize(
    "args, named",
    [
        (["--overlap-comm", "maybe"], "'maybe' is not true or false"),
        (["--reduce-bucket-size", "1.5"], "'1.5' is not an integer"),
        (["--offload-optimizer", "gpu"], "'gpu' is not one of none, cpu"),
        (["--gradient-clipping", "nan"], "'nan' is not a finite number"),
    ],
)
def test_bad_values_are_one_line_exit_2(args, named, capsys):
    code, _, err = predict(["--strategy", "zero2", *args], capsys)
    assert code == 2
    assert named in err and len(err.strip().splitlines()) == 1


def test_help_comes_from_the_field_docstring(capsys):
    assert main(["predict", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--reduce-bucket-size N Elements reduced at a time" in out
    assert "default 500000000; for zero0, zero1, zero2, zero3" in out
    assert "--offload-param {none,cpu}" in out


def test_sweep_reads_typed_values():
    from simdl.explore.grid import accepted_keys

    keys = accepted_keys()
    assert keys["reduce_bucket_size"] is int and keys["overlap_comm"] is bool
    assert keys["gradient_clipping"] is float and keys["offload_optimizer"] is str
