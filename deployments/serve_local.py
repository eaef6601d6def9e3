"""Serve a config file on this machine, say when it is ready, and stop it promptly.

``make run`` uses this instead of ``serve run``, which on Ctrl-C shuts Serve down by killing
its HTTP proxy at once (open sessions see 1006, not a close) and then stops each replica and
Ray's processes one after another (13 s here, vLLM's engine taking 5 s of it). Here Ctrl-C
(or SIGTERM) first deletes the applications with the proxy still up, so each ingress closes
its sessions with 1001; then Ray is shut down; then whatever of this process tree is still
alive (vLLM engine processes outlive their replica) is killed. All within ``--stop-within``
seconds, the last step at the deadline whatever happened before it; a second Ctrl-C skips
the waiting.

The ready line is printed once ``/readyz`` answers 200: every model deployment answers, not
merely the ingress.
"""

import argparse
import importlib
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import ray
import yaml
from ray import serve

READY_POLL_S = 1.0
INGRESS_ACTOR = "#RealtimeIngress#"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="a Serve config file (cluster/local.yaml)")
    parser.add_argument("--port", type=int, help="HTTP port (default: the config's)")
    parser.add_argument("--ready-timeout", type=float, default=900.0)
    parser.add_argument("--stop-within", type=float, default=12.0, help="seconds from Ctrl-C to the last process")
    args = parser.parse_args()
    config = yaml.safe_load(args.config.read_text())
    http_options = dict(config.get("http_options", {}))
    if args.port is not None:
        http_options["port"] = args.port
    port = http_options.get("port", 8000)

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ray.init()
    serve.start(proxy_location=config.get("proxy_location", "HeadOnly"), http_options=http_options)
    apps = config["applications"]
    threading.Thread(target=_deploy, args=(apps,), daemon=True).start()
    threading.Thread(target=_announce_when_ready, args=(port, args.ready_timeout, stop), daemon=True).start()
    stop.wait()
    _stop(apps, args.stop_within, stop)


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
                    print(f"\n  Voice agent ready: ws://127.0.0.1:{port}/v1/realtime\n", flush=True)
                    return
        except (urllib.error.URLError, OSError):
            pass
        stop.wait(READY_POLL_S)  # polling a server that has no readiness event to wait on
    if not stop.is_set():
        print(f"the app did not become ready on port {port} within {timeout_s:.0f} s", flush=True)


def _stop(apps: list[dict[str, Any]], within_s: float, stop: threading.Event) -> None:
    started = time.monotonic()
    ours = psutil.Process().children(recursive=True)  # now: vLLM's engines are orphaned later
    print("stopping: closing sessions (Ctrl-C again to skip the wait)", flush=True)
    stop.clear()
    close_by = started + within_s / 2
    for app in apps:  # the proxy stays up: each ingress sees its app deleted and closes with 1001
        threading.Thread(target=serve.delete, args=(app["name"],), daemon=True).start()
    while time.monotonic() < close_by and not stop.is_set() and _ingress_alive():
        stop.wait(0.1)
    shutdown = threading.Thread(target=ray.shutdown, daemon=True)
    shutdown.start()
    shutdown.join(max(0.0, started + within_s - 1 - time.monotonic()))
    for process in ours + psutil.Process().children(recursive=True):
        try:
            process.kill()
        except psutil.Error:
            pass
    print(f"stopped in {time.monotonic() - started:.1f} s", flush=True)


def _ingress_alive() -> bool:
    """Whether an ingress replica still runs (it ends once its sessions are closed)."""
    try:
        names = [actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)]
    except Exception:
        return False
    return any(INGRESS_ACTOR in name for name in names)


if __name__ == "__main__":
    main()
