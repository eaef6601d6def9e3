"""What the load client costs: ``python -m loadtest.bench_client`` (JSON on stdout).

The load test's own sessions (``loadtest.client.Session``, as ``s2s-loadtest`` drives them:
tone questions paced at microphone speed, interruptions by speech and by ``response.cancel``)
talk to an *echo server*: a uvicorn app in a process of its own (so its CPU is not the
client's) that speaks just enough of the Realtime protocol for every path of the client to
run. It hears a question end after 500 ms of silence (the real server's default), answers
with the event sequence the real ingress sends (ids, transcription, transcript deltas, audio
deltas in the real server's field order) and 2 s of audio faster than real time, and
cancels an answer on ``response.cancel`` or when speech starts while it streams.

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
``loadtest/client.py`` saved under another name, say) against the same server.
"""

import argparse
import asyncio
import base64
import importlib
import inspect
import json
import math
import os
import random
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import psutil

from deployments.ports import free_port
from handlers.audio import REALTIME_RATE

FRAME_MS = 100
FRAME_BYTES = REALTIME_RATE * 2 * FRAME_MS // 1000
SILENCE_FRAMES = 5
"""Silent frames after speech before the echo server says the question ended (500 ms)."""
ANSWER_S = 2.0
ANSWER_SPEED = 2.0
"""The answer's audio streams this many times faster than it plays (as a TTS makes it)."""
CONFIGS = {
    "deflate": ("deflate", True),
    "client_off": (None, True),
    "server_off": ("deflate", False),
}
"""Setting -> (client ``compression``, server ``ws_per_message_deflate``)."""
LAG_EVERY_S = 0.05

Send = Callable[[dict[str, Any]], Awaitable[None]]


# --- the echo server (``--serve``), in its own process ----------------------------------------


def _answer_frames() -> list[str]:
    """The answer's audio, base64 per 100 ms delta: a tone with noise, which compresses about
    as badly as speech (silence would make deflate look free)."""
    rng = np.random.default_rng(0)
    t = np.arange(int(ANSWER_S * REALTIME_RATE)) / REALTIME_RATE
    wave = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)
    pcm = (np.clip(wave, -1, 1) * 32767).astype("<i2").tobytes()
    return [base64.b64encode(pcm[i : i + FRAME_BYTES]).decode() for i in range(0, len(pcm), FRAME_BYTES)]


ANSWER_FRAMES: list[str] = []
STALE = [False]
STATS = {"sessions": 0, "events_in": 0, "events_out": 0, "audio_in_s": 0.0, "extensions_offered": 0}


def _event_id() -> str:
    return f"event_{secrets.token_urlsafe(12)}"


def _audio_delta(delta: str, response_id: str, item_id: str) -> str:
    """Exactly as the real ingress encodes it (pydantic's field order: ``type`` last)."""
    return (
        f'{{"content_index":0,"delta":"{delta}","event_id":"{_event_id()}","item_id":"{item_id}",'
        f'"output_index":0,"response_id":"{response_id}","type":"response.output_audio.delta"}}'
    )


class EchoSession:
    """One connection: an energy-free VAD (a frame of zeros is silence), a scripted answer.
    A ``stale`` server is a broken one, for tests: it sends one more audio delta after each
    ``response.done``."""

    def __init__(self, send: Send, stale: bool = False) -> None:
        self._send = send
        self._stale = stale
        self._speaking = False
        self._silent = 0
        self._turns = 0
        self._answer: asyncio.Task[None] | None = None
        self._answering: str | None = None
        """The id of the response streaming now, if any."""

    async def emit(self, event: dict[str, Any]) -> None:
        await self.emit_text(json.dumps({"event_id": _event_id(), **event}))

    async def emit_text(self, text: str) -> None:
        STATS["events_out"] += 1
        await self._send({"type": "websocket.send", "text": text})

    async def on_text(self, text: str) -> None:
        STATS["events_in"] += 1
        event = json.loads(text)
        kind = event.get("type")
        if kind == "input_audio_buffer.append":
            await self._on_audio(event["audio"])
        elif kind == "session.update":  # taken, changing nothing: every onset still interrupts
            await self.emit({"type": "session.updated", "session": event.get("session", {})})
        elif kind == "response.cancel":
            if not await self.cancel():
                error = {"type": "invalid_request_error", "code": "response_cancel_not_active", "message": "none"}
                await self.emit({"type": "error", "error": error})
        else:
            error = {"type": "invalid_request_error", "code": "unknown_event", "message": str(kind)}
            await self.emit({"type": "error", "error": error})

    async def _on_audio(self, audio: str) -> None:
        STATS["audio_in_s"] += len(audio) * 3 / 4 / (2 * REALTIME_RATE)
        if audio.strip("A=") != "":  # speech
            self._silent = 0
            if not self._speaking:
                self._speaking = True
                await self.emit({"type": "input_audio_buffer.speech_started", "audio_start_ms": 0, "item_id": "x"})
                await self.cancel()  # a barge-in
            return
        if self._speaking:
            self._silent += 1
            if self._silent >= SILENCE_FRAMES:
                self._speaking = False
                self._turns += 1
                self._answer = asyncio.ensure_future(self._respond(f"Question {self._turns}."))

    async def cancel(self) -> bool:
        """Stop the answer streaming now, if any; ``response.done`` says it was cancelled."""
        response_id, self._answering = self._answering, None
        if response_id is None or self._answer is None:
            return False
        self._answer.cancel()
        await asyncio.gather(self._answer, return_exceptions=True)
        await self.emit({"type": "response.done", "response": {"id": response_id, "status": "cancelled"}})
        await self._after_done(response_id)
        return True

    async def _after_done(self, response_id: str) -> None:
        if self._stale:
            await self.emit_text(_audio_delta(ANSWER_FRAMES[0], response_id, "item_stale"))

    async def _respond(self, question: str) -> None:
        heard, answer = f"item_{secrets.token_urlsafe(8)}", f"item_{secrets.token_urlsafe(8)}"
        await self.emit({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 0, "item_id": heard})
        await self.emit({"type": "input_audio_buffer.committed", "item_id": heard})
        await self.emit({"type": "conversation.item.added", "item": {"id": heard, "type": "message"}})
        transcribed = {"item_id": heard, "content_index": 0, "transcript": question}
        await self.emit({"type": "conversation.item.input_audio_transcription.completed", **transcribed})
        response_id = self._answering = f"resp_{secrets.token_urlsafe(12)}"
        await self.emit({"type": "response.created", "response": {"id": response_id, "status": "in_progress"}})
        ids = {"response_id": response_id, "item_id": answer, "output_index": 0}
        await self.emit({"type": "response.output_item.added", "response_id": response_id, "item": {"id": answer}})
        await self.emit({"type": "response.content_part.added", **ids, "content_index": 0})
        words = f"Answer {self._turns}: this is what the echo server says back.".split()
        for word in words:
            await self.emit({"type": "response.output_audio_transcript.delta", **ids, "delta": word})
        started = time.monotonic()
        for index, frame in enumerate(ANSWER_FRAMES):
            await asyncio.sleep(max(0.0, started + index * FRAME_MS / 1000 / ANSWER_SPEED - time.monotonic()))
            await self.emit_text(_audio_delta(frame, response_id, answer))
        self._answering = None  # from here on a cancel is too late
        await self.emit({"type": "response.output_audio.done", **ids, "content_index": 0})
        await self.emit({"type": "response.output_audio_transcript.done", **ids, "transcript": " ".join(words)})
        await self.emit({"type": "response.output_item.done", "response_id": response_id, "item": {"id": answer}})
        await self.emit({"type": "response.done", "response": {"id": response_id, "status": "completed"}})
        await self._after_done(response_id)

    async def close(self) -> None:
        if self._answer is not None:
            self._answer.cancel()


async def echo_app(scope: dict[str, Any], receive: Any, send: Send) -> None:
    if scope["type"] == "http":
        found = scope["path"] == "/bench-stats"
        body = json.dumps(STATS).encode() if found else b"not found"
        await send({"type": "http.response.start", "status": 200 if found else 404, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] != "websocket":
        return
    await receive()  # websocket.connect
    STATS["sessions"] += 1
    STATS["extensions_offered"] += any(name == b"sec-websocket-extensions" for name, _ in scope["headers"])
    await send({"type": "websocket.accept"})
    session = EchoSession(send, STALE[0])
    session_event = {"id": f"sess_{secrets.token_urlsafe(12)}", "model": "echo", "object": "realtime.session"}
    await session.emit({"type": "session.created", "session": session_event})
    try:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                break
            if message.get("text") is not None:
                await session.on_text(message["text"])
    finally:
        await session.close()


def serve(port: int, deflate: bool, stale: bool = False) -> None:
    import uvicorn

    ANSWER_FRAMES[:] = _answer_frames()
    STALE[0] = stale
    # As Ray Serve's proxy starts uvicorn (ray/serve/_private/http_util.py), but for the
    # one setting measured here.
    config = uvicorn.Config(
        echo_app,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        access_log=False,
        log_level="warning",
        ws_per_message_deflate=deflate,
        ws_max_size=16 * 1024 * 1024,
    )
    uvicorn.Server(config).run()


# --- the client side ---------------------------------------------------------------------------


class EchoServer:
    """The echo server in a child process, and its CPU time."""

    def __init__(self, deflate: bool, stale: bool = False) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "loadtest.bench_client", "--serve", str(self.port)]
        command += ["--server-deflate", "on" if deflate else "off", *(["--server-stale"] if stale else [])]
        self._process = subprocess.Popen(command)
        self.cpu = psutil.Process(self._process.pid)
        deadline = time.monotonic() + 60
        while self.stats() is None:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the echo server did not start")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    def stats(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/bench-stats", timeout=5) as reply:
                return dict(json.load(reply))
        except OSError:
            return None

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(10)


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


async def _loop_lag(lags: list[float]) -> None:
    while True:
        before = time.monotonic()
        await asyncio.sleep(LAG_EVERY_S)
        lags.append(time.monotonic() - before - LAG_EVERY_S)


async def measure(
    server: EchoServer,
    sessions: int,
    compression: str | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    from loadtest.prompts import tone_prompts  # not in the echo server: it imports torch

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
    lags: list[float] = []
    lagging = asyncio.ensure_future(_loop_lag(lags))
    me = psutil.Process()
    client_before, server_before, started = _cpu_s(me), _cpu_s(server.cpu), time.monotonic()
    logs = await asyncio.gather(*(session(i) for i in range(sessions)))
    client_user, client_system = (now - then for now, then in zip(_cpu_s(me), client_before, strict=True))
    server_cpu = sum(_cpu_s(server.cpu)) - sum(server_before)
    client_cpu = client_user + client_system
    wall = time.monotonic() - started
    lagging.cancel()
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
    lags.sort()
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
        "stale_bytes": sum(response.stale_bytes for response in responses)
        + sum(log.unattributed_stale_bytes for log in logs),
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
            for sessions in args.sessions:
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_client", description=__doc__)
    parser.add_argument("--sessions", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--duration-s", type=float, default=30.0, help="each session's life (default 30)")
    parser.add_argument("--ramp-s", type=float, default=5.0, help="start the sessions over this long")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--interrupt-rate", type=float, default=0.3)
    parser.add_argument("--cancel-rate", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--client-module", default="loadtest.client", help="where Session comes from")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio", help="the client's event loop")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--server-deflate", choices=["on", "off"], default="on", help=argparse.SUPPRESS)
    parser.add_argument("--server-stale", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.server_deflate == "on", args.server_stale)
        return 0
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(bench(args))
    else:
        result = asyncio.run(bench(args))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
