"""The one way a benchmark or scenario starts Ray and Serve on this machine.

``LocalServe`` is a context manager: a Ray of its own (``address="local"``: never a test run's
or a user's cluster), optionally of several simulated nodes (``ray.cluster_utils``), Serve on
a free port, and the data path ``make serve-loadtest`` uses (Ray's HAProxy) or Serve's proxy.
Leaving it shuts all of it down, HAProxy's processes included, however the run ended.
``deploy`` serves an app's args from a Serve config and returns once connections reach every
ingress replica. A scenario that needs a whole launcher process of its own (a cluster to stop
under live calls) runs ``deployments.serve_local``, as ``make run`` does: ``ServeProcess``.
"""

import contextlib
import csv
import io
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import ray
import yaml
from ray import serve
from ray._common.utils import get_ray_address_file
from ray.cluster_utils import Cluster
from ray.serve.handle import DeploymentHandle

from deployments.app import build_app
from deployments.ports import free_port
from deployments.serve_local import HAPROXY_SWITCH, THROUGHPUT_SWITCH, HAProxyRun

LOCAL_CONFIG = Path(__file__).parents[2] / "cluster" / "local.yaml"
LOADTEST_CONFIG = Path(__file__).parents[2] / "cluster" / "loadtest.yaml"
HAPROXY_ROUTING_TIMEOUT_S = 60.0
READY_LINE = "Voice agent ready"
READY_TIMEOUT_S = 600.0


def app_config(config: Path) -> tuple[str, dict[str, Any]]:
    """The first application of a Serve config: its name and its args."""
    app = yaml.safe_load(config.read_text())["applications"][0]
    return app["name"], app.get("args", {})


def haproxy_servers_up() -> int:
    """Servers (ingress replicas) up in HAProxy's backends, the fallback proxy not counted."""
    url = f"http://127.0.0.1:{os.environ['RAY_SERVE_HAPROXY_STATS_PORT']}/stats;csv"
    with urllib.request.urlopen(url, timeout=5) as reply:
        rows = csv.DictReader(io.StringIO(reply.read().decode().lstrip("# ")))
        return sum(
            1
            for row in rows
            if row["pxname"] not in ("stats", "prometheus", "http_frontend")
            and row["svname"] not in ("FRONTEND", "BACKEND")
            and row.get("bck") == "0"
            and row.get("status", "").startswith("UP")
        )


def wait_for_haproxy(servers: int, timeout_s: float = HAPROXY_ROUTING_TIMEOUT_S) -> float:
    """Seconds until HAProxy routes to ``servers`` ingress replicas (its reload follows the
    deployment by a long poll and a health check, with no event to wait on: polled)."""
    started = time.monotonic()
    while True:
        try:
            if haproxy_servers_up() >= servers:
                return time.monotonic() - started
        except OSError:
            pass
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"HAProxy did not route to {servers} ingress replicas within {timeout_s:.0f} s")
        time.sleep(0.5)


class AddressFile:
    """``Cluster()`` writes its address to ``/tmp/ray/ray_current_cluster`` (where a bare
    ``ray.init()`` or ``ray status`` looks for a cluster) and its shutdown deletes the file:
    someone else's Ray on this machine would be found, or lost. Kept as it was found."""

    def __init__(self) -> None:
        self._path = Path(get_ray_address_file(None))
        self._content = self._path.read_text() if self._path.exists() else None

    def restore(self) -> None:
        if self._content is None:
            self._path.unlink(missing_ok=True)
        else:
            self._path.write_text(self._content)


class LocalServe:
    """Ray and Serve for one run; ``nodes`` > 1 simulates a cluster of that many nodes of
    ``num_cpus`` each; ``serve=False`` starts Ray alone."""

    def __init__(
        self,
        *,
        data_path: str = "proxy",
        num_cpus: int | None = 2,
        nodes: int = 1,
        proxy_location: str = "HeadOnly",
        dashboard: bool = False,
        serve: bool = True,
    ) -> None:
        self.data_path = data_path
        self.port = free_port()
        self.node_names: dict[str, str] = {}
        self._num_cpus = num_cpus
        self._nodes = nodes
        self._proxy_location = proxy_location
        self._dashboard = dashboard
        self._serve = serve
        self._haproxy: HAProxyRun | None = None
        self._cluster: Cluster | None = None
        self._address_file: AddressFile | None = None

    def __enter__(self) -> "LocalServe":
        # The environment is set before Ray starts, so every Ray process inherits it.
        if self.data_path == "haproxy":
            self._haproxy = HAProxyRun.configure(os.environ)  # with `make serve-loadtest`'s settings
        else:  # and Ray's default handles in every replica, whatever this environment said
            os.environ[HAPROXY_SWITCH] = os.environ[THROUGHPUT_SWITCH] = "0"
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        if self._nodes == 1:
            dashboard_port = free_port() if self._dashboard else None
            ray.init(
                address="local",
                num_cpus=self._num_cpus,
                log_to_driver=False,
                include_dashboard=self._dashboard,
                dashboard_port=dashboard_port,
            )
            self.node_names = {ray.get_runtime_context().get_node_id(): "head"}
            if self._haproxy is not None:
                self._haproxy.started(ray.get_runtime_context().get_node_id())
        else:
            self._address_file = AddressFile()
            self._cluster = Cluster(
                initialize_head=True, head_node_args={"num_cpus": self._num_cpus, "dashboard_port": free_port()}
            )
            self._address_file.restore()
            workers = [self._cluster.add_node(num_cpus=self._num_cpus) for _ in range(self._nodes - 1)]
            self._cluster.wait_for_nodes()
            head = self._cluster.head_node
            assert head is not None  # initialize_head=True
            self.node_names = {head.node_id: "head"} | {w.node_id: f"worker-{i + 1}" for i, w in enumerate(workers)}
            ray.init(address=self._cluster.address, log_to_driver=False)
        if self._serve:
            serve.start(proxy_location=self._proxy_location, http_options={"host": "127.0.0.1", "port": self.port})

    @property
    def url(self) -> str:
        """The server's ``ws://HOST:PORT/v1``."""
        return f"ws://127.0.0.1:{self.port}/v1"

    def deploy(self, args: dict[str, Any], name: str = "voice") -> float | None:
        """Serves the app with these args; through HAProxy, returns once it routes to every
        ingress replica (the seconds that took)."""
        serve.run(build_app(args), name=name, route_prefix="/")
        if self._haproxy is None:
            return None
        return wait_for_haproxy(int(args.get("ingress", {}).get("deployment", {}).get("num_replicas", 1)))

    def run(self, app: Any, name: str) -> DeploymentHandle:
        """Serves a bound deployment of one model without HTTP (a handler bench)."""
        return serve.run(app, name=name, route_prefix=None)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if ray.is_initialized():
            if self._serve:
                serve.shutdown()
            ray.shutdown()
        if self._cluster is not None:
            self._cluster.shutdown()
        if self._address_file is not None:
            self._address_file.restore()
        if self._haproxy is not None:
            self._haproxy.stop(10)


class ServeProcess:
    """One Ray cluster serving a config, started by ``make run``'s launcher in a process of
    its own (``environ`` added to ours), on a port of its own."""

    def __init__(self, config: Path, environ: dict[str, str], stop_within_s: float) -> None:
        self.port = free_port()
        self._stop_within_s = stop_within_s
        # RAY_ADDRESS=local: a cluster of its own, not the machine's recorded one.
        command = [sys.executable, "-m", "deployments.serve_local", str(config), "--port", str(self.port)]
        command += ["--data-path", "haproxy", "--stop-within", str(stop_within_s)]
        env = os.environ | {"RAY_ADDRESS": "local"} | environ
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        for line in self.process.stdout:  # the launcher prints its ready line once /readyz is 200
            if READY_LINE in line:
                return
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"the cluster on port {self.port} did not become ready")

    def stop(self) -> float:
        """Stops it as its launcher does on SIGTERM; returns how long that took."""
        started = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(self._stop_within_s + 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return round(time.monotonic() - started, 1)


@contextlib.contextmanager
def served(url: str | None, config: Path, args: dict[str, Any] | None = None) -> Iterator[str]:
    """The server at ``url``, or, without one, ``config``'s app served for the run (with
    ``args`` in place of its own, where given): its ``ws://HOST:PORT/v1``."""
    if url is not None:
        yield url
        return
    with LocalServe(num_cpus=None) as local:
        name, config_args = app_config(config)
        local.deploy(config_args if args is None else args, name)
        yield local.url
