"""Deployment handles on the transport this replica's Serve is configured for.

Serve pickles a handle with the options of the process that built the application, and a
handle's default transport (Ray actor calls, or gRPC in Ray's high-throughput mode,
``RAY_SERVE_THROUGHPUT_OPTIMIZED``) is read when Ray is imported. ``make run`` builds the app
in a launcher that imports Ray before it sets the data path's environment, so the ingress
would get actor-call handles on a cluster in gRPC mode: it re-makes them here, in the replica,
whose environment is the cluster's.
"""

from typing import Any

from ray.serve._private.constants import RAY_SERVE_USE_GRPC_BY_DEFAULT
from ray.serve._private.handle_options import DynamicHandleOptions
from ray.serve.handle import DeploymentHandle


def on_cluster_transport(handle: DeploymentHandle[Any]) -> DeploymentHandle[Any]:
    return handle.options(_by_reference=not RAY_SERVE_USE_GRPC_BY_DEFAULT)


def transport_of(handle: DeploymentHandle[Any]) -> str:
    """``grpc`` or ``ray`` (actor calls): what this handle's calls go over, for ``/stats``."""
    options = handle.handle_options
    assert isinstance(options, DynamicHandleOptions)  # what Serve makes a handle with
    return "ray" if options._by_reference else "grpc"  # noqa: SLF001 (Serve has no public getter)
