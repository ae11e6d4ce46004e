"""One prediction from names and numbers: the path ``simdl predict`` and ``simdl.predict`` share.

workload (model + input + batch) -> strategy plan -> engine -> result.
Every value used is echoed in ``result.config``; values the caller did not give are
listed under ``config["assumed"]`` with where the default comes from.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .band import LEVEL, band, step_spread
from .calibrate.jitter import noise_warning
from .errors import SimdlError, unknown
from .result import Result

if TYPE_CHECKING:
    from .cluster import ClusterSpec

ENGINES = ("analytic", "sim")
DEFAULT_CLUSTER = "a100-80gb-nvlink"  # study 1, experiment 1: 4 x A100 80 GB in one node (NVLink assumed)
DEFAULT_LOADER_WORKERS = 4  # assumed: a common DataLoader(num_workers=4) setting

# Why each default is what it is, echoed in the result when the default is used.
DEFAULT_REASONS = {
    "cluster": "study 1's A100 80 GB node; NVLink assumed (the study does not say)",
    "dataset": "study 1, experiment 1 (CIFAR-10)",
    "batch_size": "torchvision references/classification: 32 images per GPU",
    "epochs": "study 1, experiment 1: 10 epochs",
    "optimizer": "torchvision references/classification: SGD with momentum 0.9",
    "precision": "torchvision references/classification: AMP off by default",
    "sharding": "FSDP's default ShardingStrategy.FULL_SHARD",
    "wrap": "the model's block classes as FSDP units",
    "loader_workers": "assumed DataLoader(num_workers=4)",
    "algorithm": "the cheaper of ring and tree per collective, as NCCL's tuner picks",
    "staleness_bound": "assumed SSP bound of 3 iterations",
    "ps_servers": "one server, as study 1 ran it",
}


def predict(
    model: str = "vgg16",
    strategy: str = "fsdp",
    gpus: int = 4,
    *,
    nodes: int | None = None,
    cluster: str | ClusterSpec | None = None,
    dataset: str | None = None,
    input_shape: str | tuple[int, ...] | None = None,
    num_classes: int | None = None,
    train_samples: int | None = None,
    batch_size: int | None = None,
    epochs: float | None = None,
    optimizer: str | None = None,
    precision: str | None = None,
    sharding: str | None = None,
    wrap: str | None = None,
    staleness_bound: int | None = None,
    ps_servers: int | None = None,
    bucket_cap_mb: float | None = None,
    algorithm: str | None = None,
    loader_workers: int | None = None,
    grad_accumulation: int = 1,
    activation_checkpointing: bool = False,
    cpu_offload: bool = False,
    reshard_root: bool = False,
    shard_group: int | None = None,
    engine: str = "analytic",
    **engine_options: Any,
) -> Result:
    """Predict one training configuration. Raises :class:`SimdlError` on bad input."""
    from .cluster import ClusterSpec, allocate, load_cluster
    from .strategies import StrategyConfig, build_plan
    from .strategies.config import DDP_BUCKET_CAP_BYTES
    from .units import MiB
    from .workload import workload as wl
    from .workload.datasets import get_dataset, parse_input_shape
    from .workload.library import load_workload

    if engine not in ENGINES:
        raise unknown("engine", engine, ENGINES)
    given = {k for k, v in dict(
        cluster=cluster, dataset=dataset, batch_size=batch_size, epochs=epochs, optimizer=optimizer,
        precision=precision, sharding=sharding, wrap=wrap, loader_workers=loader_workers,
        algorithm=algorithm, staleness_bound=staleness_bound, ps_servers=ps_servers).items() if v is not None}
    cluster = cluster or DEFAULT_CLUSTER
    dataset = dataset or "cifar10"
    batch_size = wl.DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    epochs = wl.DEFAULT_EPOCHS if epochs is None else epochs
    optimizer = optimizer or wl.DEFAULT_OPTIMIZER
    precision = precision or wl.DEFAULT_PRECISION
    sharding = sharding or "full"
    wrap = wrap or "block"
    loader_workers = DEFAULT_LOADER_WORKERS if loader_workers is None else loader_workers
    algorithm = algorithm or "auto"
    staleness_bound = 3 if staleness_bound is None else staleness_bound
    ps_servers = 1 if ps_servers is None else ps_servers
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise SimdlError(f"--gpus {gpus!r} must be an integer >= 1")

    ds = get_dataset(dataset)
    shape = parse_input_shape(input_shape) if isinstance(input_shape, str) else (tuple(input_shape) if input_shape else None)
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1):
        raise SimdlError(f"--classes {num_classes!r} must be an integer >= 1")
    table = load_workload(model, dataset=None if (shape or num_classes) else dataset,
                          input_shape=shape or ds.input_shape, num_classes=num_classes or ds.num_classes)
    workload = wl.Workload(
        table=table,
        batch_size=batch_size,
        train_samples=train_samples if train_samples is not None else ds.train_samples,
        epochs=epochs,
        optimizer=optimizer,
        precision=precision,
        grad_accumulation=grad_accumulation,
        activation_checkpointing=activation_checkpointing,
    )
    # A ClusterSpec object is taken as is: what-if variants (simdl.explore.derive_cluster) need no file.
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    alloc = allocate(spec, gpus, nodes)
    if not isinstance(loader_workers, int) or loader_workers < 0:
        raise SimdlError(f"--loader-workers {loader_workers!r} must be an integer >= 0")
    config = StrategyConfig(
        name=strategy,
        sharding=sharding,
        wrap=wrap,
        staleness_bound=staleness_bound,
        ps_servers=ps_servers,
        bucket_cap_bytes=DDP_BUCKET_CAP_BYTES if bucket_cap_mb is None else bucket_cap_mb * MiB,
        algorithm=algorithm,
        cpu_offload=cpu_offload,
        reshard_root=bool(reshard_root),
        shard_group=shard_group,
    )
    plan = build_plan(workload, alloc, config)
    echo = {
        "model": table.model,
        "strategy": config.name,
        "label": config.label,
        "gpus": alloc.gpus,
        "nodes": alloc.nodes,
        "gpus_per_node": alloc.gpus_per_node,
        "cluster": spec.name,
        "gpu": spec.gpu.name,
        "dataset": dataset,
        "input_shape": "x".join(str(x) for x in table.input_shape),
        "num_classes": table.num_classes,
        "train_samples": workload.train_samples,
        "batch_size": batch_size,
        "global_batch_size": batch_size * grad_accumulation * plan.data_parallel,
        "epochs": epochs,
        "optimizer": optimizer,
        "precision": precision,
        "grad_accumulation": grad_accumulation,
        "activation_checkpointing": activation_checkpointing,
        "loader_workers": loader_workers,
        "algorithm": algorithm,
        "engine": engine,
    }
    if config.name == "ddp":
        echo["bucket_cap_bytes"] = config.bucket_cap_bytes
        echo["first_bucket_bytes"] = config.first_bucket_bytes
        echo["buckets"] = plan.details["buckets"]
    if config.name == "fsdp":
        echo.update(sharding=sharding, wrap=wrap, fsdp_units=plan.details["units"], cpu_offload=cpu_offload,
                    reshard_root=plan.details["reshard_root"])
        if sharding == "hybrid":
            echo.update(shard_group=plan.details["shard_size"], replicas=plan.details["replicas"])
    if config.is_ps:
        echo["ps_servers"] = ps_servers
        if config.name == "ps-ssp":
            echo["staleness_bound"] = staleness_bound
    if table.adaptation:
        echo["model_adaptation"] = table.adaptation
    echo["compute_source"] = _compute_source(alloc, workload)
    relevant = set(echo) | {"cluster", "dataset"}
    echo["assumed"] = {k: DEFAULT_REASONS[k] for k in DEFAULT_REASONS if k not in given and k in relevant}
    if engine == "analytic":
        from .analytic.engine import evaluate

        result = evaluate(workload, alloc, plan, algorithm=algorithm, loader_workers=loader_workers, config=echo)
    else:
        from .sim.engine import simulate  # the SimPy engine loads only when asked for

        result = simulate(workload, alloc, plan, algorithm=algorithm, loader_workers=loader_workers, config=echo,
                          **engine_options)
    run = None
    if not isinstance(result, Result):  # the sim engine's SimRun (return_run=True): its .result
        run, result = result, result.result
    result = _with_band(_with_noise_note(result, spec), spec)
    if run is not None:
        run.result = result
        return run
    return result


def _with_band(result: Result, spec) -> Result:
    """The result with the band its step should fall in on this cluster (simdl.band), where
    the profile's calibration says how far off its steps are; unchanged otherwise."""
    spread = step_spread(spec)
    if spread is None:
        return result
    config = dict(result.config, iteration_time_band=f"{100 * LEVEL:.0f} % of runs; from the {spread.describe()}")
    return dataclasses.replace(result, iteration_time_band_s=band(result.iteration_time_s, spread.sigma),
                               config=config)


def _with_noise_note(result: Result, spec) -> Result:
    """The result, with a note when its cluster profile measured a machine whose own steps
    wander more than simdl's accuracy goal (simdl.calibrate.jitter.noise_warning): a user
    comparing one run with the prediction should expect that much either way."""
    cj = spec.efficiency.compute_jitter
    why = noise_warning(cj.value if cj is not None else None)
    if not why:
        return result
    return dataclasses.replace(result, notes=tuple(result.notes) + (f"cluster {spec.name}: {why}",))


def _compute_source(alloc, workload) -> str:
    """Where the per-row compute times come from: the cluster's compute profile of this model
    (measured rows, simdl.analytic.measured) or the roofline of simdl.analytic.costs."""
    from .analytic.costs import device_rates

    rates = device_rates(alloc, workload.precision)
    m = rates.measured.find(workload.table) if rates.measured is not None else None
    if m is None:
        return "roofline"
    batches = ",".join(str(int(b)) for b in m.batches)
    return f"compute profile ({m.coverage(workload.batch_size)} from rows measured at batch {batches})"
