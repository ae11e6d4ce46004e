"""The experiment matrix of each scale profile, as data.

Three experiments, from /work/shared/docs/origins.md:

* ``exp1`` -- study 1, experiment 1: DDP and FSDP (full, grad_op, none; hybrid where
  there are several nodes) training VGG16, EfficientNet_v2 (``efficientnet_v2_l``) and
  ConvNeXt_Large on CIFAR-10 at 2 and 4 ranks.
* ``exp2`` -- study 1, experiment 2: synchronous, asynchronous and stale-synchronous
  parameter server training ResNet50, DenseNet121 and VGG16 on MNIST, one server and
  4 workers; final accuracy and staleness recorded.
* ``vit`` -- study 2: ViT-B/32 and ViT-B/16 under FSDP full / hybrid / none at several
  per-rank batch sizes.

Profiles:

* ``smoke``: CI, under 10 minutes on 2 cores: reduced-width VGG16 and ViT-B/32 at 2
  ranks, a few steps; the MNIST CNN under sync and async PS with 2 workers.
* ``local``: the full matrix on this 2-core machine: full-size models at the datasets'
  input sizes, reduced image counts and epochs. 4-rank runs (and every PS run: 4
  workers + 1 server) are oversubscribed -- more processes than cores -- and are
  labelled so in the results and the report. Hybrid sharding is left out: one node.
* ``unprofiled``: nine torchvision models that no quick calibration profiles, DDP and
  FSDP2 (full) at 2 ranks, batch 16 on CIFAR-10: after ``simdl calibrate --quick`` they
  check the op-class compute rates on models the calibration never saw.
* ``paper``: the studies' exact sizes, for a real GPU cluster (full datasets, 10 and
  100 epochs, 2 x 4 GPUs for the ViT grid).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace

PROFILES = ("smoke", "local", "paper", "unprofiled")
CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class RunSpec:
    experiment: str  # exp1 | exp2 | vit
    model: str  # zoo name of the model the study used
    dataset: str  # cifar10 | mnist
    strategy: str  # ddp | fsdp | ps-sync | ps-async | ps-ssp
    ranks: int  # training ranks (PS: workers; the server is one more process)
    batch_size: int  # per rank
    epochs: int
    train_images: int  # per epoch, all ranks together
    test_images: int
    sharding: str = ""  # FSDP: full | grad_op | hybrid | none
    width: int = 1  # channel/width divisor (1 = the model as published)
    nodes: int = 1
    staleness_bound: int = 0  # ps-ssp
    data: str = "timing"  # timing: local files else generated; accuracy: local files else digits
    max_steps_per_epoch: int = 0  # 0 = the whole epoch
    warmup_steps: int = 2
    lr: float = 0.01
    optimizer: str = "momentum"  # SGD(momentum=0.9), torchvision's reference recipe
    tags: tuple[str, ...] = field(default_factory=tuple)
    # FSDP hybrid: ranks per shard group (FSDP2's 2-D mesh, (ranks // shard_group) x
    # shard_group); 0 = the ranks of one node. Left out of to_dict at 0, so the run_id of
    # every configuration from before the field stays what its results were filed under.
    shard_group: int = 0

    @property
    def is_ps(self) -> bool:
        return self.strategy.startswith("ps-")

    @property
    def processes(self) -> int:
        return self.ranks + (1 if self.is_ps else 0)

    @property
    def oversubscribed(self) -> bool:
        """More processes than this machine's cores (allowed only where the report says so)."""
        return self.processes > CORES

    @property
    def label(self) -> str:
        if self.strategy == "fsdp":
            return f"fsdp-{self.sharding}"
        if self.strategy == "ps-ssp":
            return f"ps-ssp(s={self.staleness_bound})"
        return self.strategy

    @property
    def model_name(self) -> str:
        """What simdl and the trainer build: the zoo name, or a reduced-width factory."""
        from .models import spec_for

        return spec_for(self.model, self.width)

    @property
    def run_id(self) -> str:
        """Stable across runs of the same configuration: what resume keys on."""
        w = f"-w{self.width}" if self.width != 1 else ""
        base = f"{self.experiment}-{self.model}{w}-{self.label}-r{self.ranks}-b{self.batch_size}"
        digest = hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
        return f"{base}-{digest}".replace("(", "").replace(")", "").replace("=", "")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tags"] = list(self.tags)
        if not d["shard_group"]:
            del d["shard_group"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        d = dict(d)
        d["tags"] = tuple(d.get("tags", ()))
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


EXP1_MODELS = ("vgg16", "efficientnet_v2_l", "convnext_large")
EXP2_MODELS = ("resnet50", "densenet121", "vgg16")
FSDP_SHARDINGS = ("full", "grad_op", "none")
UNPROFILED_MODELS = (
    "resnet34",
    "resnet50",
    "resnext50_32x4d",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
    "squeezenet1_1",
)


def _exp1(models, ranks_list, batch, epochs, train, test, width=None, max_steps=0, nodes_for=None):
    runs = []
    for model in models:
        w = (width or {}).get(model, 1)
        for ranks in ranks_list:
            nodes = (nodes_for or {}).get(ranks, 1)
            shardings = FSDP_SHARDINGS + (("hybrid",) if nodes > 1 else ())
            runs.append(
                RunSpec(
                    "exp1",
                    model,
                    "cifar10",
                    "ddp",
                    ranks,
                    batch,
                    epochs,
                    train,
                    test,
                    width=w,
                    nodes=nodes,
                    max_steps_per_epoch=max_steps,
                )
            )
            for s in shardings:
                runs.append(
                    RunSpec(
                        "exp1",
                        model,
                        "cifar10",
                        "fsdp",
                        ranks,
                        batch,
                        epochs,
                        train,
                        test,
                        sharding=s,
                        width=w,
                        nodes=nodes,
                        max_steps_per_epoch=max_steps,
                    )
                )
    return runs


def _exp2(models, workers, batch, epochs, train, test, modes, width=None, epochs_for=None):
    runs = []
    for model in models:
        w = (width or {}).get(model, 1)
        for mode in modes:
            strategy, bound = (mode, 0) if not mode.startswith("ps-ssp") else ("ps-ssp", int(mode.split("=")[1]))
            runs.append(
                RunSpec(
                    "exp2",
                    model,
                    "mnist",
                    strategy,
                    workers,
                    batch,
                    (epochs_for or {}).get(model, epochs),
                    train,
                    test,
                    staleness_bound=bound,
                    width=w,
                    data="accuracy",
                )
            )
    return runs


def _vit(models, ranks, batches, shardings, epochs, train, test, nodes=1, width=1, max_steps=0):
    return [
        RunSpec(
            "vit",
            m,
            "cifar10",
            "fsdp",
            ranks,
            b,
            epochs,
            train,
            test,
            sharding=s,
            nodes=nodes,
            width=width,
            max_steps_per_epoch=max_steps,
        )
        for m in models
        for s in shardings
        for b in batches
    ]


def _hybrid_one_host(models, ranks, batch, epochs, train, test):
    """Experiment 1's hybrid sharding where there is one host: FSDP2's 2-D mesh of
    (ranks / 2) replicas x 2 shards on one node, the mesh the study's HYBRID_SHARD makes
    across nodes, with the replicas' all-reduce over the host's own transport."""
    return [
        RunSpec("exp1", m, "cifar10", "fsdp", ranks, batch, epochs, train, test, sharding="hybrid", shard_group=2)
        for m in models
    ]


def experiments(profile: str) -> list[RunSpec]:
    """The run matrix of a profile, in the order it runs (cheap runs first)."""
    if profile == "smoke":
        runs = _exp1(("vgg16",), (2,), 16, 1, 256, 64, width={"vgg16": 16})
        # batch 48: calibration's strategy stage times mnist_cnn at 16 and 32
        runs += _exp2(("mnist_cnn",), 2, 48, 1, 576, 144, ("ps-sync", "ps-async"))
        runs += _vit(("vit_b_32",), 2, (16,), ("full",), 1, 256, 64, width=8)
        return runs
    if profile == "local":
        # Sized for about 2 hours on 2 cores (estimate in lab/CAMPAIGN.md). One epoch of
        # 1,536 images: 24 steps at 2 ranks, 12 at 4 (the same data over more ranks, as in
        # the study), so every run has warm-up, three profiled steps (one timed,
        # two for the memory peak only) and >= 7 timed steps.
        runs = _vit(("vit_b_32", "vit_b_16"), 2, (16, 32, 64), ("full", "none"), 1, 1536, 256)
        runs += _exp1(EXP1_MODELS, (2, 4), 32, 1, 1536, 256)
        # Hybrid sharding on one host (added 2026-11-27): 2 replicas x 2 shards at 4 ranks,
        # for the Experiment 1 models whose 4 ranks fit in this machine's memory (ConvNeXt-L
        # does not, nor ViT: 7-9 GiB resident per rank at 2 ranks with the profiler;
        # lab/CAMPAIGN.md, "What does not fit this machine").
        runs += _hybrid_one_host(("vgg16", "efficientnet_v2_l"), 4, 32, 1, 1536, 256)
        # PS: 1,024 digits per epoch over 4 workers at 32 = 8 iterations per worker per epoch.
        # SSP twice: the bound of 2 never held a pull of four like workers (0 of 96 per run,
        # 2026-11-27 event logs), so it runs as async; a bound of 0 holds most pulls, and
        # checks the simulated waits where they cost time.
        runs += _exp2(
            EXP2_MODELS, 4, 32, 3, 1024, 256, ("ps-sync", "ps-async", "ps-ssp=2", "ps-ssp=0"), epochs_for={"vgg16": 1}
        )
        return runs
    if profile == "paper":
        runs = _exp1(EXP1_MODELS, (2, 4), 32, 10, 50_000, 10_000)
        runs += _exp2(EXP2_MODELS, 4, 32, 100, 60_000, 10_000, ("ps-sync", "ps-async", "ps-ssp=3"))
        runs += _vit(
            ("vit_b_32", "vit_b_16"), 8, (32, 64, 128), ("full", "hybrid", "none"), 10, 50_000, 10_000, nodes=2
        )
        return runs
    if profile == "unprofiled":
        # Models no quick calibration profiles (simdl.calibrate.run_settings: its compute
        # stage runs mnist_cnn, resnet18, vgg16, densenet121; its strategy stage resnet18,
        # convnext_tiny): the op-class rates priced on models they never saw.
        return [
            RunSpec("unprofiled", m, "cifar10", s, 2, 16, 1, 512, 64, sharding=sh)
            for m in UNPROFILED_MODELS
            for s, sh in (("ddp", ""), ("fsdp", "full"))
        ]
    raise ValueError(f"unknown profile {profile!r}; accepted: {', '.join(PROFILES)}")


def with_overrides(run: RunSpec, **kw) -> RunSpec:
    return replace(run, **kw)
