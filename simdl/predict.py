"""One prediction from names and numbers: the path ``simdl predict`` and ``simdl.predict`` share.

workload (model + input + batch) -> strategy plan -> engine -> result.
Every value used is echoed in ``result.config``; values the caller did not give are
listed under ``config["assumed"]`` with where the default comes from.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .errors import SimdlError, unknown
from .job import Job
from .predict_notes import with_band, with_epoch_counts, with_input_notes, with_noise_note
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
    "loader_workers": "assumed DataLoader(num_workers=4)",
    "algorithm": "the cheaper of ring and tree per collective, as NCCL's tuner picks",
}  # a strategy's own keywords give their reasons in its registry entry (PredictKey.default_reason)


def predict(
    model: str | Job = "vgg16",
    strategy: str = "fsdp",
    gpus: int = 4,
    *,
    nodes: int | None = None,
    cluster: str | ClusterSpec | None = None,
    dataset: str | None = None,
    input_shape: str | tuple[int, ...] | None = None,
    num_classes: int | None = None,
    vocab: int | None = None,
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
    ps_placement: str | None = None,
    deepspeed_config: str | None = None,
    cuda_alloc_conf: str | None = None,
    engine: str = "analytic",
    **engine_options: Any,
) -> Result:
    """Predict one training configuration. Raises :class:`SimdlError` on bad input.

    ``predict(Job(...))`` predicts a :class:`~simdl.job.Job`; keywords beside it replace its
    fields, except one equal to its default here (it cannot be told from one not given; use
    ``job.replace(...)``). The keywords alone describe the same job.

    The strategy keywords (``sharding``, ``wrap``, ``bucket_cap_mb``, ...) are those its
    registry entry declares (:mod:`simdl.strategies.registry`); one the strategy does not
    take raises, naming the strategies that do. A strategy registered with keywords of its
    own takes them here too (through ``**engine_options``).

    ``deepspeed_config``: a DeepSpeed ds_config.json (simdl.strategies.zero_config); its ZeRO
    stage sets the strategy (``zero0`` .. ``zero3``), its keys the stage's options, the per-GPU
    batch, the gradient accumulation, the precision and the optimizer. A keyword given beside
    it must agree with it. ``cuda_alloc_conf``: the caching allocator's options (:func:`_allocator`).
    """
    if isinstance(model, Job):
        args = dict(locals())
        given_kw = {k: v for k, v in args.items() if k in _DEFAULTS and k != "model" and v != _DEFAULTS[k]}
        return predict(**model.replace(**given_kw, **engine_options).kwargs())
    _check_numbers(engine, epochs, bucket_cap_mb)
    ds, strategy, batch_size, grad_accumulation, precision, optimizer = _deepspeed(
        deepspeed_config, engine_options, gpus, strategy, batch_size, grad_accumulation, precision, optimizer
    )
    _check_engine_options(engine, engine_options)
    family, strategy_kw = _strategy_keywords(
        strategy,
        engine_options,
        dict(
            sharding=sharding,
            wrap=wrap,
            staleness_bound=staleness_bound,
            ps_servers=ps_servers,
            bucket_cap_mb=bucket_cap_mb,
            cpu_offload=cpu_offload or None,
            reshard_root=reshard_root or None,
            shard_group=shard_group,
            ps_placement=ps_placement,
        ),
    )
    given = {
        k
        for k, v in dict(
            cluster=cluster,
            dataset=dataset,
            batch_size=batch_size,
            epochs=epochs,
            optimizer=optimizer,
            precision=precision,
            loader_workers=loader_workers,
            algorithm=algorithm,
            **strategy_kw,
        ).items()
        if v is not None
    }
    dataset = dataset or "cifar10"
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise SimdlError(f"--gpus {gpus!r} must be an integer >= 1")
    workload = _workload(
        model,
        dataset,
        input_shape,
        num_classes,
        vocab,
        train_samples,
        batch_size,
        epochs,
        optimizer,
        precision,
        grad_accumulation,
        activation_checkpointing,
    )
    alloc, placement_why = _allocate(cluster, gpus, nodes, family, strategy, strategy_kw)
    loader_workers = _loader_workers(loader_workers)
    config, plan = _plan(workload, alloc, family, strategy, algorithm or "auto", strategy_kw)
    echo = _echo(workload, alloc, config, plan, dataset=dataset, loader_workers=loader_workers, engine=engine)
    _echo_assumed(echo, family, given, placement_why, alloc, workload)
    _echo_input(echo, workload, dataset, vocab, train_samples)
    if ds is not None:
        echo.update(deepspeed_config=ds.path, deepspeed_config_notes=list(ds.notes))
    return _run(workload, alloc, plan, echo, engine, engine_options, _allocator(echo, cuda_alloc_conf))


def _allocator(echo: dict, cuda_alloc_conf: str | None):
    """The caching allocator's options, ``PYTORCH_CUDA_ALLOC_CONF`` syntax (simdl.memory.allocconf):
    ``cuda_alloc_conf`` if given, else that environment variable, else PyTorch's defaults (None);
    ``echo`` gains ``cuda_alloc_conf`` (the text) and ``cuda_alloc_conf_source`` (flag, env, default)."""
    from .memory.allocconf import alloc_conf_echo

    allocator, text, source = alloc_conf_echo(cuda_alloc_conf)
    echo.update(cuda_alloc_conf=text, cuda_alloc_conf_source=source)
    return allocator


def _check_numbers(engine: str, epochs, bucket_cap_mb) -> None:
    if engine not in ENGINES:
        raise unknown("engine", engine, ENGINES)
    from .inputs import check_prediction_numbers

    check_prediction_numbers(epochs=epochs, bucket_cap_mb=bucket_cap_mb)


def _deepspeed(path, engine_options: dict, gpus, strategy: str, batch_size, grad_accumulation, precision, optimizer):
    """(the ds_config or None, strategy, batch_size, grad_accumulation, precision, optimizer):
    a DeepSpeed config's values where one is given (simdl.strategies.zero_config), the
    keywords unchanged otherwise."""
    if path is None:
        return None, strategy, batch_size, grad_accumulation, precision, optimizer
    from .strategies.zero_config import apply_ds_config

    return apply_ds_config(
        path,
        engine_options,
        gpus=gpus,
        strategy=strategy,
        default_strategy=_DEFAULTS["strategy"],
        batch_size=batch_size,
        grad_accumulation=grad_accumulation,
        precision=precision,
        optimizer=optimizer,
    )


def _check_engine_options(engine: str, engine_options: dict) -> None:
    """A keyword that is neither predict's, a registered strategy's, nor (with the simulator)
    the simulator's is refused, as is a simulator option given to the analytic engine."""
    from .sim.options import RUN_OPTIONS, SIM_OPTIONS
    from .strategies import registry

    if engine == "sim":  # the simulator refuses what it does not take, naming its options
        return
    for key in engine_options:
        if key in registry.predict_keys():
            continue
        if key in SIM_OPTIONS + RUN_OPTIONS:
            if engine_options[key] not in (None, False):
                raise SimdlError(f"{key} is a simulator option: it needs engine='sim' (engine is {engine!r})")
            continue
        accepted = tuple(_DEFAULTS) + registry.predict_keys() + SIM_OPTIONS + RUN_OPTIONS
        raise unknown("predict keyword", key, tuple(dict.fromkeys(accepted)))


def _strategy_keywords(strategy: str, engine_options: dict, strategy_kw: dict):
    """(the strategy's registry entry, its keywords): the keywords ``predict`` names plus those
    a registered strategy declares of its own (taken out of ``engine_options``), each checked
    to be one the strategy takes."""
    from .strategies import registry

    family = registry.get(strategy)
    strategy_kw.update({k: engine_options.pop(k) for k in registry.predict_keys() if k in engine_options})
    registry.refuse_inapplicable(strategy, strategy_kw)
    return family, strategy_kw


def _allocate(cluster, gpus: int, nodes: int | None, family, strategy: str, strategy_kw: dict):
    """(allocation, why the PS placement was assumed or None) on the cluster named, given as a
    ClusterSpec (taken as is: what-if variants from simdl.explore.derive_cluster need no file),
    or the default one."""
    from .cluster import ClusterSpec, load_cluster

    cluster = cluster or DEFAULT_CLUSTER
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    _, alloc, placement_why = _place(spec, gpus, nodes, family, strategy, strategy_kw)
    return alloc, placement_why


def _loader_workers(loader_workers) -> int:
    loader_workers = DEFAULT_LOADER_WORKERS if loader_workers is None else loader_workers
    if not isinstance(loader_workers, int) or loader_workers < 0:
        raise SimdlError(f"--loader-workers {loader_workers!r} must be an integer >= 0")
    return loader_workers


def _echo_assumed(echo: dict, family, given: set, placement_why: str | None, alloc, workload) -> None:
    """``echo["assumed"]``: each default used, with its reason, for the keys this prediction
    echoes; the PS placement and the GPU kernel model's assumptions where they apply."""
    relevant = set(echo) | {"cluster", "dataset"}
    reasons = dict(
        DEFAULT_REASONS, **{k: key.default_reason for k, key in family.predict_keys.items() if key.default_reason}
    )
    echo["assumed"] = {k: why for k, why in reasons.items() if k not in given and k in relevant}
    if placement_why:
        echo["assumed"]["ps_placement"] = placement_why
    for key, (value, why) in _kernel_assumptions(alloc, workload).items():
        echo[key] = value
        echo["assumed"][key] = why


def _place(spec, gpus: int, nodes: int | None, family, strategy: str, strategy_kw: dict):
    """(spec, allocation, why the placement was assumed or None). A strategy whose registry
    entry takes ``ps_placement`` has its servers placed (simdl.cluster.ps_placement) and
    ``--ps-servers`` checked against them, once, before either engine runs; the placement
    it resolves to goes into ``strategy_kw``."""
    from .cluster import allocate

    if not family.applies("ps_placement", strategy):
        return spec, allocate(spec, gpus, nodes), None
    from .cluster.ps_placement import place_servers
    from .strategies import registry

    servers = strategy_kw.get("ps_servers")
    servers = registry.field_default("ps_servers") if servers is None else servers
    spec, alloc, placement, why = place_servers(spec, gpus, nodes, strategy_kw.get("ps_placement"), servers)
    strategy_kw["ps_placement"] = placement
    return spec, alloc, why


def _workload(
    model,
    dataset,
    input_shape,
    num_classes,
    vocab,
    train_samples,
    batch_size,
    epochs,
    optimizer,
    precision,
    grad_accumulation,
    activation_checkpointing,
):
    """The workload: the model's table for the input, classes and vocabulary (token-id inputs),
    the batch and the training length."""
    from .workload import workload as wl
    from .workload.datasets import get_dataset, parse_input_shape
    from .workload.inputs import check_vocab
    from .workload.library import load_workload

    ds = get_dataset(dataset)
    shape = (
        parse_input_shape(input_shape)
        if isinstance(input_shape, str)
        else (tuple(input_shape) if input_shape else None)
    )
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1
    ):
        raise SimdlError(f"--classes {num_classes!r} must be an integer >= 1")
    vocab = check_vocab(vocab)
    table = load_workload(
        model,
        dataset=None if (shape or num_classes) else dataset,
        input_shape=shape or ds.input_shape,
        num_classes=num_classes or ds.num_classes,
        vocab=vocab,
    )
    return wl.Workload(
        table=table,
        batch_size=wl.DEFAULT_BATCH_SIZE if batch_size is None else batch_size,
        train_samples=train_samples if train_samples is not None else ds.train_samples,
        epochs=wl.DEFAULT_EPOCHS if epochs is None else epochs,
        optimizer=optimizer or wl.DEFAULT_OPTIMIZER,
        precision=precision or wl.DEFAULT_PRECISION,
        grad_accumulation=grad_accumulation,
        activation_checkpointing=activation_checkpointing,
    )


def _plan(workload, alloc, family, strategy: str, algorithm: str, strategy_kw: dict):
    """The strategy's settings (its registry entry turns the keywords into its options) and its plan."""
    from .strategies import StrategyConfig, build_plan

    knobs = {
        key.field: key.to_field(strategy_kw[k])
        for k, key in family.predict_keys.items()
        if strategy_kw.get(k) is not None
    }
    try:  # a sweep builds the same settings many times; each value's type is part of the key
        config = _config(strategy, algorithm, tuple((k, type(v), v) for k, v in knobs.items()))
    except TypeError:  # an unhashable value: built (and rejected) without the cache
        config = StrategyConfig(name=strategy, algorithm=algorithm, **knobs)
    return config, build_plan(workload, alloc, config)


@lru_cache(maxsize=1024)
def _config(strategy: str, algorithm: str, knobs: tuple):
    from .strategies import StrategyConfig

    return StrategyConfig(name=strategy, algorithm=algorithm, **{k: v for k, _, v in knobs})


def _echo(workload, alloc, config, plan, *, dataset: str, loader_workers: int, engine: str) -> dict[str, Any]:
    """Every value the prediction used (``result.config``), the strategy's own from its registry entry."""
    table = workload.table
    echo = {
        "model": table.model,
        "strategy": config.name,
        "label": config.label,
        "gpus": alloc.gpus,
        "nodes": alloc.nodes,
        "gpus_per_node": alloc.gpus_per_node,
        "cluster": alloc.spec.name,
        "gpu": alloc.spec.gpu.name,
        "dataset": dataset,
        "input_shape": "x".join(str(x) for x in table.input_shape),
        "num_classes": table.num_classes,
        "train_samples": workload.train_samples,
        "batch_size": workload.batch_size,
        "global_batch_size": workload.batch_size * workload.grad_accumulation * plan.data_parallel,
        "epochs": workload.epochs,
        "optimizer": workload.optimizer,
        "precision": workload.precision,
        "grad_accumulation": workload.grad_accumulation,
        "activation_checkpointing": workload.activation_checkpointing,
        "loader_workers": loader_workers,
        "algorithm": config.algorithm,
        "engine": engine,
    }
    echo.update(config.spec.echo(config, plan))
    if table.adaptation:
        echo["model_adaptation"] = table.adaptation
    echo["compute_source"] = _compute_source(alloc, workload)
    return echo


def _echo_input(echo: dict, workload, dataset: str, vocab: int | None, train_samples: int | None) -> None:
    """The input's kind where it is not the dataset's images (simdl.workload.inputs): token ids
    and their vocabulary, and the sample count assumed from the dataset when not given."""
    from .workload.inputs import describe, is_image

    shape = workload.table.input_shape
    if vocab is not None:
        echo["vocab_size"] = vocab
    if not is_image(shape, vocab):
        echo["input"] = describe(shape, vocab)
        if train_samples is None:
            echo["assumed"]["train_samples"] = (
                f"{dataset}'s {workload.train_samples} samples per epoch, for "
                "inputs that are not its images: give --samples for your data set"
            )


def _run(workload, alloc, plan, echo: dict, engine: str, engine_options: dict, allocator=None):
    """The engine's result, with the cluster's noise note and band; the SimRun with ``return_run``."""
    spec = alloc.spec
    if engine == "analytic":
        from .analytic.engine import evaluate

        result = evaluate(
            workload,
            alloc,
            plan,
            algorithm=echo["algorithm"],
            loader_workers=echo["loader_workers"],
            config=echo,
            allocator=allocator,
        )
    else:
        from .sim.engine import simulate  # the SimPy engine loads only when asked for

        result = simulate(
            workload,
            alloc,
            plan,
            algorithm=echo["algorithm"],
            loader_workers=echo["loader_workers"],
            config=echo,
            allocator=allocator,
            **engine_options,
        )
    run = None
    if not isinstance(result, Result):  # the sim engine's SimRun (return_run=True): its .result
        run, result = result, result.result
    result = with_band(with_noise_note(result, spec), spec)
    result = with_epoch_counts(with_input_notes(result, workload, alloc, plan, echo), workload, plan)
    if run is not None:
        run.result = result
        return run
    return result


_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(predict).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def _kernel_assumptions(alloc, workload) -> dict:
    """What the GPU kernel model takes that the user did not give, as {key: (value, why)}: the
    math path per op class (PyTorch's TF32 defaults) and the eager host's per-op cost
    (simdl.costs.gpu_rows)."""
    from .costs.gpu_rows import HOST_BWD_FRACTION, host_op_seconds
    from .costs.tasks import device_rates

    rates = device_rates(alloc, workload.precision)
    if rates.kernels is None or (rates.measured is not None and rates.measured.find(workload.table) is not None):
        return {}
    k, p = rates.kernels, workload.precision
    paths = f"matmul {k.path_of(p, 'matmul')}, conv {k.path_of(p, 'conv')}"
    host = f"{host_op_seconds(k) * 1e6:.0f}us/op"
    return {
        "math_path": (paths, k.describe_paths(p)),
        "host_per_op": (
            host,
            f"eager PyTorch: per forward op the measured lone-op floor of {k.kind} kernels "
            f"block, {HOST_BWD_FRACTION:.0%} of it per backward op (simdl.costs.gpu_rows); DDP/FSDP "
            "hooks, launches and stream calls counted from PyTorch's source at that price, "
            "5 us per light call assumed (simdl.costs.gpu_framework)",
        ),
    }


def _compute_source(alloc, workload) -> str:
    """Where the per-row compute times come from: the cluster's compute profile of this model
    (measured rows, simdl.costs.measured) or the roofline of simdl.costs.tasks."""
    from .costs.tasks import device_rates

    rates = device_rates(alloc, workload.precision)
    m = rates.measured.find(workload.table) if rates.measured is not None else None
    if m is None and rates.kernels is not None:
        return f"GPU kernel model ({rates.kernels.kind} kernels block of {alloc.spec.gpu.name}), eager host stream"
    if m is None:
        return "roofline"
    batches = ",".join(str(int(b)) for b in m.batches)
    return f"compute profile ({m.coverage(workload.batch_size)} from rows measured at batch {batches})"
