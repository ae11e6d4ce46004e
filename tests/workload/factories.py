"""Model factories for the ``package.module:factory`` model specs in the library tests."""

from __future__ import annotations


def tiny_cnn(num_classes: int = 10):
    """A two-layer CNN for 3x16x16 inputs; takes ``num_classes`` like torchvision builders."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


def fixed_mlp():
    """No ``num_classes`` argument: always 3 classes (the library must not pass it)."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 3))


def not_a_model(num_classes: int = 10):
    return "not a module"
