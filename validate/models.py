"""Reduced-width variants of the studies' models, for runs that must fit a 2-core CPU.

A reduced model is a real torch model with its own workload table: simdl traces it on
demand from its ``module:factory`` spec (``validate.models:vgg16_w8``), never reusing
the full model's table. Names are parsed by the module ``__getattr__``:

* ``vgg16_w<K>``: torchvision VGG16 (config "D") with every conv and fc width divided
  by K (the 4096-wide fc layers become 4096/K);
* ``convnext_large_w<K>``: torchvision ConvNeXt with the Large block setting
  (dims 192-384-768-1536, depths 3-3-27-3) and every dim divided by K;
* ``vit_b_32_w<K>``: torchvision VisionTransformer ViT-B/32 (12 layers) with hidden
  size 768/K, MLP size 3072/K and 12/K heads (at least 1).

The FSDP units of a reduced model are the block classes of the model it reduces
(``simdl.workload.zoo.DEFAULT_WRAP_TYPES``): :func:`wrap_types_of` gives them to
:mod:`validate.train`, and :func:`registered_wrap_types` lends them to simdl's unit policy
(keyed by model name) for the duration of a prediction, so both shard the same modules
without changing simdl's table for good.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from simdl.workload.zoo import DEFAULT_WRAP_TYPES

_PATTERN = re.compile(r"^(vgg16|convnext_large|vit_b_32)_w(\d+)$")


def base_model(spec: str) -> str:
    """The zoo model a spec is (or reduces): ``validate.models:vgg16_w8`` -> ``vgg16``."""
    name = spec.rpartition(":")[2]
    m = _PATTERN.match(name)
    return m.group(1) if m else name


def width_divisor(spec: str) -> int:
    m = _PATTERN.match(spec.rpartition(":")[2])
    return int(m.group(2)) if m else 1


def spec_for(model: str, width: int) -> str:
    """The model name simdl and the trainer use: the zoo name at full width, else a factory."""
    if width == 1:
        return model
    if not _PATTERN.match(f"{model}_w{width}"):
        raise ValueError(f"no reduced-width variant of {model!r}; accepted: vgg16, convnext_large, vit_b_32")
    return f"validate.models:{model}_w{width}"


def wrap_types_of(spec: str) -> tuple[str, ...]:
    """The FSDP unit classes of a zoo model or of the model a reduced spec reduces."""
    return DEFAULT_WRAP_TYPES.get(spec) or DEFAULT_WRAP_TYPES.get(base_model(spec), ())


@contextmanager
def registered_wrap_types(spec: str) -> Iterator[None]:
    """While predicting, let simdl's block wrap policy see a reduced model's blocks as its
    base model's (simdl looks unit classes up by model name; a factory spec has none)."""
    added = spec not in DEFAULT_WRAP_TYPES and bool(wrap_types_of(spec))
    if added:
        DEFAULT_WRAP_TYPES[spec] = wrap_types_of(spec)
    try:
        yield
    finally:
        if added:
            DEFAULT_WRAP_TYPES.pop(spec, None)


def _vgg16(k: int) -> Callable[..., Any]:
    def build(num_classes: int = 10, input_shape: tuple[int, ...] = (3, 32, 32)) -> Any:
        from torch import nn
        from torchvision.models.vgg import VGG, cfgs, make_layers

        cfg = [c if c == "M" else max(c // k, 1) for c in cfgs["D"]]
        model = VGG(make_layers(cfg), num_classes=num_classes, init_weights=False)
        # rebuild the first conv for the input's channels like the zoo's adaptation
        first = model.features[0]
        if input_shape[0] != first.in_channels:
            model.features[0] = nn.Conv2d(input_shape[0], first.out_channels, 3, padding=1)
        hidden = max(4096 // k, 1)
        last = cfg[-2]
        model.classifier[0] = nn.Linear(last * 7 * 7, hidden)
        model.classifier[3] = nn.Linear(hidden, hidden)
        model.classifier[6] = nn.Linear(hidden, num_classes)
        for m in model.modules():  # torchvision VGG's own initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)
        return model

    return build


def _convnext_large(k: int) -> Callable[..., Any]:
    def build(num_classes: int = 10, input_shape: tuple[int, ...] = (3, 32, 32)) -> Any:
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt

        d = [max(x // k, 1) for x in (192, 384, 768, 1536)]
        setting = [
            CNBlockConfig(d[0], d[1], 3),
            CNBlockConfig(d[1], d[2], 3),
            CNBlockConfig(d[2], d[3], 27),
            CNBlockConfig(d[3], None, 3),
        ]
        # torchvision convnext_large: stochastic_depth_prob=0.5
        return ConvNeXt(setting, stochastic_depth_prob=0.5, num_classes=num_classes)

    return build


def _vit_b_32(k: int) -> Callable[..., Any]:
    def build(num_classes: int = 10, input_shape: tuple[int, ...] = (3, 32, 32)) -> Any:
        from torchvision.models.vision_transformer import VisionTransformer

        heads = max(12 // k, 1)
        hidden = max(768 // k // heads, 1) * heads
        return VisionTransformer(
            image_size=input_shape[1],
            patch_size=32,
            num_layers=12,
            num_heads=heads,
            hidden_dim=hidden,
            mlp_dim=max(3072 // k, 1),
            num_classes=num_classes,
        )

    return build


_BUILDERS = {"vgg16": _vgg16, "convnext_large": _convnext_large, "vit_b_32": _vit_b_32}


def __getattr__(name: str) -> Any:
    m = _PATTERN.match(name)
    if not m:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    factory = _BUILDERS[m.group(1)](int(m.group(2)))
    factory.__name__ = name
    return factory
