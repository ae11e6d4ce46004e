"""The model zoo: names users can ask for, and how each is built and adapted to an input.

Importing this module does not import torch (``simdl predict`` on a shipped table must
stay torch-free); :func:`build_model` imports torch and torchvision when called.

Adaptation follows what a user would do to train the model on a dataset it was not
designed for, and is described in the returned note (stored in the table):

* 1-channel input: the model's first convolution is replaced by an identical one with
  ``in_channels=1`` (the usual recipe for MNIST on ImageNet architectures).
* Input too small: VGG16, DenseNet, ConvNeXt and EfficientNet shrink 28x28 below one
  pixel. The input is padded symmetrically (like ``torchvision.transforms.Pad(p)``)
  to the smallest size that runs; the padded shape becomes the table's input shape.
* ViT: built with ``image_size=H`` (torchvision's ``VisionTransformer`` accepts any
  size divisible by the patch size); other sizes are padded up to the next multiple.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Mapping

from ..errors import SimdlError, unknown
from .inputs import describe, forward_error, input_hint, is_image

# Zoo name -> torchvision builder name (torchvision.models.get_model), or a
# ``module:factory`` spec for models torchvision does not have.
MODELS: dict[str, str] = {
    "vgg16": "vgg16",
    "resnet18": "resnet18",
    "resnet50": "resnet50",
    "densenet121": "densenet121",
    "efficientnet_v2_s": "efficientnet_v2_s",
    "efficientnet_v2_l": "efficientnet_v2_l",
    "convnext_tiny": "convnext_tiny",
    "convnext_large": "convnext_large",
    "vit_b_16": "vit_b_16",
    "vit_b_32": "vit_b_32",
    "mobilenet_v3_large": "mobilenet_v3_large",
    "wide_resnet101_2": "wide_resnet101_2",
    "mnist_cnn": "simdl.workload.zoo:mnist_cnn",
    "wide_mlp": "simdl.workload.zoo:wide_mlp",
}

# Patch size of the ViT models: input H and W must be multiples of it.
VIT_PATCH = {"vit_b_16": 16, "vit_b_32": 32}

# Module class names FSDP wraps as units by default (an ``auto_wrap_policy`` by type).
DEFAULT_WRAP_TYPES: dict[str, tuple[str, ...]] = {
    # No blocks: every layer with weights is its own unit (conv and fc layers).
    "vgg16": ("Conv2d", "Linear"),
    # A residual block is the repeated unit (torchvision.models.resnet.BasicBlock).
    "resnet18": ("BasicBlock",),
    # Same, with torchvision.models.resnet.Bottleneck blocks.
    "resnet50": ("Bottleneck",),
    # The dense layer (BN-ReLU-conv1x1-BN-ReLU-conv3x3) repeats 58 times in 4 blocks.
    "densenet121": ("_DenseLayer",),
    # Early stages use FusedMBConv, later ones MBConv (torchvision.models.efficientnet).
    "efficientnet_v2_s": ("MBConv", "FusedMBConv"),
    "efficientnet_v2_l": ("MBConv", "FusedMBConv"),
    # The ConvNeXt block (depthwise 7x7 conv, LayerNorm, MLP) is the repeated unit.
    "convnext_tiny": ("CNBlock",),
    "convnext_large": ("CNBlock",),
    # One transformer layer per unit, as torchtitan and the FSDP tutorials wrap.
    "vit_b_16": ("EncoderBlock",),
    "vit_b_32": ("EncoderBlock",),
    # The inverted-residual bottleneck (torchvision.models.mobilenetv3.InvertedResidual).
    "mobilenet_v3_large": ("InvertedResidual",),
    # ResNet-101 with bottlenecks twice as wide (torchvision Bottleneck, width_per_group 128):
    # 127 M parameters, the calibration's large-message model (not in any validation run).
    "wide_resnet101_2": ("Bottleneck",),
    # The residual blocks of torchvision.models.resnet (ResNeXt uses Bottleneck with groups).
    "resnet34": ("BasicBlock",),
    "resnext50_32x4d": ("Bottleneck",),
    # The inverted residual of torchvision.models.mobilenetv2 / shufflenetv2 (same class name).
    "mobilenet_v2": ("InvertedResidual",),
    "shufflenet_v2_x1_0": ("InvertedResidual",),
    # MBConv of torchvision.models.efficientnet; ResBottleneckBlock of torchvision.models.regnet.
    "efficientnet_b0": ("MBConv",),
    "regnet_y_400mf": ("ResBottleneckBlock",),
    # The Fire module (squeeze 1x1, expand 1x1 and 3x3) of torchvision.models.squeezenet.
    "squeezenet1_1": ("Fire",),
    # Two convs and two fc layers: no blocks, so each weighted layer is a unit.
    "mnist_cnn": ("Conv2d", "Linear"),
    # Two fc layers, each a unit: the first one is one 403 MB message on CIFAR-10.
    "wide_mlp": ("Linear",),
}

_MAX_PAD = 64  # give up padding beyond this many pixels per side


def mnist_cnn(num_classes: int = 10, input_shape: tuple[int, ...] = (1, 28, 28)) -> Any:
    """The classic CNN of pytorch/examples mnist/main.py (``Net``), sized for any input.

    conv(C->32, 3) relu conv(32->64, 3) relu maxpool2 dropout(0.25) flatten
    fc(->128) relu dropout(0.5) fc(->classes); the first fc's input size follows from
    the input shape ((H-4)//2 * (W-4)//2 * 64; 9216 for 28x28).
    """
    from torch import nn

    c, h, w = input_shape
    if h < 6 or w < 6:
        raise SimdlError(f"mnist_cnn needs inputs of at least 6x6, got {h}x{w}")
    flat = 64 * ((h - 4) // 2) * ((w - 4) // 2)
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, 1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(1),
        nn.Linear(flat, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )


def wide_mlp(num_classes: int = 10, input_shape: tuple[int, ...] = (3, 32, 32), hidden: int = 32768) -> Any:
    """flatten fc(C*H*W -> 32768) relu fc(-> classes): the calibration's single-large-message
    model. On 3x32x32 inputs its first weight is 100.7 M parameters, one 403 MB gradient:
    the size of VGG-style classifiers (VGG16's first fc layer is 411 MB), for which the
    strategy stage otherwise has no message larger than wide_resnet101_2's 67 MB units.
    Little compute per byte, so communication dominates its steps."""
    from torch import nn

    c, h, w = input_shape
    return nn.Sequential(nn.Flatten(1), nn.Linear(c * h * w, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def check_model_name(name: str) -> None:
    """Raise the unknown-model error unless ``name`` is a zoo name, a factory spec or a
    torchvision classification model name (that check imports torchvision: one-line error
    naming the install command when it is missing)."""
    if name in MODELS or ":" in name:
        return
    from .torchvision_names import INSTALL, is_torchvision_model

    try:
        if is_torchvision_model(name):
            return
    except SimdlError:
        raise SimdlError(
            f"model {name!r} is not a built-in model ({', '.join(sorted(MODELS))}); a torchvision "
            f"model name is traced on demand, which needs torch: {INSTALL}"
        ) from None
    raise SimdlError(f"{unknown('model', name, MODELS)}; or any name torchvision.models.list_models() lists")


def _vit_patch(name: str) -> int | None:
    if name in VIT_PATCH:
        return VIT_PATCH[name]
    if name in MODELS or ":" in name:
        return None
    from .torchvision_names import vit_patch

    return vit_patch(name)


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``package.module:factory`` or ``file.py:factory`` (simdl.workload.factory)."""
    from .factory import load_factory as load

    return load(spec)


def _call_factory(spec: str, input_shape: tuple[int, ...], num_classes: int, vocab: int | None = None) -> Any:
    from torch import nn

    factory = load_factory(spec)
    accepted: Mapping[str, inspect.Parameter]
    try:
        accepted = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature
        accepted = {}
    kwargs: dict[str, Any] = {}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    if "num_classes" in accepted or var_kw:
        kwargs["num_classes"] = num_classes
    if "input_shape" in accepted:
        kwargs["input_shape"] = tuple(input_shape)
    if vocab is not None and "vocab_size" in accepted:
        kwargs["vocab_size"] = vocab
    from .factory import call_factory

    model = None
    if var_kw and "input_shape" not in accepted and len(input_shape) == 3:
        # A **kwargs factory may pass the input size on (torchvision's VisionTransformer
        # builders take image_size); the model it builds says whether it accepts it.
        try:
            model = factory(**kwargs, image_size=int(input_shape[1]))
        except TypeError:
            model = None
    if model is None:
        model = call_factory(spec, factory, kwargs)  # its exceptions: one line naming it
    if not isinstance(model, nn.Module):
        raise SimdlError(f"model factory {spec!r} returned {type(model).__name__}, expected a torch.nn.Module")
    return model


def _first_conv(model: Any) -> tuple[str, Any] | tuple[None, None]:
    from torch import nn

    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d):
            return name, m
    return None, None


def _set_in_channels(model: Any, channels: int) -> str:
    """Replace the first Conv2d by an identical one reading ``channels`` channels."""
    from torch import nn

    name, conv = _first_conv(model)
    if name is None or conv is None or conv.in_channels == channels:
        return ""
    if conv.groups != 1:
        raise SimdlError(f"cannot adapt first conv {name} (groups={conv.groups}) to {channels} channels")
    new = nn.Conv2d(
        channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        conv.padding,
        conv.dilation,
        conv.groups,
        conv.bias is not None,
        conv.padding_mode,
        device=conv.weight.device,
        dtype=conv.weight.dtype,
    )
    parent_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent_name), attr, new)
    return f"first conv {name} rebuilt with in_channels={channels} (was {conv.in_channels})"


def _runs(model: Any, shape: tuple[int, ...]) -> bool:
    """Does a batch of 2 at ``shape`` go through the model? (meta tensors: no compute)."""
    return forward_error(model, shape, None) is None


def _construct(name_or_spec: str, shape: tuple[int, ...], num_classes: int) -> Any:
    builder = MODELS.get(name_or_spec, name_or_spec)
    if ":" not in builder:  # a zoo name or a torchvision model name
        import torchvision

        extra: dict[str, Any] = {}
        if _vit_patch(name_or_spec):
            extra["image_size"] = shape[1]
        with warnings.catch_warnings():
            # inception_v3 and googlenet warn that their default initialisation will change
            # (torchvision/models/inception.py, googlenet.py); the trace reads shapes, not values.
            warnings.filterwarnings("ignore", message="The default weight initialization", category=FutureWarning)
            return torchvision.models.get_model(builder, weights=None, num_classes=num_classes, **extra)
    spec = MODELS.get(name_or_spec, name_or_spec)
    return _call_factory(spec, shape, num_classes)


def _construct_on(device: str, name_or_spec: str, shape: tuple[int, ...], num_classes: int) -> Any:
    """Construct on ``device``; on meta, builders that read tensor values are built on the CPU.

    A builder that computes its layout with tensors and reads the values back (torchvision
    0.29's ``regnet.BlockParams.from_init_params`` calls ``.tolist()`` on its widths) raises
    ``NotImplementedError`` under ``torch.device("meta")``, where tensors hold no data. Such a
    model is built on the CPU, with real memory and initialisation, and moved to meta.
    """
    import torch

    try:
        with torch.device(device):
            return _construct(name_or_spec, shape, num_classes)
    except NotImplementedError as exc:
        if device != "meta" or "meta" not in str(exc):
            raise
    return _construct(name_or_spec, shape, num_classes).to("meta")


def build_model(
    name_or_spec: str, input_shape: tuple[int, ...], num_classes: int, device: str = "meta"
) -> tuple[Any, str]:
    """Build a zoo model or a ``module:factory`` model for ``input_shape`` and classes.

    Returns ``(model, adaptation_note)``; see :func:`build_adapted` for the input shape
    the model actually takes after padding.
    """
    model, note, _ = build_adapted(name_or_spec, input_shape, num_classes, device)
    return model, note


def build_adapted(
    name_or_spec: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    device: str = "meta",
    vocab: int | None = None,
) -> tuple[Any, str, tuple[int, ...]]:
    """Like :func:`build_model`, also returning the (possibly padded) input shape used.

    Built on the meta device by default: no memory, no initialisation cost. Inputs that are
    not images (any other shape, or token ids with ``vocab``) go to the factory as given
    (:mod:`simdl.workload.inputs`); only images are adapted.
    """
    import torch

    check_model_name(name_or_spec)
    shape = tuple(int(s) for s in input_shape)
    if not is_image(shape, vocab):
        return _build_unadapted(name_or_spec, shape, num_classes, device, vocab)
    c, h, w = shape
    notes = []
    p = _vit_patch(name_or_spec)
    if p:
        # torchvision's VisionTransformer takes one square image_size.
        size = -(-max(h, w) // p) * p
        if (h, w) != (size, size):
            shape = (c, size, size)
            notes.append(f"input padded to {size}x{size} (multiple of the {p}-pixel patch)")
    model = _construct_on(device, name_or_spec, shape, num_classes)
    with torch.device(device):
        note = _set_in_channels(model, c)
    if note:
        notes.insert(0, note)
    if p and shape[1] != 224:
        notes.append(f"built with image_size={shape[1]}")
    model.train()
    # Pad symmetrically (transforms.Pad(p) adds p on every side) to the smallest size
    # that runs; only tried on meta, where a failed try costs nothing.
    if device == "meta" and not _runs(model, shape):
        for pad in range(1, _MAX_PAD + 1):
            padded = (c, h + 2 * pad, w + 2 * pad)
            if _runs(model, padded):
                notes.append(
                    f"input padded by {pad} px per side to {padded[1]}x{padded[2]} "
                    f"(transforms.Pad({pad})): {h}x{w} shrinks below 1 pixel"
                )
                shape = padded
                break
        else:
            error = forward_error(model, tuple(int(s) for s in input_shape), None)
            raise SimdlError(
                f"model {name_or_spec!r} does not run on input {'x'.join(map(str, input_shape))}"
                f" even padded by {_MAX_PAD} px ({error}); {input_hint()}"
            )
    return model, "; ".join(notes), shape


def _build_unadapted(
    name_or_spec: str, shape: tuple[int, ...], num_classes: int, device: str, vocab: int | None
) -> tuple[Any, str, tuple[int, ...]]:
    """A factory model on a non-image input, checked by one forward on meta."""
    import torch

    if name_or_spec in MODELS:
        raise SimdlError(
            f"model {name_or_spec!r} takes images (--input CxHxW, no --vocab); "
            f"{describe(shape, vocab)} inputs need a package.module:factory model"
        )
    with torch.device(device):
        model = _call_factory(name_or_spec, shape, num_classes, vocab)
    model.train()
    if device == "meta":
        error = forward_error(model, shape, vocab)
        if error is not None:
            raise SimdlError(
                f"model {name_or_spec!r} does not run on {describe(shape, vocab)} inputs ({error}); {input_hint()}"
            )
    return model, "", shape
