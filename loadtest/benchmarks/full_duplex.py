"""Full-Duplex-Bench-style figures for ``s2s-bench turns``: the compact ``fdb`` summary of a
mode's parts and the ``phone`` part (real
interruptions and backchannels over the Twilio media-stream route, in μ-law).

Full-Duplex-Bench (FDB v1, arXiv:2503.04721; v1.5, arXiv:2507.23159) scores four behaviours
with a take-over rate (TOR: the share of trials in which the model took the turn) and
latencies; this bench scores ours the same way, from its own Piper audio:

- pause handling: a sentence with a mid-sentence pause; taken over when it became more than one
  turn or a response began before the sentence's speech ended (lower is better);
- backchannel: a backchannel or a cough during an answer; taken over when the answer was
  cancelled or a new response began (lower is better);
- smooth turn-taking: a finished question; taken over when its answer's audio came (higher is
  better), latency from the end of its speech to that audio (over the answered turns only, as
  FDB's is);
- user interruption: a real interruption during an answer; taken over when the answer stopped
  and a new response's audio came (higher is better); stop latency from the interruption's
  first voiced frame to the last sound of the old answer a playing client heard, response
  latency from the end of its speech to the new response's first audio.
"""

import asyncio
import contextlib
import functools
import time
from collections.abc import Sequence
from typing import Any

from deployments.realtime.wire_audio import PCMU
from handlers.audio import REALTIME_RATE, pcm16_to_float, resample
from loadtest.client.spoken_turns import LONG_QUESTION, Speaker
from loadtest.client.twilio_caller import TwilioCaller
from loadtest.stats import percentile

NOISE_REDUCTION = ("near_field", "far_field")
"""``audio.input.noise_reduction.type`` values a session may ask for (OpenAI's)."""
ANSWER_WAIT_S = 15.0
"""How long after an interruption's speech ended a new response's audio is waited for."""

PCMU_SILENCE = b"\xff"
"""μ-law's zero."""


def p50_p95(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "n": len(values)}


def rate(count: int, of: int) -> float | None:
    return round(count / of, 3) if of else None


def summary(parts: dict[str, Any]) -> dict[str, Any]:
    """The ``fdb`` object of one mode, from whichever of its parts ran."""
    fdb: dict[str, Any] = {}
    if "paused" in parts:
        paused = parts["paused"]
        fdb["pause_handling"] = {"tor": rate(paused["taken_over"], paused["sentences"]), "of": paused["sentences"]}
    if "backchannels" in parts:
        said = parts["backchannels"]
        fdb["backchannel"] = {"tor": rate(said["taken_over"], said["said"]), "of": said["said"]}
    if "voice_to_voice" in parts:
        turns = parts["voice_to_voice"]
        fdb["smooth_turn_taking"] = {
            "tor": rate(turns["answered"], turns["asked"]),
            "of": turns["asked"],
            "latency_ms": turns["voice_to_voice_ms"],
        }
    if "interruptions" in parts:
        cut = parts["interruptions"]
        fdb["user_interruption"] = {
            "tor": rate(cut["taken_over"], cut["said"]),
            "of": cut["said"],
            "stop_latency_ms": cut["fdb"]["onset_to_last_heard_ms"],
            "speech_started_ms": cut["fdb"]["onset_to_speech_started_ms"],
            "response_latency_ms": cut["fdb"]["speech_end_to_answer_ms"],
        }
    transports: dict[str, Any] = {}
    if "interruptions" in parts:
        transports["websocket"] = parts["interruptions"]["fdb"]["onset_to_last_heard_ms"]
    if "webrtc" in parts:
        transports["webrtc"] = parts["webrtc"]["fdb"]["onset_to_last_sound_ms"]
    if transports:
        fdb["onset_to_stopped_ms"] = transports
    return fdb


async def bench_phone(url: str, speaker: Speaker, said: Sequence[tuple[str, bytes]], into_s: float) -> dict[str, Any]:
    """Over the Twilio media-stream route (8 kHz μ-law, the server's default turn detection),
    one call per round: the long question, then ``into_s`` into its answer as the phone plays
    it, what ``said`` holds (kind, μ-law audio): ``interruption`` rounds must get a ``clear``
    and a new answer, ``backchannel`` rounds neither. The phone stops playing at the
    ``clear``; a paced answer's audio runs out sooner (the server stops sending at the
    candidate, and Twilio holds at most the lead): onset → the last sound played before the
    ``clear`` is its stop latency."""
    observe_s = 3.0
    silence = PCMU_SILENCE * PCMU.rate
    to_clear, to_stop, to_answer = [], [], []
    taken = {"interruption": 0, "backchannel": 0}
    counts = {"interruption": 0, "backchannel": 0}
    question = to_mulaw(speaker.speech(LONG_QUESTION))
    for index, (kind, audio) in enumerate(said):
        counts[kind] += 1
        async with TwilioCaller.dial(f"{url}/twilio/media-stream", name=f"fdb{index}") as call:
            await call.say(silence[: PCMU.rate // 5] + question + silence)
            await call.until(lambda: call.answers[-1].first_audio_at is not None, 90)
            playing = len(call.answers) - 1
            first_audio_at = call.answers[playing].first_audio_at
            assert first_audio_at is not None
            await asyncio.sleep(max(0.0, first_audio_at + into_s - time.monotonic()))
            clears = len(call.clears)
            onset = time.monotonic()
            await call.say(audio)
            speech_end = time.monotonic()
            await call.say(silence[: int(observe_s * PCMU.rate)])
            cleared = len(call.clears) > clears
            answered_at = None
            if cleared or kind == "interruption":
                with contextlib.suppress(TimeoutError):
                    await call.until(functools.partial(answered_after, call, playing), ANSWER_WAIT_S)
                answered_at = answer_after(call, playing)
        if cleared:
            to_clear.append((call.clears[clears] - onset) * 1000)
            to_stop.append((last_played(call.played, onset, call.clears[clears]) - onset) * 1000)
        if kind == "interruption" and cleared and answered_at is not None:
            taken[kind] += 1
            to_answer.append((answered_at - speech_end) * 1000)
        elif kind == "backchannel" and (cleared or answered_at is not None):
            taken[kind] += 1
        clear_ms = f"{to_clear[-1]:.0f} ms (last sound {to_stop[-1]:.0f} ms)" if cleared else "none"
        answer_ms = "none" if answered_at is None else f"{(answered_at - speech_end) * 1000:.0f} ms"
        print(f"  phone {kind} {index}: clear {clear_ms}, new answer {answer_ms}", flush=True)
    return {
        "turn_detection": "the server's default (Twilio calls cannot set it)",
        "interruptions": counts["interruption"],
        "backchannels": counts["backchannel"],
        "interruptions_taken_over": taken["interruption"],
        "backchannels_taken_over": taken["backchannel"],
        "fdb": {
            "user_interruption_tor": rate(taken["interruption"], counts["interruption"]),
            "backchannel_tor": rate(taken["backchannel"], counts["backchannel"]),
            "onset_to_clear_ms": p50_p95(to_clear),
            "onset_to_last_heard_ms": p50_p95(to_stop),
            "speech_end_to_answer_ms": p50_p95(to_answer),
        },
    }


def last_played(played: Sequence[tuple[float, float]], onset: float, clear: float) -> float:
    """When the caller last heard the answer before its ``clear`` (``onset`` if nothing
    played after it)."""
    ends = [min(began + seconds, clear) for began, seconds in played if began < clear]
    return max([onset, *ends])


def answer_after(call: TwilioCaller, playing: int) -> float | None:
    """When the first answer after answer ``playing`` began to arrive, if one has."""
    return next((a.first_audio_at for a in call.answers[playing + 1 :] if a.first_audio_at is not None), None)


def answered_after(call: TwilioCaller, playing: int) -> bool:
    return answer_after(call, playing) is not None


def to_mulaw(pcm16: bytes) -> bytes:
    """24 kHz PCM16 as a phone sends it: 8 kHz μ-law (``phone.mulaw``'s encoding)."""
    return bytes(PCMU.wire_bytes(resample(pcm16_to_float(pcm16), REALTIME_RATE, PCMU.rate)))
