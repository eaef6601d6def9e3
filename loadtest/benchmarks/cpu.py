"""CPU per session-second of each process role, measured beside a load test.

``s2s-bench cpu --wait-for 300 --seconds 180 --sessions 300`` waits until
the server (``--health``, the ingress's ``/healthz``) holds that many sessions, then reads
every process's CPU time (user + system, psutil) at the start and the end of the window and
prints one JSON object: per role (HTTP proxy or HAProxy, ingress, VAD, TTS, LLM, STT, load
client, the session store, Ray's own daemons), the CPU seconds used, the share of one core, and, given
``--sessions``, the milliseconds of CPU per session-second. Roles are told by process title
(``ray::ServeReplica:<app>:RealtimeIngress``, ``ray::ProxyActor``, ...).
"""

import argparse
import json
import time
import urllib.request
from typing import Any

import psutil

from loadtest import options

ROLES = (
    ("haproxy", lambda title: "haproxy" in title),
    ("proxy", lambda title: "ray::ProxyActor" in title),
    ("ingress", lambda title: ":RealtimeIngress" in title),
    ("vad", lambda title: ":VAD" in title),
    ("tts", lambda title: ":TTS" in title),
    ("llm", lambda title: ":LLM" in title),
    ("stt", lambda title: ":STT" in title),
    ("scope_hosts", lambda title: "ray::ScopeHost" in title),
    ("session_store", lambda title: "ray::SessionRecords" in title),
    ("client", lambda title: "s2s-bench" in title or "s2s-loadtest" in title or "-m loadtest " in f"{title} "),
    ("launcher", lambda title: "deployments.serve_local" in title),
    ("serve_controller", lambda title: "ray::ServeController" in title),
    ("ray_daemons", lambda title: any(name in title for name in ("raylet", "gcs_server", "ray::", "dashboard"))),
)


def role(process: psutil.Process) -> str | None:
    try:
        title = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return None
    return next((name for name, matches in ROLES if matches(title)), None)


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU seconds so far of every process that has a role, by pid."""
    seen: dict[int, tuple[str, float]] = {}
    for process in psutil.process_iter():
        name = role(process)
        if name is None:
            continue
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seen[process.pid] = (name, times.user + times.system)
    return seen


def table(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float) -> dict[str, Any]:
    used: dict[str, float] = {}
    processes: dict[str, int] = {}
    for pid, (name, total) in after.items():
        start = before.get(pid, (name, 0.0))[1]  # a process born in the window counts from 0
        used[name] = used.get(name, 0.0) + total - start
        processes[name] = processes.get(name, 0) + 1
    return {
        name: {"cpu_s": round(cpu, 2), "cores": round(cpu / seconds, 3), "processes": processes[name]}
        for name, cpu in sorted(used.items(), key=lambda item: -item[1])
    }


def wait_for_sessions(health_url: str, sessions: int) -> None:
    while True:
        try:
            with urllib.request.urlopen(health_url, timeout=10) as reply:
                if json.load(reply)["sessions"] >= sessions:
                    return
        except OSError:
            pass
        time.sleep(1.0)  # polling the server's count: it has no event to wait on


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait-for", type=int, help="start once /healthz counts this many open sessions")
    parser.add_argument("--health", default="http://127.0.0.1:8000/healthz", help="the ingress's /healthz")
    parser.add_argument("--seconds", type=options.positive_float, required=True, help="length of the measured window")
    options.add(parser, sessions=None)  # open during the window: adds ms per session-second


def main(args: argparse.Namespace) -> None:
    if args.wait_for:
        wait_for_sessions(args.health, args.wait_for)
    before, started = cpu_seconds(), time.monotonic()
    time.sleep(args.seconds)
    after, seconds = cpu_seconds(), time.monotonic() - started
    roles = table(before, after, seconds)
    if args.sessions:
        for row in roles.values():
            row["ms_per_session_s"] = round(1000 * row["cpu_s"] / (seconds * args.sessions), 3)
    total = sum(row["cpu_s"] for row in roles.values())
    print(
        json.dumps(
            {
                "window_s": round(seconds, 1),
                "sessions": args.sessions,
                "total_cores": round(total / seconds, 3),
                "roles": roles,
            },
            indent=2,
        )
    )
