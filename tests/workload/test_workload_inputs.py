"""Inputs that are not images: factory models on any shape, and token ids with a vocabulary.

The factories (tests/workload/factories.py) are nn.TransformerEncoder models over an
nn.Embedding; each traced table is checked against the same model built on CPU and run
for real (parameter count, FlopCounterMode's FLOPs), not against simdl's own figures.
"""

from __future__ import annotations

import pytest

import simdl
from simdl.errors import SimdlError
from simdl.workload.inputs import describe, is_image, parse_input_shape

FACTORIES = "tests.workload.factories"


@pytest.mark.parametrize(
    "text, shape", [("512", (512,)), ("128x512", (128, 512)), ("3x32x32", (3, 32, 32)), ("2x3x4x5", (2, 3, 4, 5))]
)
def test_input_shapes_of_any_rank_parse(text, shape):
    assert parse_input_shape(text) == shape


@pytest.mark.parametrize("text", ["0", "128x0", "abc", "1x2x3x4x5x6x7", "", "-5"])
def test_bad_input_shapes_name_the_value(text):
    with pytest.raises(SimdlError, match=repr(text).replace("(", r"\(")):
        parse_input_shape(text)


def test_only_three_float_dimensions_are_an_image():
    assert is_image((3, 32, 32), None)
    assert not is_image((3, 32, 32), 1000) and not is_image((128, 512), None)
    assert describe((512,), 32000) == "token ids 512 (int64, vocabulary 32000)"


@pytest.mark.parametrize("vocab", [1, 0, -3, True, 2.5])
def test_bad_vocab_is_refused(vocab):
    with pytest.raises(SimdlError, match="--vocab"):
        simdl.predict(model=f"{FACTORIES}:token_classifier", strategy="ddp", gpus=2, input_shape="64", vocab=vocab)


def test_zoo_image_models_refuse_other_inputs():
    with pytest.raises(SimdlError, match="'vgg16' takes images"):
        simdl.predict(model="vgg16", input_shape="512", vocab=1000)


def _real_model(factory, **kw):
    import torch

    from tests.workload import factories

    torch.manual_seed(0)
    return getattr(factories, factory)(**kw)


@pytest.mark.torch
def test_token_classifier_traces_and_matches_the_real_model(tmp_path, monkeypatch):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    kw = dict(model=f"{FACTORIES}:token_classifier", strategy="ddp", gpus=2, batch_size=8, num_classes=5)
    r = simdl.predict(**kw, input_shape="64", vocab=3000)
    assert r.config["vocab_size"] == 3000 and r.config["input"].startswith("token ids 64")
    assert "train_samples" in r.config["assumed"]  # the sample count is CIFAR-10's: said so
    from simdl.workload.library import load_workload

    table = load_workload(kw["model"], input_shape=(64,), num_classes=5, vocab=3000)
    assert table.extracted_with["loss"] == "cross_entropy"
    assert table.extracted_with["vocab_size"] == 3000
    real = _real_model("token_classifier", num_classes=5, input_shape=(64,), vocab_size=3000)
    assert table.param_count == sum(p.numel() for p in real.parameters())  # the vocab reached the factory
    ids = torch.randint(0, 3000, (8, 64))
    # The math attention backend runs as matmuls FlopCounterMode counts (the fused CPU kernel
    # is not in its registry); the same FLOPs the trace's memory-efficient kernel is given.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        real(ids)
    assert table.total("fwd_flops", 8) == pytest.approx(counter.get_total_flops(), rel=0.02)
    # Activations grow with the sequence: twice the tokens keep more than 1.8x the saved bytes.
    long = load_workload(kw["model"], input_shape=(128,), num_classes=5, vocab=3000)
    assert long.total("saved_bytes", 8) > 1.8 * table.total("saved_bytes", 8)


@pytest.mark.torch
def test_language_model_loss_is_cross_entropy_over_every_position(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    from simdl.workload.library import load_workload

    table = load_workload(f"{FACTORIES}:tiny_lm", input_shape=(32,), num_classes=500, vocab=500)
    assert table.extracted_with["loss"] == "cross_entropy"
    real = _real_model("tiny_lm", vocab_size=500, input_shape=(32,))
    assert table.param_count == sum(p.numel() for p in real.parameters())
    # Without --classes the logits are recognised by the vocabulary.
    plain = load_workload(f"{FACTORIES}:tiny_lm", input_shape=(32,), num_classes=10, vocab=500)
    assert plain.extracted_with["loss"] == "cross_entropy over the vocabulary"
    assert plain.total("fwd_flops", 4) == table.total("fwd_flops", 4)
    r = simdl.predict(
        model=f"{FACTORIES}:tiny_lm",
        strategy="fsdp",
        gpus=4,
        input_shape="32",
        vocab=500,
        num_classes=500,
        train_samples=1000,
        engine="sim",
    )
    assert r.iteration_time_s > 0 and r.fits_in_memory


@pytest.mark.torch
def test_vector_sequences_go_to_the_factory_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    r = simdl.predict(model=f"{FACTORIES}:vector_encoder", strategy="ddp", gpus=2, input_shape="128x64")
    assert r.config["input"] == "float32 128x64" and r.config["input_shape"] == "128x64"


@pytest.mark.torch
def test_a_transformer_on_an_image_input_is_one_line_naming_the_models_error(tmp_path, monkeypatch, capsys):
    from simdl.cli import main

    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    code = main(["predict", "--model", f"{FACTORIES}:vector_encoder", "--strategy", "ddp", "--gpus", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "AssertionError" in err and "--input" in err


@pytest.mark.torch
def test_cli_predicts_a_language_model_from_token_ids(tmp_path, monkeypatch, capsys):
    import json

    from simdl.cli import main

    monkeypatch.setenv("SIMDL_CACHE_DIR", str(tmp_path))
    code = main(
        [
            "predict",
            "--model",
            f"{FACTORIES}:tiny_lm",
            "--input",
            "32",
            "--vocab",
            "500",
            "--classes",
            "500",
            "--samples",
            "1000",
            "--optimizer",
            "adamw",
            "--strategy",
            "ddp",
            "--gpus",
            "2",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["config"]["vocab_size"] == 500 and out["config"]["optimizer"] == "adamw"
    assert out["config"]["input"] == "token ids 32 (int64, vocabulary 500)"
    assert "train_samples" not in out["config"]["assumed"]
