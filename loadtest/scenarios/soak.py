"""Soak: interrupting sessions against the synthetic app for minutes; does anything grow?

``s2s-bench soak [--minutes 10] [--sessions 16]`` starts a local Ray, serves
``cluster/loadtest.yaml``'s synthetic application (fixed replicas, so the actor count means
something), warms it up with one load run, then runs the interrupting load for ``--minutes``
while sampling the ingress replicas' RSS (summed). Prints one JSON object: RSS after warm-up, at the
end and at its peak, growth in percent, the cluster's live actors before and after, and the
harness's counters (stale bytes, leaks, cut-short answers, timeouts).
"""

import argparse
import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.util.state import list_actors

from loadtest import options
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load
from loadtest.scenarios.launch import LocalServe
from loadtest.scenarios.scaling import app_args

SAMPLE_S = 10.0


def ingress_processes() -> list[psutil.Process]:
    filters = [("class_name", "=", "ServeReplica:voice:RealtimeIngress"), ("state", "=", "ALIVE")]
    actors = list_actors(address=ray.get_runtime_context().gcs_address, filters=filters)  # type: ignore[arg-type]
    return [psutil.Process(ingress.pid) for ingress in actors]


def rss_mb(processes: list[psutil.Process]) -> float:
    """Of every ingress replica together."""
    return sum(float(process.memory_info().rss) for process in processes) / 2**20


def wait_for_no_sessions(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            if json.loads(reply.read())["sessions"] == 0:
                return
        time.sleep(0.5)  # polling the server's count: there is no event to wait on
    raise RuntimeError("sessions still open a minute after the load ended")


def live_actors() -> dict[str, int]:
    counts: dict[str, int] = {}
    address = ray.get_runtime_context().gcs_address  # ours, not the machine's current cluster
    for actor in list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=10_000):  # type: ignore[arg-type]
        counts[actor.class_name] = counts.get(actor.class_name, 0) + 1
    return counts


def load(args: argparse.Namespace, url: str, seconds: float, seed: int) -> LoadConfig:
    """``--sessions`` of them for ``seconds``; the rest is fixed."""
    return LoadConfig.from_args(
        args,
        url + "/realtime",
        turns=100_000,
        interrupt_rate=0.3,
        cancel_rate=0.1,
        ramp_s=5.0,
        duration_s=seconds,
        seed=seed,
        calibrate=False,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=options.positive_float, default=10.0)
    parser.add_argument("--warmup-s", type=options.positive_float, default=60.0)
    options.add(parser, sessions=16, out_dir=Path("reports/soak"))


def main(args: argparse.Namespace) -> None:
    with LocalServe(dashboard=True) as local:  # the dashboard's state API lists the actors
        local.deploy(app_args(replicas=2, hold_s=0.02))
        port = local.port
        asyncio.run(run_load(load(args, local.url, args.warmup_s, seed=1)))
        wait_for_no_sessions(port)
        actors_before = live_actors()
        ingress = ingress_processes()
        rss_start = rss_mb(ingress)
        samples = [rss_start]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(SAMPLE_S):
                samples.append(rss_mb(ingress))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        result = asyncio.run(run_load(load(args, local.url, args.minutes * 60, seed=2)))
        stop.set()
        sampler.join()
        summary = write(result, args.out_dir / "soak.json")
        wait_for_no_sessions(port)
        rss_end = rss_mb(ingress)
        actors_after = live_actors()
    counts: dict[str, Any] = summary["counts"]
    print(
        json.dumps(
            {
                "minutes": args.minutes,
                "sessions": args.sessions,
                "completed_turns": counts.get("completed"),
                "ingress_rss_mb_after_warmup": round(rss_start, 1),
                "ingress_rss_mb_end": round(rss_end, 1),
                "ingress_rss_mb_peak": round(max(samples), 1),
                "ingress_rss_growth_pct": round(100 * (rss_end - rss_start) / rss_start, 2),
                "actors_before": sum(actors_before.values()),
                "actors_after": sum(actors_after.values()),
                "leaked_actors": {
                    name: actors_after.get(name, 0) - actors_before.get(name, 0)
                    for name in set(actors_before) | set(actors_after)
                    if actors_after.get(name, 0) != actors_before.get(name, 0)
                },
                **{name: counts.get(name) for name in ("stale_bytes", "leaks", "cut_short", "timeouts", "disconnects")},
            }
        )
    )
