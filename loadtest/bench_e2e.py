"""Voice-to-voice latency and barge-in latency of the served app, through the real stack.

Starts the application from ``cluster/local.yaml`` on a local Ray (or talks to ``--url``),
then plays Piper-spoken questions into Realtime sessions at real-time pace, as a
microphone would:

- voice to voice: end of the user's speech (when its last sample was sent) -> first
  ``response.output_audio.delta``. This includes the VAD's ``silence_duration_ms`` wait,
  which is reported too, as is the server's share (``speech_stopped`` -> first delta).
- where the server's time went, per turn: the ingress's own timeline of each response
  (``GET /stats/turns``: VAD lag, transcript, prompt, LLM first delta, first speakable
  piece, TTS first audio, first audio queued, in ms from ``speech_stopped``; and whether
  the answer started speculatively in the pause was adopted), as medians over the turns;
- barge-in: the user speaks during an answer; ``speech_started`` -> the last audio delta
  of the old response to arrive (0 when none follows it), and -> its ``response.done``;
- the same questions over a WebRTC call (``POST /v1/realtime/calls``, an aiortc caller):
  end of speech (its last frame sent on the microphone track) -> the first frame of sound
  on the answer's track, Opus both ways and the caller's jitter buffer included.

Readable lines, then one JSON object on the last line.
"""

import argparse
import asyncio
import base64
import json
import statistics
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from openai import AsyncOpenAI

from deployments.ports import free_port
from handlers.audio import REALTIME_RATE, float_to_pcm16, resample
from handlers.tts import TextToSpeech
from loadtest.webrtc_call import Call

QUESTIONS = [
    "What is the capital of France?",
    "What color is the sky?",
    "How many legs does a dog have?",
    "What is the capital of Germany?",
    "Name a fruit that is yellow.",
]
LONG_QUESTION = "Tell me a long story about a brave knight and a dragon."
FRAME_MS = 40
CONFIG = Path(__file__).parents[1] / "cluster" / "local.yaml"


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50, p90 and max (``None`` where there are no values: JSON has no NaN)."""
    if not values:
        return dict.fromkeys(("p50", "p90", "max"))
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "max": round(max(values), 1)}


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


async def bench_turns(url: str, speaker: Speaker, turns: int) -> dict[str, Any]:
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


async def bench_barge_in(url: str, speaker: Speaker, rounds: int) -> dict[str, Any]:
    tail, to_done, leaked = [], [], 0
    sdk = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    for round_ in range(rounds):
        async with sdk.realtime.connect(model="s2s") as connection:
            log: list[tuple[float, Any]] = []
            receiver = asyncio.ensure_future(receive(connection, log, asyncio.Event()))
            await speaker.say(connection, LONG_QUESTION, trailing_silence_s=1.0)
            _, first = await wait_for(log, lambda e: e.type == "response.output_audio.delta")
            old = first.response_id
            await speaker.say(connection, "Stop, please.", trailing_silence_s=0.3)
            done_at, done = await wait_for(log, lambda e, old=old: e.type == "response.done" and e.response.id == old)
            started_at = [s for s, e in log if e.type == "input_audio_buffer.speech_started"][1]
            old_deltas = [s for s, e in log if e.type == "response.output_audio.delta" and e.response_id == old]
            late = [s for s in old_deltas if s > started_at]
            leaked += len(late)
            tail.append(max(0.0, (max(old_deltas) - started_at) * 1000))
            to_done.append((done_at - started_at) * 1000)
            assert done.response.status == "cancelled"
            print(
                f"barge-in {round_ + 1:2d}: last old audio {tail[-1]:6.2f} ms after speech_started, "
                f"response.done after {to_done[-1]:6.2f} ms",
                flush=True,
            )
            receiver.cancel()
    return {
        "barge_in_rounds": rounds,
        "barge_in_last_old_audio_ms_p50": percentile(tail, 50),
        "barge_in_last_old_audio_ms_p99": percentile(tail, 99),
        "barge_in_to_cancelled_done_ms_p50": percentile(to_done, 50),
        "barge_in_to_cancelled_done_ms_p99": percentile(to_done, 99),
        "old_audio_deltas_after_speech_started": leaked,
    }


def _a_response_done_not_in(answered: set[str]) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == "response.done" and event["response"]["id"] not in answered


def _an_event(kind: str, **fields: Any) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == kind and all(event.get(k) == v for k, v in fields.items())


async def bench_webrtc_turns(url: str, speaker: Speaker, turns: int) -> dict[str, Any]:
    voice_to_voice = []
    call = Call()
    status, answer = await call.dial(url.replace("ws", "http", 1) + "/realtime/calls")
    assert status == 201, answer
    try:
        await call.until(lambda e: e["type"] == "session.created")
        await call.microphone.say(bytes(REALTIME_RATE))  # half a second of silence: the call settles
        for turn in range(turns):
            answered = {e["response"]["id"] for e in call.of_type("response.done")}
            speech_end = await call.microphone.say(speaker.speech(QUESTIONS[turn % len(QUESTIONS)]))
            done = await call.until(_a_response_done_not_in(answered))
            played = done["response"]["id"]
            await call.until(_an_event("output_audio_buffer.stopped", response_id=played))
            first_sound = next(t for t in call.sound_at if t > speech_end)
            voice_to_voice.append((first_sound - speech_end) * 1000)
            print(f"webrtc turn {turn + 1:2d}: voice-to-voice {voice_to_voice[-1]:7.1f} ms", flush=True)
    finally:
        await call.hang_up()
    return {
        "webrtc_turns": turns,
        "webrtc_voice_to_voice_ms_p50": percentile(voice_to_voice, 50),
        "webrtc_voice_to_voice_ms_p95": percentile(voice_to_voice, 95),
    }


def start_local_app(config: Path) -> str:
    import ray
    from ray import serve

    from deployments.app import build_app

    port = free_port()
    app = yaml.safe_load(config.read_text())["applications"][0]
    ray.init(include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(app["args"]), name=app["name"], route_prefix="/")
    return f"ws://127.0.0.1:{port}/v1"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="ws://host:port/v1 of a running server (default: start one)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="Serve config of the app to start")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--barge-ins", type=int, default=20)
    args = parser.parse_args()
    url = args.url or start_local_app(args.config)
    speaker = Speaker()
    result = await bench_turns(url, speaker, args.turns)
    result |= await bench_barge_in(url, speaker, args.barge_ins)
    result |= await bench_webrtc_turns(url, speaker, args.turns)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
