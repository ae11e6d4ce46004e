"""The parameter server's closed form: transfers, server updates, a shared host's cores, staleness.

Both engines price a PS iteration's parts with these functions: the analytic engine
combines them in :func:`ps_timing` (the PS registry entry's ``evaluate`` hook), the
simulator plays the same transfers and updates on its timeline (simdl.sim.ps).
"""

from __future__ import annotations

import math

from ..cluster import Cluster
from ..cluster.allocator import host_mmap_threshold
from ..cluster.spec import PSServers
from ..errors import SimdlError
from ..hosts import host_for
from ..result import Staleness
from ..strategies.plan import PSPlan
from .rates import Rates, host_rates
from .step import bytes_sent
from .tasks import compute_split, compute_task_time, mapped_bytes


def ps_servers(cluster: Cluster) -> PSServers:
    """The cluster's parameter-server section (dedicated server nodes, or the colocated
    servers simdl.cluster.ps_placement derives); a one-line error where it has none."""
    ps = cluster.spec.ps_servers
    if ps is None:
        raise SimdlError(
            f"cluster {cluster.spec.name!r} has no parameter-server section (ps_servers) to price a "
            "PS plan on; accepted: a cluster with one (e.g. a10g-ps), or --ps-placement colocated"
        )
    return ps


def _server_bandwidth(cluster: Cluster, plan: PSPlan) -> float:
    """Bytes/s per direction into one shard's server: shards spread over the server nodes."""
    ps = ps_servers(cluster)
    nodes_used = min(plan.servers, ps.count)
    return ps.nic_bandwidth.value * nodes_used / plan.servers


def _worker_node_bandwidth(cluster: Cluster) -> float:
    """Bytes/s per direction that leave a worker node; a single-node preset's workers reach
    the server over their PCIe links (or shared memory for cpu-local)."""
    bw = cluster.node_network_bandwidth
    if math.isinf(bw):
        link = cluster.spec.intra_node
        per_gpu = link.bandwidth.value if link.link in ("pcie", "shm") else link.pcie_bandwidth.value
        bw = per_gpu * cluster.gpus_per_node
    return bw


def ps_transfer_times(cluster: Cluster, plan: PSPlan, concurrent: int) -> tuple[float, float]:
    """(push, pull) seconds when ``concurrent`` workers transfer at once.

    Each server shard receives 1/S of every push through its NIC (an incast of
    ``concurrent`` flows shares it); the workers of one node share their node's NICs.
    Whichever side is slower sets the time. Pulls are the same in the other direction
    (NICs are full duplex).

    A profile calibrated over the PS's own transport (simdl calibrate's RPC measurements,
    simdl.calibrate.ps) adds what that transport costs besides the link: the worker side is
    what one worker's transfer reaches alone (``ps_servers.worker_link_Gb_per_s``: on one
    host the processes, not a shared NIC, set it); a message lands in a freshly allocated
    buffer whose pages above the mmap threshold fault in (``receive_fault_ns_per_byte``,
    the message's tensors above the threshold); and the server copies a pull's answer
    before sending it (``response_copy_ns_per_byte``, the copy's fresh pages fault too).
    Each process faults and copies its own buffers, in parallel with the others.
    """
    server_bw = _server_bandwidth(cluster, plan)
    node_bw = _worker_node_bandwidth(cluster)
    workers_per_node = min(concurrent, cluster.gpus_per_node)
    latency = cluster.ps_latency()
    ps = ps_servers(cluster)

    def one_way(nbytes: float) -> float:
        server_side = concurrent * nbytes / plan.servers / server_bw
        if ps.worker_link is not None:
            worker_side = nbytes / ps.worker_link.value
        else:
            worker_side = workers_per_node * nbytes / node_bw
        return max(server_side, worker_side) + latency

    push_extra, pull_extra = ps_transfer_extras(cluster, plan)
    return one_way(plan.push_bytes) + push_extra, one_way(plan.pull_bytes) + pull_extra


def ps_transfer_extras(cluster: Cluster, plan: PSPlan) -> tuple[float, float]:
    """(push, pull) seconds a calibrated PS transport adds to the link's time (see
    ps_transfer_times); (0, 0) for a profile without them."""
    ps = ps_servers(cluster)
    push = pull = 0.0
    if ps.receive_fault is not None:
        fresh = _fresh_message_bytes(cluster, plan)  # all shards' messages
        # A shard receives its part of a push; for a pull it copies its part of the answer
        # into a fresh buffer, and the worker receives every shard's part.
        push += fresh / plan.servers * ps.receive_fault.value
        pull += (fresh / plan.servers + fresh) * ps.receive_fault.value
    if ps.response_copy is not None:
        pull += plan.pull_bytes / plan.servers * ps.response_copy.value
    return push, pull


def _fresh_message_bytes(cluster: Cluster, plan: PSPlan) -> float:
    """Bytes of the model's tensors above the mmap threshold: the pages a freshly allocated
    buffer for them faults in (simdl.analytic.costs.mapped_bytes)."""
    return mapped_bytes(getattr(plan.facts, "param_tensor_bytes", ()), host_mmap_threshold(cluster))


def ps_update_time(cluster: Cluster, plan: PSPlan, grads_aggregated: int) -> float:
    """Server seconds to aggregate ``grads_aggregated`` gradients, apply one update and
    serve the pulls of those workers (one :func:`ps_snapshot_time` each).

    The update streams the optimizer's passes over the shard through host memory
    (see simdl.strategies.optimizer_step), and so does the mean of several gradients
    (:func:`ps_aggregate_bytes`). On a host whose allocator maps large buffers fresh
    (``host.page_fault_ns_per_byte``), every received gradient tensor above the mmap
    threshold faults its pages in (unless the transfer prices it,
    ``ps_servers.receive_fault_ns_per_byte``: ps_transfer_times); the sum is kept from round
    to round and does not. Shards update in parallel on their own servers.
    """
    nbytes = (plan.update_bytes + ps_aggregate_bytes(plan, grads_aggregated)) / plan.servers
    t = nbytes / cluster.ps_update_bandwidth()
    host = host_rates(cluster)
    if host and ps_servers(cluster).receive_fault is None:
        t += grads_aggregated * _fresh_shard_bytes(plan, host) * host["page_fault_per_byte"]
    return t + grads_aggregated * ps_snapshot_time(cluster, plan)


def ps_aggregate_bytes(plan: PSPlan, grads_aggregated: int) -> float:
    """Bytes all shards stream through memory to average ``grads_aggregated`` gradients into
    one (0 for one gradient, which is applied as it arrived).

    As validate/train.py's ps-sync server sums: the first gradient is copied into the sum
    (read + write), each later one added to it (``add_``: read both, write one), and the sum
    divided by their count (``div_``: read + write): 2 + 3 (k - 1) + 2 gradient sizes. The
    update bandwidth that prices them was measured on the optimizer's own element-wise
    passes (simdl.calibrate.ps). Measured for VGG16 at 4 workers on the Emerald Rapids
    (cpu-xeon-emr-x4, the server's event log, validate/results/xeon-emr-x4-sync-events/):
    copy 0.08, add_ 3 x 0.07, div_ 0.04 CPU-s, 0.34 CPU-s in all.
    """
    k = grads_aggregated
    if k <= 1:
        return 0.0
    return (2 + 3 * (k - 1) + 2) * plan.push_bytes


def ps_snapshot_time(cluster: Cluster, plan: PSPlan) -> float:
    """Server seconds to serve one pull: a copy of the shard taken under the server's lock so
    that the parameters and their version agree (validate/train.py ``_snapshot``), read +
    write, its fresh buffers faulting in on hosts that map them (see ps_update_time)."""
    t = 2.0 * plan.pull_bytes / plan.servers / cluster.ps_update_bandwidth()
    host = host_rates(cluster)
    if host:
        t += _fresh_shard_bytes(plan, host) * host["page_fault_per_byte"]
    return t


def _fresh_shard_bytes(plan: PSPlan, host: dict) -> float:
    """Bytes of one shard's copy that the allocator maps fresh (tensors above the threshold)."""
    return mapped_bytes(getattr(plan.facts, "param_tensor_bytes", ()), host["mmap_threshold"]) / plan.servers


def shared_host_bound(
    cluster: Cluster, plan: PSPlan, compute: float, transfers: float, server_per_round: float
) -> float:
    """Least seconds per iteration when the workers and the server share one host's cores
    (``shared_device`` clusters, cpu-local: validate starts the N workers and the server on
    one machine); 0 on clusters whose workers have devices of their own.

    In one iteration of every worker, the host's K cores (``host.cpu_cores``) run:
    - each worker's compute. A shared device's compute times were measured with every rank
      computing at once and are scaled to this prediction's share of it (costs._measured), so
      ``compute`` wall seconds keep min(1, K/N) of a core busy: each rank is one thread
      (torchrun sets OMP_NUM_THREADS=1; validate and calibration set_num_threads(1));
    - each worker's push and pull (``transfers``: their seconds alone). A transfer keeps one
      core busy for its duration:
      TensorPipe-uv push + pull of 16 to 256 MiB between two processes on this host took
      1.01 to 1.02 CPU-seconds (both processes) per wall second (benchmarks/ps_transfer_cpu.py);
    - the server's updates and snapshots (``server_per_round``): one thread streaming memory,
      its seconds are CPU seconds.
    No resource is busy more than all the time (operational analysis, the utilisation law:
    Lazowska et al., "Quantitative System Performance", 1984, ch. 3 and 5), so the iteration
    takes at least that CPU time over K: the server's work is not free for the workers.
    """
    if not host_for(cluster).shares_cores() or cluster.nodes != 1:
        return 0.0
    cores = float(cluster.spec.host.cpu_cores.value)
    worker_cpu = compute * min(1.0, cores / cluster.gpus_per_node) + transfers
    return (plan.workers * worker_cpu + server_per_round) / cores


def ps_host_floor(cluster: Cluster, plan: PSPlan, compute: float) -> float:
    """:func:`shared_host_bound` with the server's work per round of ``plan``'s strategy: one
    update of the N gradients' mean (ps-sync), or N updates of one (async and SSP, a bound
    of 0 included). Both engines floor a PS step at it; 0 where workers have devices of
    their own."""
    N = plan.workers
    push1, pull1 = ps_transfer_times(cluster, plan, 1)
    server = ps_update_time(cluster, plan, N) if plan.synchronous else N * ps_update_time(cluster, plan, 1)
    return shared_host_bound(cluster, plan, compute, push1 + pull1, server)


def async_staleness(workers: int, think: float, apply: float, snapshot: float) -> float:
    """Mean staleness of an asynchronous update in steady state.

    Over one of its cycles a worker sees each of the N-1 others apply one update (equal
    speeds); an update counts unless it is applied between the worker's own update and the
    snapshot its next pull reads. The pull is a request of its own after the push is answered
    (validate/train.py), and the server's lock serves updates and snapshots one at a time, so
    the updates queued at the lock when the pull arrives are the ones it skips. By the arrival
    theorem the pull finds the server as the other N-1 workers alone keep it; their mean queue
    (waiting and in service) comes from exact mean value analysis of the closed network of
    ``think`` seconds away from the server and ``apply + snapshot`` seconds at it (Reiser and
    Lavenberg, "Mean-Value Analysis of Closed Multichain Queuing Networks", JACM 1980), of
    which the share ``apply / (apply + snapshot)`` are updates. With a server that is never
    busy this is N-1.
    """
    demand = apply + snapshot
    if demand <= 0:
        return float(workers - 1)
    queue = 0.0
    for n in range(1, workers):
        residence = demand * (1.0 + queue)
        queue = n * residence / (max(think, 0.0) + residence)
    return float(workers - 1) - queue * apply / demand


def ps_timing(workload, cluster, plan: PSPlan, rows, rates: Rates):
    """The PS spec's closed form (simdl.strategies.ps): one worker's iteration, as the analytic
    engine's timing tuple (iteration, compute, comm, any_busy, bytes, staleness, kinds, added)."""
    # Forward, backward, activation checkpointing's recomputed forward, and loading the
    # pulled parameters into the model (the worker plan's tasks).
    durations = [compute_task_time(t, rows, rates) for t in plan.worker_tasks]
    compute = sum(durations)
    N = plan.workers
    barrier_ssp = not plan.synchronous and plan.staleness_bound == 0
    if plan.synchronous or barrier_ssp:
        # A barrier per step. ps-ssp with a bound of 0 is one too: a worker's pull waits until
        # every worker still training has pushed the same step (validate/train.py ``_ssp_ok``;
        # Ho et al., NIPS 2013). It differs from ps-sync in the server's work: the N gradients
        # are applied one by one as they arrive, each with its own update (N x the
        # one-gradient update, snapshots included), and the j-th update applied in a round has
        # missed the j - 1 before it: mean staleness (N - 1) / 2. Identical workers push
        # together, so in both the pushes and the released pulls share the server's link.
        # (A bound >= 1 never binds for identical workers -- their clocks stay within one
        # step -- so it runs as async below; the SimPy engine draws step-to-step jitter and
        # prices the holds it causes.)
        push, pull = ps_transfer_times(cluster, plan, N)
        update = N * ps_update_time(cluster, plan, 1) if barrier_ssp else ps_update_time(cluster, plan, N)
        iteration = max(compute + push + update + pull, ps_host_floor(cluster, plan, compute))
        s = (N - 1) / 2.0 if barrier_ssp else 0.0
        staleness = Staleness(mean=s, p50=s, p99=float(N - 1), max=float(N - 1)) if barrier_ssp else Staleness()
    else:
        # Alone, a worker cycles in compute + push + update + pull. With N workers the
        # server's NIC (per direction) and CPU are shared: each update demands D seconds
        # of the busiest server resource, so updates cannot come faster than 1/D.
        # Throughput is bounded by both (operational analysis, asymptotic bounds:
        # Lazowska et al., "Quantitative System Performance", 1984, ch. 5), and on a shared
        # host by its cores, which the server's work takes from the workers' compute.
        push1, pull1 = ps_transfer_times(cluster, plan, 1)
        update1 = ps_update_time(cluster, plan, 1)
        cycle = compute + push1 + update1 + pull1
        demand = max(plan.push_bytes / plan.servers / _server_bandwidth(cluster, plan), update1)
        host = ps_host_floor(cluster, plan, compute)
        iteration = max(cycle, N * demand, host)
        push, pull, update = push1, pull1, update1
        snapshot = ps_snapshot_time(cluster, plan)
        # Away from the server a worker computes and transfers (slowed down on a shared host).
        s = async_staleness(N, max(cycle, host) - update1, update1 - snapshot, snapshot)
        if plan.staleness_bound is not None:
            s = min(s, float((plan.staleness_bound + 1) * (N - 1)))
        # A mean only: the closed form gives no distribution, so no percentiles are reported.
        staleness = Staleness(mean=s, p50=None, p99=None, max=None)
    comm = push + pull
    any_busy = compute  # the worker GPU runs no communication kernels in PS mode
    kinds = compute_split(plan.worker_tasks, rows, durations)
    return iteration, compute, comm, any_busy, bytes_sent(plan, cluster), staleness, kinds, {}
