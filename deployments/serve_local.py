"""Serve a config file on this machine, say when it is ready, and stop it promptly.

``make run`` uses this instead of ``serve run``, which on Ctrl-C shuts Serve down by killing
its HTTP proxy at once (open sessions see 1006, not a close) and then stops each replica and
Ray's processes one after another (13 s here, vLLM's engine taking 5 s of it). Here Ctrl-C
(or SIGTERM) first deletes the applications with the proxy still up, so each ingress closes
its sessions with 1001; then Ray is shut down; then whatever of this process tree is still
alive (vLLM engine processes outlive their replica) is killed, and so is every HAProxy
process of this launch (Ray starts them, and can leave them running, port held, once their
manager actor is gone: docs/haproxy.md), by a reaper process that also does it if this one
is killed outright. All within ``--stop-within`` seconds, the last step at the deadline
whatever happened before it; a second Ctrl-C skips the waiting.

``--data-path`` picks what carries the WebSockets: ``haproxy`` (the default) has Ray run an
HAProxy in front of the ingress replicas, which serve HTTP themselves ("direct ingress");
``proxy`` is Serve's Python proxy, every message relayed by an actor call. The HAProxy
settings are environment variables that every Ray process must see, so they are set here
before ``ray.init()`` starts this launcher's own cluster (explicit ones in the environment
win, except the on/off switch itself, which follows ``--data-path``).

The ready line is printed once ``/readyz`` answers 200: every model deployment answers, not
merely the ingress.
"""

import argparse
import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import psutil
import ray
import yaml
from ray import serve

from deployments.config import AppConfig, IngressConfig
from deployments.ports import free_port

READY_POLL_S = 1.0
INGRESS_ACTOR = "#RealtimeIngress#"
DATA_PATHS = ("haproxy", "proxy")
HAPROXY_SWITCH = "RAY_SERVE_ENABLE_HA_PROXY"
THROUGHPUT_SWITCH = "RAY_SERVE_THROUGHPUT_OPTIMIZED"
HAPROXY_CONFIG = "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="a Serve config file (cluster/local.yaml)")
    parser.add_argument("--port", type=int, help="HTTP port (default: the config's)")
    parser.add_argument(
        "--data-path",
        choices=DATA_PATHS,
        default="haproxy",
        help="what carries the WebSockets: Ray's HAProxy (default) or Serve's Python proxy",
    )
    parser.add_argument("--ready-timeout", type=float, default=900.0)
    parser.add_argument("--stop-within", type=float, default=12.0, help="seconds from Ctrl-C to the last process")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    http_options = dict(config.get("http_options", {}))
    if args.port is not None:
        http_options["port"] = args.port
    port = http_options.get("port", 8000)

    stop = threading.Event()
    drain_hold_s = max(
        ingress_drain_hold_s(AppConfig.model_validate(app.get("args", {})).ingress) for app in config["applications"]
    )
    haproxy = HAProxyRun.configure(os.environ, drain_hold_s) if args.data_path == "haproxy" else None
    if haproxy is None:  # Serve's proxy with Ray's default handles, whatever the environment says
        os.environ[HAPROXY_SWITCH] = os.environ[THROUGHPUT_SWITCH] = "0"
    ray.init()  # a cluster of our own: its processes inherit os.environ as set above
    if haproxy is not None:
        haproxy.started(ray.get_runtime_context().get_node_id())
    # After ray.init(): its core worker installs a SIGTERM handler of its own that aborts
    # the process (exit -6), which would leave the sessions unclosed and HAProxy running.
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    serve.start(proxy_location=config.get("proxy_location", "HeadOnly"), http_options=http_options)
    apps = config["applications"]
    threading.Thread(target=_deploy, args=(apps,), daemon=True).start()
    threading.Thread(target=_announce_when_ready, args=(port, args.ready_timeout, stop), daemon=True).start()
    stop.wait()
    _stop(apps, args.stop_within, stop, haproxy)


DRAIN_CLOSE_S = 2.0
"""After a drain's 1012s are sent: for the closing handshakes to finish."""


def ingress_drain_hold_s(ingress: IngressConfig) -> float:
    """How long an ingress replica that Serve stops must keep its HTTP server behind HAProxy:
    its drain (``drain_s`` from the first look that sees the stop, within ``shutdown_poll_s``)
    and the closes. Ray's default is 30 s, whatever the drain: a longer drain (the chart's
    300 s) was cut there, and ours of 2.5 s cut every drain short, with the answers in flight
    (docs/bench/notes/resume.md, "The drain fix")."""
    return ingress.drain_s + ingress.shutdown_poll_s + DRAIN_CLOSE_S


class HAProxyRun:
    """The HAProxy settings of one launch, and the reaper of its HAProxy processes.

    Ray's HAProxyManager actor starts ``haproxy -db -f <dir>/<node id>/haproxy.cfg`` (a new
    process on every reload, the old one draining) and kills them when Serve shuts down
    gracefully, or Ray's raylet does, with the actor's process group; a raylet that dies
    first, or this launcher killed, leaves them running, port held. Every file path Ray gives
    HAProxy is put under a directory of this launch, so its processes are those whose command
    line names a file in it, whoever their parent is by then; a reaper process, started before
    Ray, kills them once this process closes its pipe, or ends however it ends."""

    def __init__(self, directory: Path, owned: bool) -> None:
        self.directory = directory
        self.owned = owned  # created here, so removed at the end
        read_end, self._pipe = os.pipe()  # not inherited by Ray's processes: only we hold it
        self.reaper = subprocess.Popen(
            [sys.executable, "-c", REAPER, str(directory), "owned" if owned else "given"],
            stdin=read_end,
            start_new_session=True,  # no Ctrl-C from the terminal: it must outlive us
        )
        os.close(read_end)

    @classmethod
    def configure(cls, environ: MutableMapping[str, str], drain_hold_s: float | None = None) -> "HAProxyRun":
        """The HAProxy settings in ``environ``; ``drain_hold_s``: how long a stopped ingress
        replica keeps its HTTP server (default: :func:`ingress_drain_hold_s` of the
        ingress's defaults)."""
        if drain_hold_s is None:
            drain_hold_s = ingress_drain_hold_s(IngressConfig())
        environ[HAPROXY_SWITCH] = "1"
        if environ.get(HAPROXY_CONFIG):
            run = cls(Path(environ[HAPROXY_CONFIG]).parent, owned=False)
        else:  # under /tmp: the admin and metrics sockets' paths must stay under 108 bytes
            run = cls(Path(tempfile.mkdtemp(prefix="s2s-haproxy-", dir="/tmp")), owned=True)
            environ[HAPROXY_CONFIG] = str(run.directory / "haproxy.cfg")
        defaults = {
            "RAY_SERVE_HAPROXY_SOCKET_PATH": str(run.directory / "admin.sock"),
            "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(run.directory),
            "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(run.directory / "server-state"),
            "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": str(run.directory / "metrics.sock"),
            # One thread carries hundreds of sessions; more only compete with the models here.
            "RAY_SERVE_HAPROXY_NBTHREAD": "1",
            # Ray's high-throughput mode, which its docs pair with HAProxy: handle calls go to
            # the replicas over gRPC instead of Ray actor calls, and user code and the router
            # share the replica's event loop (300 load-test sessions: voice-to-voice p50
            # 4.2 s -> 1.5 s on this machine; docs/bench/README.md).
            THROUGHPUT_SWITCH: "1",
            # Fixed by default (8500, 9500, 9101, 8404): a second launch would fail to bind.
            "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(free_port()),
            "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(free_port()),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
            "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
            # How long an ingress replica told to stop keeps its HTTP server; then the server
            # stops and cuts every WebSocket still open (1012, with any answer in flight):
            # the ingress's whole drain must fit in it (ingress_drain_hold_s).
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(drain_hold_s),
        }
        for name, value in defaults.items():
            environ.setdefault(name, value)
        return run

    def started(self, node_id: str) -> None:
        """Ray runs on ``node_id``: its HAProxy files are in ``<directory>/<node_id>/``, all
        the reaper may touch in a directory that this launch did not create."""
        os.write(self._pipe, node_id.encode())

    def stop(self, timeout_s: float) -> None:
        """Have the reaper kill them now, and wait (up to ``timeout_s``) until it has: the
        port is free then."""
        os.close(self._pipe)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.reaper.wait(timeout_s)


REAPER = """\
import os, shutil, sys, time
import psutil

directory, owned = sys.argv[1], sys.argv[2] == "owned"
node_id = sys.stdin.buffer.read().decode()  # returns at EOF: the launcher closed it, or ended
if owned or node_id:
    prefix = os.path.join(directory, node_id, "")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        processes = psutil.process_iter(["cmdline"])
        ours = [p for p in processes if any(a.startswith(prefix) for a in p.info["cmdline"] or ())]
        if not ours:
            break
        for process in ours:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(ours, timeout=max(0.0, deadline - time.monotonic()))
if owned:
    shutil.rmtree(directory, ignore_errors=True)
"""
"""Run as a process of its own: stdin is the read end of the launcher's pipe."""


def _deploy(apps: list[dict[str, Any]]) -> None:
    for app in apps:
        module, _, attribute = app["import_path"].partition(":")
        builder = getattr(importlib.import_module(module), attribute)
        serve.run(builder(app.get("args", {})), name=app["name"], route_prefix=app.get("route_prefix", "/"))


def _announce_when_ready(port: int, timeout_s: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + timeout_s
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as reply:
                if reply.status == 200:
                    print(
                        f"\n  Voice agent ready: ws://127.0.0.1:{port}/v1/realtime"
                        f"\n  Talk to it in a browser: http://127.0.0.1:{port}/\n",
                        flush=True,
                    )
                    return
        except (urllib.error.URLError, OSError):
            pass
        stop.wait(READY_POLL_S)  # polling a server that has no readiness event to wait on
    if not stop.is_set():
        print(f"the app did not become ready on port {port} within {timeout_s:.0f} s", flush=True)


def _stop(apps: list[dict[str, Any]], within_s: float, stop: threading.Event, haproxy: HAProxyRun | None) -> None:
    started = time.monotonic()
    ours = psutil.Process().children(recursive=True)  # now: vLLM's engines are orphaned later
    print("stopping: closing sessions (Ctrl-C again to skip the wait)", flush=True)
    stop.clear()
    close_by = started + within_s / 2
    for app in apps:  # the proxy stays up: each ingress sees its app deleted and closes with 1001
        threading.Thread(target=serve.delete, args=(app["name"],), daemon=True).start()
    # Sets `stop` once no ingress replica is left; waited for here only until close_by (a
    # call to Ray can block for a minute when its GCS is gone, as after a SIGTERM to the
    # whole process group).
    threading.Thread(target=_set_when_ingress_gone, args=(stop,), daemon=True).start()
    stop.wait(max(0.0, close_by - time.monotonic()))
    stop.set()  # no more calls to Ray from that thread: they would fail once it is shut down
    shutdown = threading.Thread(target=ray.shutdown, daemon=True)
    shutdown.start()
    shutdown.join(max(0.0, started + within_s - 1 - time.monotonic()))
    reaper = haproxy.reaper.pid if haproxy is not None else None
    for process in ours + psutil.Process().children(recursive=True):
        try:
            if process.pid != reaper:
                process.kill()
        except psutil.Error:
            pass
    if haproxy is not None:  # after their manager: nothing starts another one now
        haproxy.stop(max(0.0, started + within_s - time.monotonic()))
    print(f"stopped in {time.monotonic() - started:.1f} s", flush=True)
    if shutdown.is_alive():  # Ray is stuck, and exiting would wait for it again (atexit)
        os._exit(0)


def _set_when_ingress_gone(stop: threading.Event) -> None:
    while not stop.is_set() and _ingress_alive():
        stop.wait(0.1)  # polling Ray's actor list: it has no event for an actor's end
    stop.set()


def _ingress_alive() -> bool:
    """Whether an ingress replica still runs (it ends once its sessions are closed)."""
    try:
        names = [actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)]
    except Exception:
        return False
    return any(INGRESS_ACTOR in name for name in names)


if __name__ == "__main__":
    main()
