"""One prediction from names and numbers: the path ``simdl predict`` and ``simdl.predict`` share.

workload (model + input + batch) -> strategy plan -> engine -> result.
Every value used is echoed in ``result.config``; values the caller did not give are
listed under ``config["assumed"]`` with where the default comes from (simdl.predict_echo).
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .errors import SimdlError, unknown
from .job import Job
from .predict_echo import DEFAULT_REASONS, echo_assumed, echo_config, echo_input
from .predict_notes import with_band, with_epoch_counts, with_input_notes, with_noise_note
from .result import Result

if TYPE_CHECKING:
    from .cluster import ClusterSpec

__all__ = ["DEFAULT_CLUSTER", "DEFAULT_LOADER_WORKERS", "DEFAULT_REASONS", "ENGINES", "predict"]

ENGINES = ("analytic", "sim")
DEFAULT_CLUSTER = "a100-80gb-nvlink"  # study 1, experiment 1: 4 x A100 80 GB in one node (NVLink assumed)
DEFAULT_LOADER_WORKERS = 4  # assumed: a common DataLoader(num_workers=4) setting


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
    memory_format: str | None = None,
    algorithm: str | None = None,
    loader_workers: int | None = None,
    grad_accumulation: int = 1,
    activation_checkpointing: bool = False,
    deepspeed_config: str | None = None,
    cuda_alloc_conf: str | None = None,
    cuda: str | int | float | None = None,
    engine: str = "analytic",
    **engine_options: Any,
) -> Result:
    """Predict one training configuration. Raises :class:`SimdlError` on bad input.

    The named keywords are a :class:`~simdl.job.Job`'s fields. ``predict(Job(...))`` predicts the
    job, keywords beside it replacing its fields and options, except a field equal to its default
    here or a strategy keyword left at None or off (they cannot be told from one not given; use
    ``job.replace(...)``).

    ``**engine_options`` takes the strategy's keywords (``sharding``, ``wrap``, ``bucket_cap_mb``,
    ``ps_servers``, ...: those its registry entry declares, :mod:`simdl.strategies.registry`)
    and, with ``engine="sim"``, the simulator's options (:mod:`simdl.sim.engine`). A strategy
    keyword the strategy does not take raises, naming the strategies that do; any other
    keyword raises, naming what is accepted.

    ``deepspeed_config``: a DeepSpeed ds_config.json (simdl.strategies.zero_config); its ZeRO
    stage sets the strategy (``zero0`` .. ``zero3``), its keys the stage's options, the per-GPU
    batch, the gradient accumulation, the precision and the optimizer. A keyword given beside
    it must agree with it. ``memory_format``: ``contiguous`` (PyTorch's default, NCHW) or
    ``channels_last`` (NHWC), which prices the layout copies of tensor-core convolutions (GPU
    kernel model; nothing on CPU devices). ``cuda_alloc_conf``: the caching allocator's options (:func:`_allocator`);
    ``cuda``: ``torch.version.cuda`` of the ranks' build, the CUDA context's size (simdl.memory.device)."""
    if isinstance(model, Job):
        return _predict_job(model, {k: v for k, v in locals().items() if k in _DEFAULTS}, engine_options)
    _check_numbers(engine, epochs, engine_options.get("bucket_cap_mb"))
    ds, strategy, batch_size, grad_accumulation, precision, optimizer = _deepspeed(
        deepspeed_config, engine_options, gpus, strategy, batch_size, grad_accumulation, precision, optimizer
    )
    _check_engine_options(engine, engine_options)
    family, strategy_kw = _strategy_keywords(strategy, engine_options)
    # The keywords with a default reason the caller gave (the DeepSpeed config's values count as given).
    given = {k for k, v in locals().items() if k in DEFAULT_REASONS and v is not None}
    given |= {k for k, v in strategy_kw.items() if v is not None}
    dataset = dataset or "cifar10"
    _check_gpus(gpus)
    workload = _workload(**{k: v for k, v in locals().items() if k in _WORKLOAD_ARGS})
    alloc, placement_why = _allocate(cluster, gpus, nodes, family, strategy, strategy_kw, cuda)
    loader_workers = _loader_workers(loader_workers)
    config, plan = _plan(workload, alloc, family, strategy, algorithm or "auto", strategy_kw)
    echo = echo_config(workload, alloc, config, plan, dataset=dataset, loader_workers=loader_workers, engine=engine)
    echo_assumed(echo, family, given, placement_why, alloc, workload)
    echo_input(echo, workload, dataset, vocab, train_samples)
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


def _check_gpus(gpus) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise SimdlError(f"--gpus {gpus!r} must be an integer >= 1")


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


def _predict_job(job: Job, fields: dict[str, Any], keywords: dict[str, Any]) -> Result:
    """``predict(job, **fields, **keywords)``: the job with the keywords beside it in place of
    its fields and options (a field at its default here, a strategy keyword at None or off, is
    taken as not given)."""
    from .strategies import registry

    given = {k: v for k, v in fields.items() if k != "model" and v != _DEFAULTS[k]}
    strategy = set(registry.predict_keys())
    keywords = {k: v for k, v in keywords.items() if k not in strategy or _strategy_value(k, v) is not None}
    return predict(**job.replace(**given, **keywords).kwargs())


def _strategy_value(key: str, value: Any) -> Any:
    """A strategy keyword's value, None where it is not given: a flag (a keyword its registry
    entry converts with ``bool``) left off is its default, as None is for the others."""
    from .strategies import registry

    declared = next(s.predict_keys[key] for s in registry.specs() if key in s.predict_keys)
    return None if declared.to_field is bool and not value else value


def _strategy_keywords(strategy: str, keywords: dict):
    """(the strategy's registry entry, its keywords): the registered strategy keywords, taken out
    of ``keywords`` in the order given, each checked to be one the strategy takes."""
    from .strategies import registry

    family = registry.get(strategy)
    declared = set(registry.predict_keys())
    strategy_kw = {k: _strategy_value(k, keywords.pop(k)) for k in list(keywords) if k in declared}
    registry.refuse_inapplicable(strategy, strategy_kw)
    return family, strategy_kw


def _allocate(cluster, gpus: int, nodes: int | None, family, strategy: str, strategy_kw: dict, cuda=None):
    """(allocation, why the PS placement was assumed or None) on the cluster named, given as a
    ClusterSpec (taken as is: what-if variants from simdl.explore.derive_cluster need no file),
    or the default one; ``cuda`` (a CUDA version) replaces the cluster's."""
    from .cluster import ClusterSpec, load_cluster

    cluster = cluster or DEFAULT_CLUSTER
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    if cuda is not None:
        from .memory.device import cuda_major

        spec = _with_cuda(spec, cuda_major(cuda, "--cuda"))
    _, alloc, placement_why = _place(spec, gpus, nodes, family, strategy, strategy_kw)
    return alloc, placement_why


@lru_cache(maxsize=256)
def _with_cuda(spec, cuda: str):
    """``spec`` with its CUDA version replaced (memoised: the engines' caches key on the spec)."""
    import dataclasses

    return spec if spec.cuda == cuda else dataclasses.replace(spec, cuda=cuda)


def _loader_workers(loader_workers) -> int:
    loader_workers = DEFAULT_LOADER_WORKERS if loader_workers is None else loader_workers
    if not isinstance(loader_workers, int) or loader_workers < 0:
        raise SimdlError(f"--loader-workers {loader_workers!r} must be an integer >= 0")
    return loader_workers


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
    memory_format,
):
    """The workload: the model's table for the input, classes and vocabulary (token-id inputs),
    the batch, the training length and settings (predict's keywords of the same names)."""
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
        memory_format=wl.DEFAULT_MEMORY_FORMAT if memory_format is None else memory_format,
    )


_WORKLOAD_ARGS = frozenset(inspect.signature(_workload).parameters)


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
