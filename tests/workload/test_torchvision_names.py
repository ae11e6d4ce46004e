"""torchvision model names as --model NAME, and **kwargs factories given num_classes."""

from __future__ import annotations

import pytest

from simdl.errors import SimdlError
from simdl.workload import torchvision_names, zoo


def test_missing_torch_is_a_one_line_error_naming_the_install(monkeypatch):
    def missing():
        raise SimdlError("no torchvision")

    monkeypatch.setattr(torchvision_names, "torchvision_model_names", missing)
    with pytest.raises(SimdlError) as e:
        zoo.check_model_name("regnet_y_400mf")
    assert "pip install 'simdl[torch]'" in str(e.value) and "\n" not in str(e.value)


def test_unknown_name_still_lists_the_zoo(monkeypatch):
    monkeypatch.setattr(torchvision_names, "torchvision_model_names", lambda: ("alexnet",))
    zoo.check_model_name("alexnet")
    with pytest.raises(SimdlError, match="accepted: .*vgg16.*list_models"):
        zoo.check_model_name("alexnet_xl")


def test_vit_patch_from_torchvision_names():
    assert torchvision_names.vit_patch("vit_h_14") == 14 and torchvision_names.vit_patch("swin_t") is None


@pytest.mark.torch
def test_every_listed_torchvision_name_is_accepted():
    import torchvision

    names = torchvision.models.list_models(module=torchvision.models)
    assert len(names) > 50
    for n in names:
        zoo.check_model_name(n)


@pytest.mark.torch
def test_kwargs_factory_gets_num_classes_and_image_size():
    from simdl.workload.zoo import _call_factory

    m = _call_factory("torchvision.models:resnet18", (3, 32, 32), 10)
    assert m.fc.out_features == 10
    v = _call_factory("torchvision.models:vit_b_32", (3, 64, 64), 10)
    assert v.image_size == 64 and v.heads.head.out_features == 10


@pytest.mark.torch
def test_the_torch_free_filter_lets_every_listed_name_through():
    for name in torchvision_names.torchvision_model_names():
        assert torchvision_names._may_be_listed(name), name


def test_a_name_no_torchvision_file_mentions_is_rejected_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys\nfrom simdl.errors import SimdlError\nfrom simdl.workload import zoo\n"
        "try:\n    zoo.check_model_name('resnet_does_not_exist')\nexcept SimdlError as e:\n    print(e)\n"
        "print('torch' in sys.modules, 'torchvision' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "unknown model 'resnet_does_not_exist'" in lines[0] and lines[1] == "False False"
    assert not torchvision_names._may_be_listed("not a name")


@pytest.mark.torch
def test_building_inception_for_a_trace_prints_no_initialisation_warning():
    import warnings

    from simdl.workload.zoo import _construct

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = _construct("inception_v3", (3, 299, 299), 10)
    assert m.fc.out_features == 10
