"""What the load client costs: ``s2s-bench client`` (JSON on stdout).

The load test's own sessions (``loadtest.client.session.Session``, as ``s2s-bench load`` drives them:
tone questions paced at microphone speed, interruptions by speech and by ``response.cancel``)
talk to the echo server (``loadtest.doubles.echo_server``), in a process of its own so that its CPU
is not the client's.

For each number of sessions and each deflate setting it reports the client's process CPU
(user + system, from psutil: not wall time, so the other processes on the machine matter
less) per session-second, the echo server's the same way, and the correctness counters the
load test reports (stale bytes, timeouts, ...), which must stay 0. Settings:

- ``deflate``: both sides as their libraries default (the client offers permessage-deflate,
  uvicorn accepts it, as Ray Serve's proxy does): every message is compressed by its sender
  and inflated by its receiver;
- ``client_off``: the client does not offer it (``websockets.connect(compression=None)``);
- ``server_off``: the client offers it, the server refuses it (uvicorn's
  ``ws_per_message_deflate=False``).

Per run: ``client_cpu_ms_per_session_s`` (and per event, per turn), its ``client_system_share``
(the kernel's: sockets), ``server_cpu_ms_per_session_s``, and ``audio_sent_s_per_session_s``,
which stays at its nominal value (about 0.72 for this mix of speaking and listening) only while
the client keeps real time; ``loop_lag_ms`` is how late the client's event loop ran.

Ray Serve 2.60 starts uvicorn with uvicorn's default ``ws_per_message_deflate=True`` and no
option to change it (``ray/serve/_private/http_util.py``, ``start_asgi_http_server``: its
proxy and, with HAProxy, each ingress replica), and uvicorn negotiates the extension before
the application sees the request; permessage-deflate is only used when the client offers it,
so a client that does not is what turns it off on both sides.

``--client-module`` measures another implementation of ``Session`` (an earlier version of
``loadtest/client/session.py`` saved under another name, say) against the same server.
"""

import argparse
import asyncio
import importlib
import inspect
import json
import math
import os
import random
import sys
import time
from typing import Any

import psutil

from loadtest import options
from loadtest.client.loop_lag import LoopLag
from loadtest.doubles.echo_server import ANSWER_S, ANSWER_SPEED, EchoServer

CONFIGS = {
    "deflate": ("deflate", True),
    "client_off": (None, True),
    "server_off": ("deflate", False),
}
"""Setting -> (client ``compression``, server ``ws_per_message_deflate``)."""


def _cpu_s(process: psutil.Process) -> tuple[float, float]:
    """User and system CPU seconds of ``process`` so far."""
    times = process.cpu_times()
    return float(times.user), float(times.system)


def _session_class(module_name: str, compression: str | None) -> Any:
    """``Session`` of ``module_name``, connecting with ``compression``; a module whose
    ``Session`` takes no ``compression`` gets it through its ``websockets.connect``."""
    module = importlib.import_module(module_name)
    session: Any = module.Session
    if "compression" in inspect.signature(session.__init__).parameters:
        return lambda *args: session(*args, compression=compression)
    import websockets

    class Shim:
        def __getattr__(self, name: str) -> Any:
            return getattr(websockets, name)

        def connect(self, *args: Any, **kwargs: Any) -> Any:
            return websockets.connect(*args, compression=compression, **kwargs)

    module.websockets = Shim()  # type: ignore[attr-defined]
    return session


async def _negotiated(url: str, compression: str | None) -> str | None:
    import websockets

    async with websockets.connect(url, compression=compression) as ws:
        assert ws.response is not None
        return ws.response.headers.get("Sec-WebSocket-Extensions")


async def measure(
    server: EchoServer,
    sessions: int,
    compression: str | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    from loadtest.client.prompts import tone_prompts  # not in the echo server: it imports torch

    prompts = tone_prompts()
    make = _session_class(args.client_module, compression)
    rng = random.Random(args.seed)
    orders = [rng.sample(range(len(prompts.prompts)), len(prompts.prompts)) for _ in range(sessions)]
    answering_s = dict.fromkeys(range(len(prompts.prompts)), ANSWER_S / ANSWER_SPEED)
    extensions = await _negotiated(server.url, compression)
    turns = [0]
    lived: list[float] = []

    async def session(index: int) -> Any:
        await asyncio.sleep(args.ramp_s * index / sessions)
        start = time.monotonic()
        driver = make(
            index,
            server.url,
            prompts,
            orders[index],
            random.Random(args.seed * 100_003 + index),
            args.interrupt_rate,
            args.cancel_rate,
            lambda turn: turns.__setitem__(0, turns[0] + 1),
            answering_s,
        )
        log = await driver.run(10**9, start + args.duration_s)
        lived.append(time.monotonic() - start)
        return log

    before = server.stats() or {}
    me = psutil.Process()
    client_before, server_before, started = _cpu_s(me), _cpu_s(server.cpu), time.monotonic()
    async with LoopLag() as loop_lag:
        logs = await asyncio.gather(*(session(i) for i in range(sessions)))
    client_user, client_system = (now - then for now, then in zip(_cpu_s(me), client_before, strict=True))
    server_cpu = sum(_cpu_s(server.cpu)) - sum(server_before)
    client_cpu = client_user + client_system
    wall = time.monotonic() - started
    after = server.stats() or {}
    session_s = sum(lived)
    events_in = after["events_out"] - before.get("events_out", 0)  # the server's out, the client's in
    events_out = after["events_in"] - before.get("events_in", 0)
    all_turns = [turn for log in logs for turn in log.turns]
    responses = [turn.response for turn in all_turns if turn.response is not None]
    errors: dict[str, int] = {}
    for log in logs:
        for code, count in log.errors.items():
            errors[code] = errors.get(code, 0) + count
    lags = sorted(loop_lag.lags_s())
    return {
        "sessions": sessions,
        "negotiated": extensions,
        "wall_s": round(wall, 1),
        "session_s": round(session_s, 1),
        "client_cpu_s": round(client_cpu, 2),
        "client_cpu_ms_per_session_s": round(1000 * client_cpu / session_s, 3),
        "client_system_share": round(client_system / client_cpu, 2) if client_cpu else None,
        "server_cpu_ms_per_session_s": round(1000 * server_cpu / session_s, 3),
        "client_cpu_ms_per_turn": round(1000 * client_cpu / max(1, len(all_turns)), 2),
        "turns": len(all_turns),
        "client_cpu_us_per_event": round(1e6 * client_cpu / max(1, events_in + events_out), 1),
        "events_in_per_session_s": round(events_in / session_s, 2),
        "events_out_per_session_s": round(events_out / session_s, 2),
        "audio_sent_s_per_session_s": round((after["audio_in_s"] - before.get("audio_in_s", 0)) / session_s, 3),
        "barge_ins": sum(turn.interruption == "barge-in" for turn in all_turns),
        "cancels": sum(turn.interruption == "cancel" for turn in all_turns),
        "cancelled": sum(response.status == "cancelled" for response in responses),
        "stale_bytes": sum(log.stale_bytes for log in logs),
        "done_without_created": sum(log.done_without_created for log in logs),
        "timeouts": sum(turn.timed_out for turn in all_turns),
        "disconnects": sum(log.disconnected for log in logs),
        "no_response": sum(turn.response is None and not turn.timed_out for turn in all_turns),
        "errors": errors,
        "loop_lag_ms": {
            "p50": round(1000 * lags[len(lags) // 2], 1) if lags else None,
            "p99": round(1000 * lags[min(len(lags) - 1, math.ceil(0.99 * len(lags)) - 1)], 1) if lags else None,
            "max": round(1000 * lags[-1], 1) if lags else None,
        },
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    servers: dict[bool, EchoServer] = {}
    try:
        for name in args.configs:
            compression, server_deflate = CONFIGS[name]
            if server_deflate not in servers:
                servers[server_deflate] = EchoServer(server_deflate)
            for sessions in args.session_counts:
                print(f"{name}: {sessions} sessions for {args.duration_s:g} s ...", file=sys.stderr, flush=True)
                result = await measure(servers[server_deflate], sessions, compression, args)
                results.setdefault(name, {})[str(sessions)] = result
                print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        for server in servers.values():
            server.close()
    return {
        "client_module": args.client_module,
        "loop": args.loop,
        "duration_s": args.duration_s,
        "interrupt_rate": args.interrupt_rate,
        "cancel_rate": args.cancel_rate,
        "cpus": os.cpu_count(),
        "results": results,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, session_counts=[50, 200], duration_s=30.0, ramp_s=5.0)
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    options.add(parser, interrupt_rate=0.3, cancel_rate=0.2, seed=0)
    parser.add_argument("--client-module", default="loadtest.client.session", help="where Session comes from")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio", help="the client's event loop")


def main(args: argparse.Namespace) -> None:
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(bench(args))
    else:
        result = asyncio.run(bench(args))
    print(json.dumps(result, indent=2))
