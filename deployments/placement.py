"""Where Ray put a replica, as the replica itself sees it: its node and its GPUs.

Every deployment of the app answers ``placement()``, so that a cluster's GPU placement can be
checked from outside (the simulated multi-node test, or an operator on a real cluster) through
Serve's own handles rather than Ray's internals.
"""

from dataclasses import dataclass

import ray
from ray import serve


@dataclass(frozen=True)
class ReplicaPlacement:
    deployment: str
    replica: str
    node_id: str
    gpu_ids: list[str]
    """``ray.get_gpu_ids()``: the GPUs Ray assigned to this replica on its node."""


def replica_placement(_deployment: object) -> ReplicaPlacement:
    """A deployment method (``placement = replica_placement`` in the class body)."""
    context = serve.get_replica_context()
    return ReplicaPlacement(
        deployment=context.deployment,
        replica=context.replica_id.unique_id,
        node_id=ray.get_runtime_context().get_node_id(),
        gpu_ids=[str(gpu) for gpu in ray.get_gpu_ids()],
    )
