"""Parameter server: workers compute gradients, push them to server shards, pull parameters.

The classic design (Li et al., "Scaling Distributed Machine Learning with the Parameter
Server", OSDI 2014), as study 1 ran it with one CPU server node and GPU workers:
- every worker holds a full replica, runs forward and backward on its own batch,
  pushes its gradients (fp32) to the servers and pulls the current parameters;
- the parameters are split evenly over ``ps_servers`` shards, each on its own server
  with its own NIC; the server applies the optimizer update on the CPU;
- ``ps-sync``: a barrier per iteration; the servers average the N pushes and apply
  one update, then every worker pulls.
- ``ps-async``: each push is applied on arrival (Hogwild-style); a worker's update is
  stale by the number of updates other workers applied between its pull and its push.
- ``ps-ssp``: stale-synchronous parallel (Ho et al., NIPS 2013): asynchronous, but a
  worker more than ``staleness_bound`` iterations ahead of the slowest waits.
"""

from __future__ import annotations

from ..cluster import Cluster
from ..errors import SimdlError
from ..workload.workload import Workload
from .config import StrategyConfig
from .optimizer_step import host_update_bytes
from .plan import COMPUTE, PSPlan, Task
from ..memory.rowtree import add_recompute


def build_plan(workload: Workload, cluster: Cluster, config: StrategyConfig) -> PSPlan:
    if cluster.spec.ps_servers is None:
        raise SimdlError(
            f"strategy {config.name!r} needs a cluster with parameter-server nodes; "
            f"cluster {cluster.spec.name!r} has none (try --cluster a10g-ps)"
        )
    table = workload.table
    n = table.n_rows
    sizes = tuple(float(p.numel * 4) for p in table.params)  # fp32 parameter tensors
    # The pulled parameters arrive in freshly allocated receive buffers and are copied into
    # the model's own (validate/train.py: p.copy_(v) per tensor; a GPU worker copies them in
    # from the host). Read + write of every byte, one call per tensor; on host-memory
    # devices the receive buffers above the allocator's mmap threshold fault in.
    tasks_list = [Task("load_params", COMPUTE, "fwd", bytes=2.0 * workload.param_bytes, kernels=len(sizes),
                       allocs=sizes),
                  Task("forward", COMPUTE, "fwd", rows=(0, n), direction="fwd", deps=(0,))]

    def add(task: Task) -> int:
        tasks_list.append(task)
        return len(tasks_list) - 1

    pre = add_recompute(workload, add, (1,), 0, n)  # activation checkpointing, if on
    add(Task("backward", COMPUTE, "bwd", deps=pre, rows=(0, n), direction="bwd"))
    tasks = tuple(tasks_list)
    grads = workload.param_bytes  # fp32 gradients, one copy per push
    return PSPlan(
        strategy=config.name,
        worker_tasks=tasks,
        workers=cluster.gpus,
        servers=config.ps_servers,
        push_bytes=grads,
        pull_bytes=workload.param_bytes,
        update_bytes=host_update_bytes(workload.optimizer, workload.param_bytes),
        staleness_bound=config.staleness_bound if config.name == "ps-ssp" else None,
        details={"comm_buffer_bytes": grads, "param_tensor_bytes": sizes},
    )
