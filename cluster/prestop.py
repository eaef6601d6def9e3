"""The chart's ``preStop`` hook for worker pods: hand the node's work over before Kubernetes
stops its Ray node.

Kubernetes runs the hook, then sends the pod SIGTERM, then SIGKILL after the pod's
``terminationGracePeriodSeconds``; without it, Ray's processes die with the pod and every
call on an ingress replica there is cut (1006). The hook asks Ray to drain the node (``ray
drain-node``, with the deadline): Serve starts replacements of the node's replicas elsewhere
and marks these ``PENDING_MIGRATION``; an ingress replica sees that and drains its calls
(``session.draining``, then 1012 after ``drain_s``, for their clients to resume on another
replica); Serve stops each replica once its replacement runs and its requests have ended.
The hook returns when no Serve replica is left on the node, or at the deadline.

``python -m cluster.prestop --deadline-s 330`` (the chart sets it from the ingress's
``graceful_shutdown_timeout_s``).
"""

import argparse
import subprocess
import sys
import time

import ray
from ray.util.state import list_actors

POLL_S = 1.0
REPLICA_PREFIX = "ServeReplica:"


def replicas_on(node_id: str) -> list[str]:
    """The Serve replicas alive on the node (their actor class names)."""
    alive = list_actors(
        # The cluster this process joined, not whichever one /tmp/ray records as current.
        address=ray.get_runtime_context().gcs_address,
        filters=[("node_id", "=", node_id), ("state", "=", "ALIVE")],
        limit=10_000,
    )
    return [actor.class_name for actor in alive if actor.class_name.startswith(REPLICA_PREFIX)]


def drain(node_id: str, deadline_s: int, address: str) -> None:
    """Ask Ray's GCS to drain the node (Ray's own command: the autoscaler's call)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "drain-node",
            f"--address={address}",
            f"--node-id={node_id}",
            "--reason=DRAIN_NODE_REASON_PREEMPTION",
            "--reason-message=the pod is being stopped (preStop)",
            f"--deadline-remaining-seconds={deadline_s}",
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.prestop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--deadline-s", type=int, required=True, help="give up waiting after this long")
    parser.add_argument("--node-id", help="the Ray node to drain (default: this pod's)")
    parser.add_argument("--address", default="auto", help="the Ray cluster (default: this pod's)")
    args = parser.parse_args(argv)
    if args.deadline_s <= 0:
        parser.error("--deadline-s must be positive")
    started = time.monotonic()
    ray.init(address=args.address, log_to_driver=False, configure_logging=False)
    try:
        node_id = args.node_id or ray.get_runtime_context().get_node_id()
        drain(node_id, args.deadline_s, ray.get_runtime_context().gcs_address)
        while (left := replicas_on(node_id)) and time.monotonic() - started < args.deadline_s:
            time.sleep(POLL_S)  # Serve says nothing to an outside process: the node is asked
    finally:
        ray.shutdown()
    print(f"prestop: node {node_id} drained; {len(left)} Serve replicas left after {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
