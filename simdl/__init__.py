"""simdl: predict time, memory and utilization of distributed PyTorch training.

>>> import simdl
>>> r = simdl.predict(model="vgg16", strategy="fsdp", gpus=4)   # doctest: +SKIP
>>> r.iteration_time_s, r.peak_memory_bytes                     # doctest: +SKIP
"""

from .errors import SimdlError
from .predict import predict
from .result import Result

__version__ = "0.1.0"
__all__ = ["predict", "Result", "SimdlError", "__version__"]
