"""A training job to predict, as one object: ``simdl.predict(Job(...))``.

A :class:`Job` is workload x cluster x strategy plus the engine. The strategy's own knobs
(``sharding``, ``bucket_cap_mb``, ...) go in ``options``, checked against the strategy's
registry entry (simdl.strategies.registry); simulator options in ``engine_options``. Fields
left at None take simdl's defaults, and the result lists them under ``config["assumed"]``.
``simdl.predict``'s keywords are conveniences for the same fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import SimdlError


@dataclass(frozen=True)
class Job:
    model: str = "vgg16"
    """A zoo model name or ``package.module:factory``."""
    strategy: str = "fsdp"
    """A registered strategy name (``simdl.strategies.registry.names()``)."""
    gpus: int = 4
    """Ranks: GPUs, or parameter-server workers."""
    nodes: int | None = None
    """Nodes to spread the GPUs over (None: fill nodes)."""
    cluster: Any = None
    """A preset name, a cluster YAML path or a ClusterSpec (None: a100-80gb-nvlink)."""
    dataset: str | None = None
    """cifar10 | mnist | imagenet (None: cifar10)."""
    input_shape: str | tuple[int, ...] | None = None
    """Input shape CxHxW, overriding the dataset's."""
    num_classes: int | None = None
    """Classes, overriding the dataset's."""
    vocab: int | None = None
    """Token-id inputs below this vocabulary size (factory models; simdl.workload.inputs)."""
    train_samples: int | None = None
    """Training samples per epoch (None: the dataset's)."""
    batch_size: int | None = None
    """Per-GPU batch (None: 32)."""
    epochs: float | None = None
    """Epochs (None: 10)."""
    optimizer: str | None = None
    """Optimizer (None: momentum SGD)."""
    precision: str | None = None
    """Precision (None: fp32)."""
    memory_format: str | None = None
    """contiguous (NCHW) | channels_last (NHWC) (None: contiguous, PyTorch's default; GPU kernel model only)."""
    algorithm: str | None = None
    """Collective algorithm: ring | tree | auto (None: auto)."""
    loader_workers: int | None = None
    """DataLoader workers per rank (None: 4)."""
    grad_accumulation: int = 1
    """Micro-steps per optimizer step."""
    activation_checkpointing: bool = False
    """Checkpoint every block (torch.utils.checkpoint)."""
    deepspeed_config: str | None = None
    """A DeepSpeed ds_config.json: its ZeRO stage, options, batch, precision (simdl.strategies.zero_config)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The strategy's own keywords, as its registry entry declares them (e.g. ``{"sharding": "grad_op"}``)."""
    cuda_alloc_conf: str | None = None
    """Caching allocator options, PYTORCH_CUDA_ALLOC_CONF syntax (None: the environment variable, else defaults)."""
    cuda: str | int | float | None = None
    """CUDA version of the ranks' PyTorch build, torch.version.cuda (None: the cluster's, else the GPU file's default)."""
    engine: str = "analytic"
    """analytic | sim."""
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    """Simulator options (iterations, warmup, straggler, jitter, seed, ...)."""

    def kwargs(self) -> dict[str, Any]:
        """The job as :func:`simdl.predict` keywords."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("options", "engine_options")
        }
        clash = sorted(set(self.options) & set(out) | set(self.engine_options) & (set(out) | set(self.options)))
        if clash:
            raise SimdlError(f"Job: {clash[0]!r} is given twice; accepted: each keyword in one place")
        return {**out, **self.options, **self.engine_options}

    def replace(self, **changes: Any) -> Job:
        """A copy with fields, strategy options or engine options changed (each keyword goes
        where it belongs: a field of its own, else ``engine_options`` for simulator keys,
        else ``options``)."""
        sim = engine_option_names()
        own = {f.name for f in dataclasses.fields(self)}
        fields = {k: v for k, v in changes.items() if k in own}
        engine = {k: v for k, v in changes.items() if k not in own and k in sim}
        options = {k: v for k, v in changes.items() if k not in own and k not in sim}
        return dataclasses.replace(
            self, **fields, options={**self.options, **options}, engine_options={**self.engine_options, **engine}
        )


def engine_option_names() -> frozenset[str]:
    """The simulator's options: the keyword-only parameters of simdl.sim.engine.simulate
    beyond those predict itself passes."""
    import inspect

    from .sim.engine import simulate

    params = inspect.signature(simulate).parameters.values()
    return frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY) - {
        "algorithm",
        "loader_workers",
        "config",
        "notes",
        "allocator",
    }
