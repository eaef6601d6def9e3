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
import json
from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI

from handlers.audio import REALTIME_RATE
from loadtest import options
from loadtest.client.spoken_turns import LONG_QUESTION, QUESTIONS, Speaker, receive, voice_to_voice_turns, wait_for
from loadtest.client.webrtc_call import Call
from loadtest.scenarios.launch import LOCAL_CONFIG, served
from loadtest.stats import percentile


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url=None, config=LOCAL_CONFIG, turns=20)
    parser.add_argument("--barge-ins", type=options.positive_int, default=20)


async def main(args: argparse.Namespace) -> None:
    with served(args.url, args.config) as url:
        speaker = Speaker()
        result = await voice_to_voice_turns(url, speaker, args.turns)
        result |= await bench_barge_in(url, speaker, args.barge_ins)
        result |= await bench_webrtc_turns(url, speaker, args.turns)
    print(json.dumps(result))
