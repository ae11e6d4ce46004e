"""simdl: predict time, memory and utilization of distributed PyTorch training.

>>> import simdl
>>> r = simdl.predict(model="vgg16", strategy="fsdp", gpus=4)   # doctest: +SKIP
>>> r.iteration_time_s, r.peak_memory_bytes                     # doctest: +SKIP
>>> simdl.list_models(), simdl.list_clusters()                  # doctest: +SKIP
"""

from .catalog import list_clusters, list_models
from .errors import SimdlError
from .job import Job
from .predict import predict
from .result import Result

__version__ = "0.1.0"
__all__ = [
    "predict",
    "Job",
    "Result",
    "SimdlError",
    "__version__",
    "sweep",
    "recommend",
    "derive_cluster",
    "list_models",
    "list_clusters",
]


def __getattr__(name: str):
    # simdl.sweep / simdl.recommend / simdl.derive_cluster load on first use, so that
    # `import simdl` and `simdl predict` do not import the exploration modules.
    if name in ("sweep", "recommend", "derive_cluster"):
        from . import explore

        return getattr(explore, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
