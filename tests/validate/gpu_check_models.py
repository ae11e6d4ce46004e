"""Models for the gpu_check budget tests: a step that takes long, and one that never returns.

Each sleeps in its forward only on a real device, so that simdl can trace it on meta."""

from __future__ import annotations

import time

from torch import nn


class _Sleepy(nn.Module):
    def __init__(self, delay_s: float, num_classes: int = 10):
        super().__init__()
        self.delay_s = delay_s
        self.body = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes)
        )

    def forward(self, x):
        if x.device.type != "meta":
            time.sleep(self.delay_s)
        return self.body(x)


def slow(num_classes: int = 10):
    """3 s per step: a configuration capped at 5 s stops between its steps."""
    return _Sleepy(3.0, num_classes)


def hung(num_classes: int = 10):
    """A step that does not return within any test's patience: its worker must be killed."""
    return _Sleepy(600.0, num_classes)
