"""What-if exploration: sweeps over grids of configurations, strategy recommendation, what-if clusters.

* :func:`sweep` -- predict every point of a grid (models x strategies x GPUs x batch sizes x
  bandwidths x ...), in parallel, as a DataFrame; ``simdl sweep`` on the command line;
* :func:`recommend` -- rank strategies, sharding, batch, precision (and activation
  checkpointing, when the memory model offers it) by predicted time, memory or cost among
  the configurations that fit, and explain the winner; ``simdl recommend``;
* :func:`derive_cluster` -- a preset with some link rates replaced, in memory;
* :func:`plot_sweep` -- time and memory against the swept variable, one line per strategy.

pandas (for DataFrames) and tqdm (progress bars) are optional: ``pip install 'simdl[explore]'``.
"""

from .grid import Grid, accepted_keys, describe_keys, parse_set
from .recommend import Recommendation, recommend
from .sweep import EXECUTORS, run_points, sweep, to_frame, write_rows
from .whatif import CLUSTER_KEYS, derive_cluster


def plot_sweep(*args, **kwargs):
    """Time and memory against the swept variable per strategy (see :mod:`simdl.explore.plot`)."""
    from .plot import plot_sweep as _plot  # matplotlib only when plotting

    return _plot(*args, **kwargs)


__all__ = [
    "CLUSTER_KEYS",
    "EXECUTORS",
    "Grid",
    "Recommendation",
    "accepted_keys",
    "derive_cluster",
    "describe_keys",
    "parse_set",
    "plot_sweep",
    "recommend",
    "run_points",
    "sweep",
    "to_frame",
    "write_rows",
]
