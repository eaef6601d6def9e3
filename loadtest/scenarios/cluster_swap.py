"""The Ray cluster swapped under live calls, as a KubeRay ``NewCluster`` upgrade (a new image
or cluster spec) does, with the ``redis`` session store (scenario d of
docs/bench/notes/resume.md).

On this machine: a redis-server; two Ray clusters, each serving ``--config`` (the synthetic
engines) with ``session_store.kind: redis``, on ports of their own (``make serve-loadtest``'s
launcher, ``deployments.serve_local``); and in front of them a TCP relay standing in for the
Kubernetes Service, which sends each new connection to its current target and leaves open
ones where they are (as kube-proxy does). The resuming harness talks to the relay. At
``--at-s`` the relay is moved to the new cluster and the old one is stopped (its launcher's
SIGTERM: each ingress sees its app deleted and closes its sessions with 1001), and every
session resumes on the new cluster from Redis.

Prints one JSON object, as ``s2s-bench disruption`` does::

    s2s-bench cluster-swap --sessions 60 --duration-s 120 --ramp-s 30 --at-s 70 \\
        --out docs/bench/resume/d-cluster-swap.json
"""

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from cluster.redis_server import RedisServer
from deployments.ports import free_port
from loadtest import options
from loadtest.client.run import LoadConfig, run_load
from loadtest.scenarios.disruption import add_load_options, report, resuming_load
from loadtest.scenarios.disruption import check_arguments as check_arguments
from loadtest.scenarios.launch import LOADTEST_CONFIG, ServeProcess

STOP_WITHIN_S = 20.0
RELAY_CHUNK = 1 << 16


class ServiceRelay:
    """A TCP relay to one of several ports: a new connection goes to the current target,
    an open one stays where it was opened."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while chunk := await reader.read(RELAY_CHUNK):
            writer.write(chunk)
            await writer.drain()
    writer.close()


def redis_config(config: Path, directory: Path) -> Path:
    """``config`` with the ingress's session store set to ``redis``."""
    serve_config = yaml.safe_load(config.read_text())
    for app in serve_config["applications"]:
        app.setdefault("args", {}).setdefault("ingress", {})["session_store"] = {"kind": "redis"}
    path = directory / "redis-store.yaml"
    path.write_text(yaml.safe_dump(serve_config))
    return path


async def swap(load: LoadConfig, relay: ServiceRelay, old: ServeProcess, new: ServeProcess, at_s: float) -> Any:
    harness = asyncio.ensure_future(run_load(load))
    started = time.monotonic()
    await asyncio.sleep(at_s)  # the scenario's schedule: when the new cluster takes over
    disruption: dict[str, Any] = {"kind": "cluster-swap", "at_s": round(time.monotonic() - started, 1)}
    relay.target_port = new.port
    disruption["old_cluster_stopped_in_s"] = await asyncio.to_thread(old.stop)
    return await harness, disruption


async def scenario(args: argparse.Namespace) -> None:
    with RedisServer() as redis_server, tempfile.TemporaryDirectory() as directory:
        config = redis_config(args.config, Path(directory))
        environ = {"S2S_REDIS_URL": redis_server.url}
        old = ServeProcess(config, environ, STOP_WITHIN_S)
        new: ServeProcess | None = None
        try:
            await asyncio.to_thread(old.wait_ready)
            new = ServeProcess(config, environ, STOP_WITHIN_S)
            await asyncio.to_thread(new.wait_ready)
            relay = ServiceRelay(old.port)
            await relay.start()
            load = resuming_load(args, f"ws://127.0.0.1:{relay.port}/v1/realtime")
            result, disruption = await swap(load, relay, old, new, args.at_s)
            await relay.stop()
            report(result, disruption, args.out)
        finally:
            for cluster in (old, new):
                if cluster is not None:
                    await asyncio.to_thread(cluster.stop)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, config=LOADTEST_CONFIG)
    add_load_options(parser)


def main(args: argparse.Namespace) -> None:
    asyncio.run(scenario(args))
