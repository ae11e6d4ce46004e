"""Training data of a validation run: real files when present, else shipped or generated data.

Nothing here downloads. In order:

1. ``torchvision.datasets.CIFAR10`` / ``MNIST`` with ``download=False`` from the data
   directory (``--data-dir``, else ``$SIMDL_DATA_DIR``, else ``./data``) when the files
   are there;
2. for accuracy runs (``data="accuracy"``): scikit-learn's ``load_digits`` (1,797 real
   8x8 handwritten digits shipped inside the package, 10 classes), resized bilinearly to
   the dataset's size and replicated to its channels, split 80/20 with a fixed seed;
3. otherwise (timing runs, or scikit-learn missing): generated data of the right shape
   (standard normal pixels, uniform labels, fixed seed). Accuracy on it is chance.

The name of the data actually used is returned and recorded for every run. Images are
padded symmetrically to the model's input shape when the zoo pads (VGG16 on MNIST).
"""

from __future__ import annotations

import os
from pathlib import Path

SHAPES = {"cifar10": (3, 32, 32), "mnist": (1, 28, 28)}
# torchvision references: per-channel mean/std of each dataset
NORMALISE = {"cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)), "mnist": ((0.1307,), (0.3081,))}


def data_dir(given: str | None = None) -> Path:
    return Path(given or os.environ.get("SIMDL_DATA_DIR") or "data")


def _local(dataset: str, root: Path, train_n: int, test_n: int):
    import torch
    import torchvision

    cls = {"cifar10": torchvision.datasets.CIFAR10, "mnist": torchvision.datasets.MNIST}[dataset]
    try:
        train = cls(str(root), train=True, download=False)
        test = cls(str(root), train=False, download=False)
    except (RuntimeError, OSError):
        return None
    mean, std = NORMALISE[dataset]

    def to_tensor(ds, n):
        x = torch.as_tensor(ds.data[:n])
        x = x.permute(0, 3, 1, 2) if x.ndim == 4 else x.unsqueeze(1)
        x = x.float() / 255.0
        x = (x - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1)
        return x.contiguous(), torch.as_tensor(ds.targets[:n]).long()

    return (
        *to_tensor(train, train_n),
        *to_tensor(test, test_n),
        f"{dataset} from {root} (torchvision, download=False)",
    )


def _digits(dataset: str, train_n: int, test_n: int):
    import torch
    import torch.nn.functional as F

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    d = load_digits()
    x = torch.as_tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.as_tensor(d.target).long()
    c, h, w = SHAPES[dataset]
    x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False).repeat(1, c, 1, 1)
    x = (x - x.mean()) / x.std()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    split = int(0.8 * len(y))
    tr, te = perm[:split], perm[split:]
    note = ""
    if train_n > len(tr) or test_n > len(te):
        note = f" (cycled: {len(tr)} train / {len(te)} test images available)"
    tr = tr.repeat(-(-train_n // len(tr)))[:train_n]
    te = te.repeat(-(-test_n // len(te)))[:test_n]
    return (
        x[tr].contiguous(),
        y[tr],
        x[te].contiguous(),
        y[te],
        f"scikit-learn digits (1,797 real 8x8 digits) resized to {h}x{w}x{c}{note}",
    )


def _generated(dataset: str, train_n: int, test_n: int, classes: int = 10):
    import torch

    g = torch.Generator().manual_seed(0)
    shape = SHAPES[dataset]
    return (
        torch.randn((train_n, *shape), generator=g),
        torch.randint(0, classes, (train_n,), generator=g),
        torch.randn((test_n, *shape), generator=g),
        torch.randint(0, classes, (test_n,), generator=g),
        f"generated {dataset}-shaped data (N(0,1) pixels, uniform labels): accuracy is chance",
    )


def load(dataset: str, kind: str, train_n: int, test_n: int, model_shape: tuple[int, ...], root: str | None = None):
    """(train_x, train_y, test_x, test_y, description), padded to ``model_shape``."""
    import torch.nn.functional as F

    out = _local(dataset, data_dir(root), train_n, test_n)
    if out is None and kind == "accuracy":
        out = _digits(dataset, train_n, test_n)
    if out is None:
        out = _generated(dataset, train_n, test_n)
    trx, tr_y, tex, te_y, desc = out
    _, h, w = SHAPES[dataset]
    ph, pw = model_shape[1] - h, model_shape[2] - w
    if ph > 0 or pw > 0:
        pad = (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2)
        trx, tex = F.pad(trx, pad), F.pad(tex, pad)
        desc += f", zero-padded to {model_shape[1]}x{model_shape[2]} as the model requires"
    return trx, tr_y, tex, te_y, desc
