"""The load harness, resuming (``--resume``), against a running app while the cluster changes
under it (results: docs/bench/notes/resume.md).

At ``--at-s`` after the sessions start, one of:

- ``kill-ingress``: SIGKILL of one ingress replica's process, found by its Ray process title
  (``ray::ServeReplica:<app>:RealtimeIngress``): a lost pod, an OOM kill;
- ``redeploy``: the app deployed again from ``--config`` with one argument changed (the
  ingress's instructions), from a driver of the running cluster, as a ``serve deploy`` or a
  ``helm upgrade`` of the app's args does;
- ``rescale``: the ingress's replica count changed the same way, from the config's to one
  more, and back ``--hold-s`` later (a replica added, then one removed: each change of the
  set reloads HAProxy, and the removed replica drains its sessions).

Prints one JSON object: the harness's counts and its ``resume`` section, latencies, and what
was done when. For example, against ``make serve-loadtest``::

    s2s-bench disruption kill-ingress --url ws://127.0.0.1:8000/v1/realtime \\
        --sessions 100 --turns 1000 --duration-s 120 --ramp-s 30 --at-s 70 --out r.json
"""

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from loadtest import options
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load
from loadtest.scenarios.launch import LOADTEST_CONFIG

INGRESS_TITLE = "ServeReplica:{app}:RealtimeIngress"


def ingress_pids(app: str) -> list[int]:
    """The processes of the app's ingress replicas (Ray sets each worker's title)."""
    title = INGRESS_TITLE.format(app=app)
    return sorted(
        process.pid
        for process in psutil.process_iter(["cmdline"])
        if any(title in part for part in process.info["cmdline"] or [])
    )


def kill_one_ingress(app: str) -> dict[str, Any]:
    pids = ingress_pids(app)
    if not pids:
        raise RuntimeError(f"no ingress replica of app {app!r} runs on this machine")
    os.kill(pids[0], signal.SIGKILL)
    return {"killed_pid": pids[0], "ingress_replicas": len(pids)}


REDEPLOY = """
import json, sys, yaml, ray
from ray import serve
from deployments.app import build_app
app = yaml.safe_load(open(sys.argv[1]))["applications"][0]
ingress = app["args"].setdefault("ingress", {})
for key, value in json.loads(sys.argv[2]).items():
    ingress[key] = ingress.get(key, {}) | value if isinstance(value, dict) else value
ray.init(address=sys.argv[3], log_to_driver=False)
serve.run(build_app(app["args"]), name=app["name"], route_prefix=app.get("route_prefix", "/"), blocking=False)
"""


def redeploy(config: Path, ingress_changes: dict[str, Any], ray_address: str = "auto") -> dict[str, Any]:
    """The app again, the ingress's arguments changed (a dict value is merged into the
    config's); from a process of its own (a driver that joins the cluster at
    ``ray_address``, as ``serve deploy`` would), returning once the controller took it.
    ``auto`` is the newest cluster on this machine: with two running, name the one."""
    started = time.monotonic()
    command = [sys.executable, "-c", REDEPLOY, str(config), json.dumps(ingress_changes), ray_address]
    subprocess.run(command, check=True, capture_output=True)
    return {"redeployed_with": ingress_changes, "deploy_call_s": round(time.monotonic() - started, 2)}


def ingress_replicas(config: Path) -> int:
    app = yaml.safe_load(config.read_text())["applications"][0]
    return int(app["args"].get("ingress", {}).get("deployment", {}).get("num_replicas", 1))


async def scenario(
    kind: str, load: LoadConfig, at_s: float, hold_s: float, app: str, config: Path
) -> tuple[Any, dict[str, Any]]:
    harness = asyncio.ensure_future(run_load(load))
    started = time.monotonic()
    await asyncio.sleep(at_s)  # the scenario's schedule: when the disruption comes
    disruption: dict[str, Any] = {"kind": kind, "at_s": round(time.monotonic() - started, 1)}
    if kind == "kill-ingress":
        disruption |= kill_one_ingress(app)
    elif kind == "redeploy":
        disruption |= await asyncio.to_thread(redeploy, config, {"instructions": f"Redeployed at {time.ctime()}."})
    else:
        replicas = ingress_replicas(config)
        up = await asyncio.to_thread(redeploy, config, {"deployment": {"num_replicas": replicas + 1}})
        await asyncio.sleep(hold_s)  # the schedule again: how long the extra replica serves
        back_at_s = round(time.monotonic() - started, 1)
        down = await asyncio.to_thread(redeploy, config, {"deployment": {"num_replicas": replicas}})
        disruption |= {"replicas": [replicas, replicas + 1, replicas], "back_at_s": back_at_s, "steps": [up, down]}
    return await harness, disruption


def add_load_options(parser: argparse.ArgumentParser) -> None:
    """The harness's options that every scenario takes."""
    options.add(parser, sessions=100, turns=1000, duration_s=120.0, ramp_s=30.0)
    parser.add_argument(
        "--at-s", type=float, default=70.0, help="when the disruption comes, from the start (calibration included)"
    )
    options.add(parser, interrupt_rate=0.3, seed=3, out=options.REQUIRED)


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.ramp_s < args.at_s < args.duration_s:
        parser.error("--at-s must come after the ramp and before the end")


def resuming_load(args: argparse.Namespace, url: str) -> LoadConfig:
    return LoadConfig.from_args(args, url, cancel_rate=0.0, resume=True)


def report(result: Any, disruption: dict[str, Any], out: Path) -> None:
    """Writes the harness's report with what was done, and prints its summary."""
    summary = write(result, out)
    summary["disruption"] = disruption
    out.write_text(json.dumps(summary, indent=2))
    keys = ("counts", "resume", "disruption")
    print(json.dumps({key: summary[key] for key in keys} | {"latency_ms": summary["latency_ms"]}))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=["kill-ingress", "redeploy", "rescale"])
    options.add(parser, url=options.REQUIRED)
    parser.add_argument("--app", default="voice")
    options.add(parser, config=LOADTEST_CONFIG)
    parser.add_argument("--hold-s", type=float, default=30.0, help="rescale: how long the extra replica serves")
    add_load_options(parser)


def main(args: argparse.Namespace) -> None:
    load = resuming_load(args, args.url + "/realtime")
    result, disruption = asyncio.run(scenario(args.kind, load, args.at_s, args.hold_s, args.app, args.config))
    report(result, disruption, args.out)
