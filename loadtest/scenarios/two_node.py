"""Sessions over a simulated two-node Ray cluster: an ingress replica on each node, each its share.

``s2s-bench two-node [--sessions 60] [--duration-s 45] [--data-path haproxy|proxy]
[--out FILE]`` starts a Ray cluster of two nodes on this machine (``ray.cluster_utils.Cluster``,
as ``tests/cluster`` does: a head and one worker, one CPU each), serves
``cluster/loadtest.yaml``'s synthetic application on it (two ingress replicas, which Serve's
default SPREAD scheduling puts one per node: checked, not assumed), runs the interrupting load
test through the data path, and prints one JSON object (also written to ``--out``): for each
ingress replica its node, the sessions it held when the most were open (its
``s2s_active_sessions`` gauge, scraped from its own node's metrics endpoint every few
seconds), the WebSockets HAProxy handed it (its per-server session count), the user turns and
responses it served; per node the totals and shares; and the load test's own counters (stale
bytes, leaks, timeouts, disconnects).

By default one HAProxy on the head (``--proxy-location HeadOnly``) routes to the ingress
replicas of both nodes by node address and replica port, as it does on a real cluster.
``--proxy-location EveryNode`` asks for an HAProxy on each node as well, which one machine
cannot give: every node's HAProxy is configured with the same ``http_options`` port (and
metrics and stats ports) and started with ``-dR`` (no SO_REUSEPORT), so the worker's fails
("cannot bind socket (Address already in use)" for all three, in its manager's log) and is
restarted again and again (43 HAProxy processes in 70 s, measured) while the head's carries
every session to both nodes' replicas. On a real cluster each node has its own address.
"""

import argparse
import asyncio
import csv
import io
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any

from ray import serve

from deployments.placement import ReplicaPlacement
from loadtest import options
from loadtest.client.metrics import scrape
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load, server_stats
from loadtest.scenarios.launch import LOADTEST_CONFIG, LocalServe, app_config

APP = "voice"
INGRESS = "RealtimeIngress"
NODE_CPUS = 1
PLACEMENT_TIMEOUT_S = 60.0
SAMPLE_S = 5.0


def app_args(ingress_replicas: int) -> dict[str, Any]:
    args = app_config(LOADTEST_CONFIG)[1]
    args["ingress"]["deployment"]["num_replicas"] = ingress_replicas
    return args


async def ingress_placements(expected: int) -> dict[str, ReplicaPlacement]:
    """Each ingress replica's own report of its node, by replica id (asked through the
    handle until every replica has answered: the router picks one per call)."""
    handle = serve.get_deployment_handle(INGRESS, APP)
    seen: dict[str, ReplicaPlacement] = {}
    deadline = time.monotonic() + PLACEMENT_TIMEOUT_S
    while len(seen) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(seen)} of {expected} ingress replicas answered placement()")
        for report in await asyncio.gather(*(handle.placement.remote() for _ in range(4 * expected))):
            seen[report.replica] = report
        await asyncio.sleep(0.2)  # the router's view of new replicas has no event: ask again
    return seen


def haproxy_sessions() -> dict[str, dict[str, int]]:
    """HAProxy's per-server view, by replica id: WebSockets handed to it (``stot``) and open now
    (``scur``)."""
    url = f"http://127.0.0.1:{os.environ['RAY_SERVE_HAPROXY_STATS_PORT']}/stats;csv"
    with urllib.request.urlopen(url, timeout=5) as reply:
        rows = csv.DictReader(io.StringIO(reply.read().decode().lstrip("# ")))
        return {
            row["svname"].rsplit("-", 1)[-1]: {"handed": int(row["stot"] or 0), "open": int(row["scur"] or 0)}
            for row in rows
            if INGRESS in row["svname"] and row.get("bck") == "0"
        }


def per_replica(metrics: dict[str, float], name: str, **labels: str) -> dict[str, float]:
    """``ray_<name>`` (a counter's with its ``_total``) of the ingress deployment summed per
    replica (``metrics`` as ``loadtest.client.metrics.scrape`` returns them)."""
    values: dict[str, float] = {}
    for key, value in metrics.items():
        metric, _, label_text = key.partition("{")
        if metric.removeprefix("ray_").removesuffix("_total") != name or f'deployment="{INGRESS}"' not in label_text:
            continue
        if any(f'{k}="{v}"' not in label_text for k, v in labels.items()):
            continue
        replica = label_text.split('replica="', 1)[1].split('"', 1)[0] if 'replica="' in label_text else "?"
        values[replica] = values.get(replica, 0.0) + value
    return values


def replica_id(label: str) -> str:
    """Serve's ``replica`` metric label (``<deployment>#<id>`` or the bare id) -> the id."""
    return label.rsplit("#", 1)[-1]


async def scenario(local: LocalServe, args: argparse.Namespace) -> dict[str, Any]:
    routing_s = local.deploy(app_args(args.ingress_replicas), name=APP)
    placements = await ingress_placements(args.ingress_replicas)
    names = local.node_names
    url = local.url + "/realtime"
    metrics_urls: list[str] = (server_stats(url) or {}).get("metrics_urls", [])
    # Calibrated: interruptions are timed to land while the answer streams.
    config = LoadConfig.from_args(args, url, turns=100_000, calibrate=True)

    samples: list[dict[str, float]] = []

    async def sample_open_sessions() -> None:
        """Each replica's ``s2s_active_sessions`` gauge, every ``SAMPLE_S`` of the run."""
        while True:
            await asyncio.sleep(SAMPLE_S)
            samples.append(per_replica(await asyncio.to_thread(scrape, metrics_urls), "s2s_active_sessions"))

    sampler = asyncio.ensure_future(sample_open_sessions())
    try:
        result = await run_load(config)
    finally:
        sampler.cancel()
    # The sample with the most sessions open: the load at its full height, as each replica saw it.
    open_at_peak = max(samples, key=lambda sample: sum(sample.values()), default={})
    handed = haproxy_sessions() if args.data_path == "haproxy" else {}
    summary = write(result, args.out.with_name(args.out.stem + "-load.json"))
    serve.delete(APP)

    deltas = result.server_metrics
    turns = per_replica(deltas, "s2s_turns")
    responses = per_replica(deltas, "s2s_responses")
    completed = per_replica(deltas, "s2s_responses", status="completed")
    requests = per_replica(deltas, "serve_deployment_request_counter")
    replicas: list[dict[str, Any]] = []
    for replica, placement in sorted(placements.items(), key=lambda item: names.get(item[1].node_id, "")):

        def of(values: dict[str, float], replica: str = replica) -> float:
            return sum(value for label, value in values.items() if replica_id(label) == replica)

        replicas.append(
            {
                "replica": replica,
                "node": names.get(placement.node_id, placement.node_id),
                "node_id": placement.node_id,
                "sessions_open_at_peak": of(open_at_peak),
                "websockets_handed_by_haproxy": handed.get(replica, {}).get("handed"),
                "serve_requests": of(requests),
                "user_turns": of(turns),
                "responses": of(responses),
                "responses_completed": of(completed),
            }
        )
    nodes: dict[str, dict[str, float]] = {}
    for row in replicas:
        node = nodes.setdefault(row["node"], {"ingress_replicas": 0, "sessions_open_at_peak": 0, "user_turns": 0})
        node["ingress_replicas"] += 1
        node["sessions_open_at_peak"] += row["sessions_open_at_peak"]
        node["user_turns"] += row["user_turns"]
    total_turns = sum(node["user_turns"] for node in nodes.values()) or 1.0
    total_open = sum(node["sessions_open_at_peak"] for node in nodes.values()) or 1.0
    for node in nodes.values():
        node["share_of_turns"] = round(node["user_turns"] / total_turns, 3)
        node["share_of_sessions_at_peak"] = round(node["sessions_open_at_peak"] / total_open, 3)
    v2v = summary["latency_ms"].get("voice_to_voice_ms", {})
    counts = summary["counts"]
    return {
        "seconds_until_haproxy_routed": None if routing_s is None else round(routing_s, 1),
        "one_ingress_replica_per_node": len(nodes) == len(replicas) == 2,
        "ingress_replicas": replicas,
        "nodes": nodes,
        "load": {
            "completed_turns_per_s": summary["completed_turns_per_s"],
            "voice_to_voice_ms_p50": v2v.get("p50"),
            "voice_to_voice_ms_p95": v2v.get("p95"),
            **{
                name: counts[name]
                for name in (
                    "sessions",
                    "turns",
                    "completed",
                    "cancelled",
                    "failed",
                    "stale_bytes",
                    "leaks",
                    "cut_short",
                    "timeouts",
                    "disconnects",
                    "errors",
                )
            },
        },
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, sessions=60, duration_s=45.0, ramp_s=10.0, interrupt_rate=0.3, cancel_rate=0.1, seed=3)
    parser.add_argument("--ingress-replicas", type=options.positive_int, default=2)
    options.add(parser, data_path="haproxy")
    parser.add_argument("--proxy-location", choices=("HeadOnly", "EveryNode"), default="HeadOnly")
    options.add(parser, out=Path("reports/two-node/two-node.json"))


def main(args: argparse.Namespace) -> None:
    with LocalServe(data_path=args.data_path, num_cpus=NODE_CPUS, nodes=2, proxy_location=args.proxy_location) as local:
        measured = asyncio.run(scenario(local, args))
    report = {
        "data_path": args.data_path,
        "proxy_location": args.proxy_location,
        "node_count": 2,
        "cpus_per_node": NODE_CPUS,
        "sessions": args.sessions,
        "duration_s": args.duration_s,
        "interrupt_rate": args.interrupt_rate,
        "cancel_rate": args.cancel_rate,
        **measured,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
