"""Datasets the shipped workload tables are extracted for: input shape, classes, sizes.

Only what a cost model needs (no data loading, no torch): the per-sample input shape
and class count fix the workload table; the sample counts turn a step time into an
epoch time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import unknown
from .inputs import parse_input_shape  # noqa: F401 -- imported from here by callers


@dataclass(frozen=True)
class Dataset:
    name: str
    input_shape: tuple[int, int, int]  # (channels, height, width) of one sample
    num_classes: int
    train_samples: int
    test_samples: int  # the held-out split (ImageNet: the validation set)


DATASETS: dict[str, Dataset] = {
    # Krizhevsky, "Learning Multiple Layers of Features from Tiny Images" (2009), and
    # torchvision.datasets.CIFAR10: 50,000 train + 10,000 test 32x32 RGB images.
    "cifar10": Dataset("cifar10", (3, 32, 32), 10, 50_000, 10_000),
    # LeCun et al., http://yann.lecun.com/exdb/mnist/ and torchvision.datasets.MNIST:
    # 60,000 train + 10,000 test 28x28 grey images.
    "mnist": Dataset("mnist", (1, 28, 28), 10, 60_000, 10_000),
    # ILSVRC-2012 (Russakovsky et al. 2015, Table 2): 1,281,167 train and 50,000 val
    # images, 1000 classes; 3x224x224 is the standard training crop (torchvision
    # references/classification, RandomResizedCrop(224)).
    "imagenet": Dataset("imagenet", (3, 224, 224), 1000, 1_281_167, 50_000),
}


def get_dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise unknown("dataset", name, DATASETS) from None
