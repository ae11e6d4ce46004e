"""DDP's and FSDP's own work on a GPU rank: host time on the eager host stream, copy kernels
on the device.

On a GPU the framework's bookkeeping (autograd hooks, collective launches, stream and event
calls, the copy kernels it issues) runs on the same host thread that issues the model's ops
(:mod:`simdl.costs.gpu_rows`). It delays the device only where the device has caught up with
the host, so it is priced as extra host seconds at the row where the host spends them; the
device-side copy kernels are priced on the device at the GPU's streaming rate.

What each framework step costs is counted from PyTorch's source (torch 2.14.1, the version in
this project's environment) and priced per call:

- a tensor op issued from Python (allocation, copy, collective launch, view): the host's
  measured lone-op time (:func:`simdl.costs.gpu_rows.host_op_seconds`, the NeuSight floor);
- a tensor op issued from C++ (DDP's reducer, on the autograd engine's thread): that time
  times :data:`~simdl.costs.gpu_rows.HOST_BWD_FRACTION` (no Python, pybind11 or autograd
  recording layers);
- a light call (a hook's entry, a CUDA stream ``wait_stream`` / ``wait_event`` /
  ``record_event``, a per-parameter attribute swap or storage resize, the reducer's
  per-variable bookkeeping): :data:`~simdl.costs.gpu_rows.HOST_MODULE_S` (assumed).

DDP (torch/csrc/distributed/c10d/reducer.cpp, torch/nn/parallel/distributed.py):
- per parameter, an autograd post-hook (``Reducer::autograd_hook`` -> ``mark_variable_ready``)
  when its gradient is ready: one light call at that row's backward;
- ``mark_variable_ready_dense`` writes the gradient into its bucket view (``at::mul_out``
  dividing by the world size as it copies; ``div_`` in place where the gradient already is
  the view): one C++ op per parameter, with or without ``gradient_as_bucket_view`` (under
  ``zero_grad(set_to_none=True)`` the gradient is a fresh tensor every step; the plan's
  ``bucket_copy_in`` task, ``kernels`` = its parameters, simdl.strategies.ddp);
- a ready bucket is all-reduced (``mark_bucket_ready`` -> ``all_reduce_bucket``): one C++ op;
- ``finalize_backward`` -> ``finalize_bucket_dense``: per parameter ``copy_bucket_to_grad``
  copies its averaged gradient back into ``param.grad`` (one C++ op), or with
  ``gradient_as_bucket_view=True`` points ``param.grad`` at the bucket view (a light call);
- ``broadcast_buffers``: ``_sync_module_buffers`` launches one coalesced broadcast from Python.

FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, _fsdp_param_group.py,
_fsdp_param.py), per unit and per collective:
- all-gather copy-in (``foreach_all_gather``): the output's allocation and
  ``all_gather_copy_in``: 2 Python ops, ``wait_stream`` and per parameter its all-gather input
  (``_get_param_all_gather_inputs``): 1 + n light calls;
- the all-gather: its launch (1 Python op) and ``record_event`` (1 light);
- copy-out (``foreach_all_gather_copy_out``): ``wait_event``, per parameter
  ``alloc_all_gather_outputs`` (a storage resize) and ``to_unsharded``: 1 + 2n light calls,
  and ``split_with_sizes_copy``: 1 Python op (with a shard group of one rank the plan's
  ``copy_out`` copies each parameter: one Python op per kernel);
- reduce copy-in (``foreach_reduce``): two allocations and ``chunk_cat``: 3 Python ops, and
  ``wait_stream``: 1 light; the reduce-scatter or all-reduce: 1 Python op and ``record_event``;
  per parameter the sharded gradient's ``as_strided`` view and its DTensor
  (``to_sharded_dtensor``): 2 Python ops;
- hooks: ``pre_forward``, ``post_forward``, ``pre_backward``, ``post_backward``: 1 light call
  each; ``reshard`` (``to_sharded`` and ``free_storage`` per parameter): 2n light calls after
  the forward when the unit is gathered again for backward, and again after its backward.
The plans model FSDP2; FSDP1 (torch/distributed/fsdp/_runtime_utils.py) runs the same steps
per unit on one FlatParameter, i.e. these counts with n = 1 (no plan option selects it).
"""

from __future__ import annotations

import numpy as np

from .gpu_profile import KernelProfile
from .gpu_rows import DEVICE_FLOOR_S, HOST_BWD_FRACTION, HOST_MODULE_S, host_op_seconds


def copy_kernels_time(profile: KernelProfile, nbytes: float, kernels: int) -> float:
    """Device seconds of ``kernels`` copy kernels moving ``nbytes`` (read + write) together:
    each pays the device-side floor and streams at the GPU's memory bandwidth times the
    elementwise class's fitted large-size efficiency. (The class's size-dependent term is not
    used: its half-bandwidth size is fitted on lone calls whose floor hides the body of small
    kernels, and would give a 1 kB copy ~11 us on an A100.)"""
    n = max(int(kernels), 1)
    rate = profile.memory_bandwidth * profile.param("elementwise").memory_efficiency
    return n * DEVICE_FLOOR_S + nbytes / rate


def _prices(profile: KernelProfile) -> tuple[float, float, float]:
    py = host_op_seconds(profile)
    return py, py * HOST_BWD_FRACTION, HOST_MODULE_S


def _unit_tensors(plan, table) -> dict[str, int]:
    """Parameters per FSDP unit, by the name the plan's tasks carry ('root' for the root)."""
    from ..strategies.fsdp_units import fsdp_units

    units = fsdp_units(table, plan.details["wrap"])
    return {(u.name or "root"): u.n_tensors for u in units.units}


def _task_host_s(task, kind: str, prices, tensors: dict[str, int], n_params: int = 0, as_view: bool = False) -> float:
    """Host seconds the framework spends around one plan task (0 for the model's rows)."""
    py, cpp, light = prices
    head, _, rest = task.name.partition(":")
    unit = rest.rpartition(":")[2] if rest else ""
    n = tensors.get(unit, 1)
    if kind == "reducer":
        if head == "bucket_copy_in":
            return task.kernels * cpp
        if head == "bucket_copy_out":
            return n_params * (light if as_view else cpp)
        if head == "all_reduce":
            return cpp
        if head == "broadcast_buffers":
            return py
        return 0.0
    if head == "copy_in":
        return 2 * py + (1 + n) * light
    if head in ("all_gather", "reduce_scatter", "all_reduce"):
        return py + light
    if head == "copy_out":
        ops = task.kernels if task.kernels > 1 else 1
        return ops * py + (1 + 2 * n) * light
    if head == "rs_copy_in":
        return 3 * py + light + 2 * n * py
    if head == "rs_copy":
        return py
    return 0.0


def _unit_of_rows_task(name: str) -> str:
    """'forward:layer1.0[3:9]' -> 'layer1.0'."""
    return name.partition(":")[2].rpartition("[")[0]


# framework_host_rows of the (plan, table, profile) a sweep repeats: plans are memoised and
# shared by batch sizes (simdl.strategies.build_plan), so the same walk recurs at each batch.
_HOST_ROWS: dict[tuple[int, int, int], tuple] = {}


def framework_host_rows(plan, table, profile: KernelProfile) -> tuple[tuple, tuple]:
    """:func:`_framework_host_rows`, memoised by identity (the inputs kept, so that their ids
    are not reused)."""
    key = (id(plan), id(table), id(profile))
    hit = _HOST_ROWS.get(key)
    if hit is not None and hit[0] is plan and hit[1] is table and hit[2] is profile:
        return hit[3]
    value = _framework_host_rows(plan, table, profile)
    if len(_HOST_ROWS) > 4096:
        _HOST_ROWS.clear()
    _HOST_ROWS[key] = (plan, table, profile, value)
    return value


def _framework_host_rows(plan, table, profile: KernelProfile) -> tuple[tuple, tuple]:
    """(forward, backward) host seconds per table row that the framework adds on a GPU rank.

    The plan's tasks are walked in order: a framework task's host time is spent before the
    next row the host issues (a forward run's first row, a backward run's last row), and time
    left after the last run is charged to the last row issued (the device then waits for it
    before the step's tail). Empty tuples where the plan has no framework work to price."""
    from ..strategies import registry

    kind = registry.of_plan(plan).gpu_framework
    if not kind:
        return (), ()
    prices = _prices(profile)
    py, cpp, light = prices
    n_rows = table.n_rows
    extra = {"fwd": np.zeros(n_rows), "bwd": np.zeros(n_rows)}
    tensors = _unit_tensors(plan, table) if kind == "per_unit" else {}
    regathered = {t.name.rpartition(":")[2] for t in plan.tasks if t.name.startswith(("copy_out:bwd:", "copy_in:bwd:"))}
    seen: set[tuple[str, str]] = set()
    pending = 0.0
    last: tuple[str, int] | None = None
    reducer = False
    for t in plan.tasks:
        if t.rows is None:
            reducer |= kind == "reducer" and t.collective == "all_reduce"
            pending += _task_host_s(
                t, kind, prices, tensors, len(table.params), bool(plan.details.get("gradient_as_bucket_view"))
            )
            continue
        direction = "fwd" if t.direction == "fwd" else "bwd"
        row = t.rows[0] if direction == "fwd" else t.rows[1] - 1
        if kind == "per_unit":
            unit = _unit_of_rows_task(t.name)
            if (direction, unit) not in seen:
                seen.add((direction, unit))
                n = tensors.get(unit, 1)
                # The unit's two hooks of this direction, and its reshard (after forward only
                # when it is gathered again for backward).
                resharded = direction == "bwd" or unit in regathered
                pending += 2 * light + (2 * n * light if resharded else 0.0)
        if row < n_rows and t.rows[1] > t.rows[0]:
            extra[direction][row] += pending
            pending = 0.0
            last = (direction, t.rows[0] if direction == "bwd" else t.rows[1] - 1)
    if last is not None:
        extra[last[0]][last[1]] += pending
    if kind == "reducer" and reducer:
        from ..strategies.rows import first_row_of_params

        for row in first_row_of_params(table):
            extra["bwd"][row] += light  # Reducer::autograd_hook, once per parameter
    if not (extra["fwd"].any() or extra["bwd"].any()):
        return (), ()
    return tuple(extra["fwd"].tolist()), tuple(extra["bwd"].tolist())
