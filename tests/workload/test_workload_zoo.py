"""Datasets, model zoo and parameter counts (test 1: counts equal torchvision's)."""

from __future__ import annotations

import pytest

from simdl.errors import SimdlError
from simdl.workload.datasets import DATASETS, get_dataset, parse_input_shape
from simdl.workload.library import shipped_path
from simdl.workload.table import WorkloadTable
from simdl.workload.zoo import DEFAULT_WRAP_TYPES, MODELS


def test_datasets():
    assert get_dataset("cifar10").input_shape == (3, 32, 32)
    assert get_dataset("mnist").train_samples == 60_000
    assert get_dataset("imagenet").train_samples == 1_281_167
    with pytest.raises(SimdlError, match="did you mean 'cifar10'"):
        get_dataset("cifar")


@pytest.mark.parametrize("text", ["3x32xa", "0x3x3", "", "3x-1x4"])
def test_parse_input_shape_rejects(text):
    with pytest.raises(SimdlError, match="bad input shape .*CxHxW for images"):
        parse_input_shape(text)


def test_zoo_models_refuse_a_shape_that_is_not_an_image():
    from simdl.workload.zoo import build_adapted

    with pytest.raises(SimdlError, match="'resnet18' takes images .*3x32"):
        build_adapted("resnet18", (3, 32), 10)


def test_parse_input_shape():
    assert parse_input_shape(" 3X224x224 ") == (3, 224, 224)


def test_every_model_has_wrap_types():
    assert set(MODELS) <= set(DEFAULT_WRAP_TYPES)


@pytest.mark.torch
def test_wrap_types_beyond_the_built_in_models_name_torchvision_models_and_their_classes():
    import torchvision

    for name in set(DEFAULT_WRAP_TYPES) - set(MODELS):
        assert name in torchvision.models.list_models(module=torchvision.models), name
        model = torchvision.models.get_model(name, weights=None, num_classes=10)
        classes = {type(m).__name__ for m in model.modules()}
        assert set(DEFAULT_WRAP_TYPES[name]) <= classes, name


def _torchvision_count(name: str, num_classes: int, image_size: int) -> int:
    """Parameters of the unmodified torchvision model, built on meta (no memory)."""
    import torch
    import torchvision

    extra = {"image_size": image_size} if name.startswith("vit") else {}
    with torch.device("meta"):
        model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **extra)
    return sum(p.numel() for p in model.parameters())


def _examples_mnist_net_count() -> int:
    """pytorch/examples mnist/main.py ``Net``, written out independently of the zoo."""
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

    return sum(p.numel() for p in Net().parameters())


@pytest.mark.torch
@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("dataset", ["imagenet", "cifar10"])
def test_param_counts_equal_torchvision(model, dataset):
    table = WorkloadTable.load(shipped_path(model, dataset))
    ds = DATASETS[dataset]
    if model == "mnist_cnn":
        if dataset != "imagenet":
            pytest.skip("mnist_cnn's fc size depends on the input; checked on mnist")
        table = WorkloadTable.load(shipped_path(model, "mnist"))
        expected = _examples_mnist_net_count()
    elif model == "wide_mlp":  # simdl's own: C*H*W -> 32768 -> classes, with biases
        c, h, w = ds.input_shape
        expected = (c * h * w + 1) * 32768 + (32768 + 1) * ds.num_classes
    else:
        expected = _torchvision_count(model, ds.num_classes, ds.input_shape[1])
    assert table.param_count == expected
    # Every parameter appears once in the rows, the module list and the param list.
    assert table.fixed["params"].sum() == expected
    assert sum(m.params for m in table.modules) == expected
    assert sum(p.numel for p in table.params) == expected
    assert table.param_bytes == 4 * expected


@pytest.mark.torch
def test_mnist_adaptation():
    """1-channel input: first conv rebuilt; too small for VGG: padded like Pad(2)."""
    from simdl.workload.zoo import build_adapted

    model, note, shape = build_adapted("vgg16", (1, 28, 28), 10)
    assert shape == (1, 32, 32)
    assert model.features[0].in_channels == 1
    assert "in_channels=1" in note and "Pad(2)" in note
    model, note, shape = build_adapted("vit_b_16", (1, 28, 28), 10)
    assert shape == (1, 32, 32) and model.conv_proj.in_channels == 1 and model.image_size == 32
    model, note, shape = build_adapted("resnet18", (3, 32, 32), 10)
    assert note == "" and shape == (3, 32, 32)


@pytest.mark.torch
def test_wrap_types_exist_in_models():
    """Each default FSDP wrap type names a module class the model really contains."""
    from simdl.workload.zoo import build_model

    for name, types in DEFAULT_WRAP_TYPES.items():
        model, _ = build_model(name, (3, 64, 64), 10)
        present = {type(m).__name__ for m in model.modules()}
        assert set(types) <= present, (name, set(types) - present)


@pytest.mark.torch
def test_builder_reading_tensor_values_builds_on_meta():
    # torchvision's RegNet computes its widths with tensors and reads them back
    # (.tolist()), which meta tensors cannot do: the model is built on the CPU and moved.
    import torchvision

    from simdl.workload.zoo import build_model

    model, _ = build_model("regnet_y_400mf", (3, 32, 32), 10)
    params = list(model.parameters())
    assert params and all(p.is_meta for p in params)
    reference = torchvision.models.regnet_y_400mf(num_classes=10)
    assert sum(p.numel() for p in params) == sum(p.numel() for p in reference.parameters())
