"""The echo server the load client is measured and tested against (``loadtest.benchmarks.client_cost``,
``tests/loadtest/test_client.py``).

A uvicorn app in a process of its own (``EchoServer`` starts it, so its CPU is not the
client's) that speaks just enough of the Realtime protocol for every path of the client to
run. It hears a question end after 500 ms of silence (the real server's default), answers
with the event sequence the real ingress sends (ids, transcription, transcript deltas, audio
deltas in the real server's field order) and 2 s of audio faster than real time, and
cancels an answer on ``response.cancel`` or when speech starts while it streams (OpenAI's
rule: a backchannel interrupts too). ``python -m loadtest.doubles.echo_server --port P`` serves it.
"""

import argparse
import asyncio
import base64
import json
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

Send = Callable[[dict[str, Any]], Awaitable[None]]


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
    A ``stale`` server is a broken one, for tests: after each ``response.done`` it sends one
    more audio delta of that response, and one of a response it never created."""

    def __init__(self, send: Send, stale: bool = False) -> None:
        self._send = send
        self._stale = stale
        self._speaking = False
        self._silent = 0
        self._turns = 0
        self._received_ms = 0.0
        """Input audio so far: the positions ``audio_start_ms`` and ``audio_end_ms`` name."""
        self._speech_end_ms = 0.0
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
        seconds = len(audio) * 3 / 4 / (2 * REALTIME_RATE)
        STATS["audio_in_s"] += seconds
        at_ms, self._received_ms = self._received_ms, self._received_ms + 1000 * seconds
        if audio.strip("A=") != "":  # speech
            self._silent = 0
            if not self._speaking:
                self._speaking = True
                started = {"audio_start_ms": int(at_ms), "item_id": "x"}
                await self.emit({"type": "input_audio_buffer.speech_started", **started})
                await self.cancel()  # a barge-in
            return
        if self._speaking:
            if self._silent == 0:
                self._speech_end_ms = at_ms
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
            await self.emit_text(_audio_delta(ANSWER_FRAMES[0], f"{response_id}_uncreated", "item_stale"))

    async def _respond(self, question: str) -> None:
        heard, answer = f"item_{secrets.token_urlsafe(8)}", f"item_{secrets.token_urlsafe(8)}"
        stopped = {"audio_end_ms": int(self._speech_end_ms), "item_id": heard}
        await self.emit({"type": "input_audio_buffer.speech_stopped", **stopped})
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


class EchoServer:
    """The echo server in a child process, and its CPU time."""

    def __init__(self, deflate: bool, stale: bool = False) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "loadtest.doubles.echo_server", "--port", str(self.port)]
        command += ["--deflate", "on" if deflate else "off", *(["--stale"] if stale else [])]
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.doubles.echo_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--deflate", choices=["on", "off"], default="on", help="uvicorn's ws_per_message_deflate")
    parser.add_argument("--stale", action="store_true", help="a broken server: stale audio of both kinds")
    args = parser.parse_args(argv)
    serve(args.port, args.deflate == "on", args.stale)


if __name__ == "__main__":
    main()
