"""A Realtime client speaking Piper's voice at microphone pace through the openai SDK, for
the benchmarks that time real-model turns (``s2s-bench e2e``, ``turns``, ``phone``).

``Speaker`` makes and keeps the speech; ``receive`` files every event with its arrival time
and ``wait_for`` finds one; ``Round`` is one session of a round of ``turns``;
``voice_to_voice_turns`` asks the questions one after another in one session and times each
answer's first audio from the end of its question, with the server's own timeline of it
(``GET /stats/turns``).
"""

import asyncio
import base64
import contextlib
import json
import statistics
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from openai import AsyncOpenAI

from handlers.audio import REALTIME_RATE, float_to_pcm16, resample
from handlers.tts import TextToSpeech
from loadtest.stats import percentile

QUESTIONS = [
    "What is the capital of France?",
    "What color is the sky?",
    "How many legs does a dog have?",
    "What is the capital of Germany?",
    "Name a fruit that is yellow.",
]
LONG_QUESTION = "Tell me a long story about a brave knight and a dragon."
FRAME_MS = 40


class Speaker:
    """Piper speech as 24 kHz PCM16, streamed at real-time pace like a microphone."""

    def __init__(self) -> None:
        self._tts = TextToSpeech()
        self._cache: dict[str, bytes] = {}

    def speech(self, text: str) -> bytes:
        if text not in self._cache:
            pcm = b"".join(c.pcm16 for c in self._tts.synthesize(text))
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
            self._cache[text] = float_to_pcm16(resample(samples, self._tts.config.output_rate, REALTIME_RATE))
        return self._cache[text]

    async def say(self, connection: Any, text: str, trailing_silence_s: float = 1.5) -> float:
        """Stream lead-in silence, the speech, then silence; return when speech ended."""
        frame = REALTIME_RATE * 2 * FRAME_MS // 1000
        silence = bytes(frame)
        speech = self.speech(text)
        started = time.perf_counter()
        frames = [silence] * 5 + [speech[o : o + frame] for o in range(0, len(speech), frame)]
        speech_end = None
        for index, chunk in enumerate(frames + [silence] * int(trailing_silence_s * 1000 / FRAME_MS)):
            if index == len(frames):
                speech_end = time.perf_counter()
            await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            await asyncio.sleep(max(0.0, started + (index + 1) * FRAME_MS / 1000 - time.perf_counter()))
        assert speech_end is not None
        return speech_end


async def receive(connection: Any, log: list[tuple[float, Any]], stop: asyncio.Event) -> None:
    async for event in connection:
        log.append((time.perf_counter(), event))
        if stop.is_set():
            return


async def wait_for(log: list[tuple[float, Any]], predicate: Any, timeout_s: float = 60) -> tuple[float, Any]:
    async with asyncio.timeout(timeout_s):
        while True:
            for stamp, event in log:
                if predicate(event):
                    return stamp, event
            await asyncio.sleep(0.01)


def server_timelines(url: str, response_ids: list[str]) -> list[dict[str, Any]]:
    """The ingress's timelines of these responses (``GET /stats/turns``)."""
    stats_url = url.replace("ws://", "http://").replace("wss://", "https://").removesuffix("/v1") + "/stats/turns"
    with urllib.request.urlopen(stats_url, timeout=10) as reply:
        recent = {turn["response_id"]: turn for turn in json.load(reply)}
    return [recent[r] for r in response_ids if r in recent]


def breakdown(timelines: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of each step over the turns, and how many answers were adopted from the pause."""
    steps = sorted({key for t in timelines for key in t if key.endswith("_ms") and t[key] is not None})
    medians = {
        f"{step.removesuffix('_ms')}_ms_p50": round(
            statistics.median(t[step] for t in timelines if t.get(step) is not None), 1
        )
        for step in steps
    }
    return {"adopted": sum(bool(t["adopted"]) for t in timelines), "of_turns": len(timelines)} | medians


async def voice_to_voice_turns(url: str, speaker: Speaker, turns: int) -> dict[str, Any]:
    voice_to_voice, server_side, response_ids = [], [], []
    sdk = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    async with sdk.realtime.connect(model="s2s") as connection:
        log: list[tuple[float, Any]] = []
        receiver = asyncio.ensure_future(receive(connection, log, asyncio.Event()))
        _, created = await wait_for(log, lambda e: e.type == "session.created")
        silence_ms = created.session.audio.input.turn_detection.silence_duration_ms
        for turn in range(turns):
            log.clear()
            speech_end = await speaker.say(connection, QUESTIONS[turn % len(QUESTIONS)])
            first_audio, delta = await wait_for(log, lambda e: e.type == "response.output_audio.delta")
            stopped, _ = await wait_for(log, lambda e: e.type == "input_audio_buffer.speech_stopped")
            await wait_for(log, lambda e: e.type == "response.done")
            voice_to_voice.append((first_audio - speech_end) * 1000)
            server_side.append((first_audio - stopped) * 1000)
            response_ids.append(delta.response_id)
            print(
                f"turn {turn + 1:2d}: voice-to-voice {voice_to_voice[-1]:7.1f} ms, server {server_side[-1]:7.1f} ms",
                flush=True,
            )
        receiver.cancel()
    timelines = await asyncio.to_thread(server_timelines, url, response_ids)
    for turn, timeline in enumerate(timelines):
        print(f"turn {turn + 1:2d} server timeline: {json.dumps(timeline)}", flush=True)
    return {
        "turns": turns,
        "voice_to_voice_ms_p50": percentile(voice_to_voice, 50),
        "voice_to_voice_ms_p95": percentile(voice_to_voice, 95),
        "speech_stopped_to_first_audio_ms_p50": percentile(server_side, 50),
        "speech_stopped_to_first_audio_ms_p95": percentile(server_side, 95),
        "silence_duration_ms": silence_ms,
        "server_breakdown": breakdown(timelines),
    }


class Round:
    """One session for one round: a receive loop, and a microphone at real-time pace."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.log: list[tuple[float, Any]] = []

    async def send(self, pcm: bytes, voiced_bytes: int | None = None) -> tuple[float, float]:
        """Stream ``pcm``; return when its first ``voiced_bytes`` (default: all) began and
        ended going out."""
        frame = REALTIME_RATE * 2 * FRAME_MS // 1000
        voiced_end = len(pcm) if voiced_bytes is None else voiced_bytes
        began = ended = start = time.perf_counter()
        for index, offset in enumerate(range(0, len(pcm), frame)):
            if index == 0:
                began = time.perf_counter()
            if offset < voiced_end <= offset + frame:
                ended = time.perf_counter()
            chunk = base64.b64encode(pcm[offset : offset + frame]).decode()
            await self.connection.input_audio_buffer.append(audio=chunk)
            await asyncio.sleep(max(0.0, start + (index + 1) * FRAME_MS / 1000 - time.perf_counter()))
        return began, ended

    def count(self, kind: str, after: float = 0.0) -> int:
        return sum(1 for stamp, event in self.log if event.type == kind and stamp >= after)

    async def answer_playing(self, speaker: Speaker, into_s: float) -> str:
        """Ask the long question; return the answer's id once it has played ``into_s``."""
        await self.send(speaker.speech(LONG_QUESTION) + silence(1.0))
        at, first = await wait_for(self.log, lambda e: e.type == "response.output_audio.delta", timeout_s=90)
        await asyncio.sleep(max(0.0, at + into_s - time.perf_counter()))  # a listener that far into it
        return str(first.response_id)

    def ended(self, response_id: str) -> Any:
        return next((e for _, e in self.log if e.type == "response.done" and e.response.id == response_id), None)


def session_input(turn_detection: dict[str, Any], noise_reduction: str | None = None) -> dict[str, Any]:
    """``session.audio.input`` of each round: its turn detection, and ``noise_reduction`` if
    asked for."""
    settings: dict[str, Any] = {"turn_detection": turn_detection}
    if noise_reduction is not None:
        settings["noise_reduction"] = {"type": noise_reduction}
    return settings


@contextlib.asynccontextmanager
async def new_round(url: str, mode: dict[str, Any], noise_reduction: str | None = None) -> AsyncIterator[Round]:
    """One Realtime session over the WebSocket, its input set by :func:`session_input`."""
    sdk = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    async with sdk.realtime.connect(model="s2s") as connection:
        round_ = Round(connection)
        receiver = asyncio.ensure_future(receive(connection, round_.log, asyncio.Event()))
        session: Any = {"type": "realtime", "audio": {"input": session_input(mode, noise_reduction)}}
        await connection.session.update(session=session)
        await wait_for(round_.log, lambda e: e.type == "session.updated")
        try:
            yield round_
        finally:
            receiver.cancel()


def silence(seconds: float) -> bytes:
    return bytes(2 * int(seconds * REALTIME_RATE))
