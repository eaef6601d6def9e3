"""Voice-to-voice of a phone turn over the Twilio route beside the same turn over
``/v1/realtime``, on the same server in the same run (the real CPU models by default).

The same Piper-spoken questions are played at real-time pace into a Realtime session (24 kHz
PCM16, ``loadtest.client.spoken_turns.voice_to_voice_turns``) and into a Twilio media stream
(8 kHz μ-law, 20 ms a ``media``, :class:`TwilioCaller`). Voice to voice is the end of the
question's speech (its last frame sent) to the answer's first audio
(``response.output_audio.delta``; Twilio's first ``media``).
Readable lines, then one JSON object with both routes' p50 and p95 and the phone's extra p50.

    s2s-bench phone --turns 10
"""

import argparse
import json
import secrets
import time
from typing import Any

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import REALTIME_RATE, pcm16_to_float, resample
from loadtest import options
from loadtest.client.spoken_turns import QUESTIONS, Speaker, voice_to_voice_turns
from loadtest.client.twilio_caller import TwilioCaller
from loadtest.scenarios.launch import LOCAL_CONFIG, served
from loadtest.stats import percentile

LEAD_IN_S = 0.2
TRAILING_SILENCE_S = 1.5


def mulaw(pcm16: bytes) -> bytes:
    return PCMU.wire_bytes(resample(pcm16_to_float(pcm16), REALTIME_RATE, PCMU.rate))


async def bench_phone_turns(url: str, speaker: Speaker, turns: int) -> dict[str, Any]:
    voice_to_voice = []
    silence = bytes([0xFF]) * PCMU.rate  # μ-law's zero, 1 s
    parameters = {"greeting": ""}  # no greeting: the call's first answer is its first turn's, as over /v1/realtime
    name = f"bench-{secrets.token_hex(4)}"  # a CallSid seen before would resume that call's session
    async with TwilioCaller.dial(f"{url}/twilio/media-stream", parameters, play_speed=50.0, name=name) as call:
        for turn in range(turns):
            await call.say(silence[: int(LEAD_IN_S * PCMU.rate)])
            await call.say(mulaw(speaker.speech(QUESTIONS[turn % len(QUESTIONS)])))
            speech_end = time.monotonic()
            await call.say(silence[: int(TRAILING_SILENCE_S * PCMU.rate)])
            await call.until_answered(turn + 1)
            first_audio_at = call.answered()[turn].first_audio_at
            assert first_audio_at is not None
            voice_to_voice.append((first_audio_at - speech_end) * 1000)
            print(f"phone turn {turn + 1:2d}: voice-to-voice {voice_to_voice[-1]:7.1f} ms", flush=True)
    return {
        "phone_turns": turns,
        "phone_voice_to_voice_ms_p50": percentile(voice_to_voice, 50),
        "phone_voice_to_voice_ms_p95": percentile(voice_to_voice, 95),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url=None, config=LOCAL_CONFIG, turns=10)


async def main(args: argparse.Namespace) -> None:
    with served(args.url, args.config) as url:
        speaker = Speaker()
        realtime = await voice_to_voice_turns(url, speaker, args.turns)
        phone = await bench_phone_turns(url, speaker, args.turns)
    result = {key: realtime[key] for key in ("turns", "voice_to_voice_ms_p50", "voice_to_voice_ms_p95")} | phone
    result["phone_extra_ms_p50"] = round(phone["phone_voice_to_voice_ms_p50"] - realtime["voice_to_voice_ms_p50"], 1)
    print(json.dumps(result))
