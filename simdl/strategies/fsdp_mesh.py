"""FSDP2's device mesh on an allocation: how many ranks a unit is sharded over, how many
replicas hold each shard, and the process groups (shard, replicate, world) the plan's
collectives run in (simdl.strategies.fsdp for the sharding strategies).
"""

from __future__ import annotations

from ..cluster import Cluster
from ..errors import SimdlError
from .config import StrategyConfig
from .plan import Group


def mesh(cluster: Cluster, config: StrategyConfig) -> tuple[int, int, dict[str, Group]]:
    """(shard size, replicas, process groups) of the sharding on this allocation."""
    sharding = config.sharding
    world = cluster.gpus
    world_scope = "world" if cluster.nodes > 1 else "intra"
    shard_scope = replicate_scope = world_scope
    if sharding == "hybrid":
        G = cluster.gpus_per_node
        shard_size = config.shard_group or G
        if shard_size * cluster.nodes != world and config.shard_group is None:
            raise SimdlError(
                f"hybrid sharding needs the same GPU count on every node; got {world} GPUs on {cluster.nodes} nodes"
            )
        if world % shard_size or G % shard_size:
            raise SimdlError(
                f"shard group {shard_size} must divide the GPUs of a node ({G}) and the world ({world}): "
                "FSDP2's mesh puts each shard group's ranks on one node"
            )
        replicas = world // shard_size
        # The mesh is row-major (torch.distributed.device_mesh): a shard group is shard_size
        # consecutive ranks of one node; a replicate group takes one rank of each shard group.
        shard_scope = "intra"
        replicate_scope = "intra" if cluster.nodes == 1 else "inter" if shard_size == G else "world"
    elif sharding == "none":
        shard_size, replicas = 1, world
    else:
        shard_size, replicas = world, 1
    groups = {
        "world": Group("world", world, world_scope),
        "shard": Group("shard", shard_size, shard_scope),
        "replicate": Group("replicate", replicas, replicate_scope),
    }
    return shard_size, replicas, groups
