"""A WebRTC call (``POST /v1/realtime/calls``) from an aiortc client, no browser: offer and
answer, speech in, spoken audio and events out, a barge-in the server stops at once, a
hang-up that ends the session, a bad offer refused, and a caller that vanishes."""

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest
from realtime_client import FINISHED, LONG_QUESTION

from deployments.realtime.transports.webrtc import PEER_GONE_AFTER_S
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from loadtest.client.webrtc_call import Call, post_offer

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""


def sessions(base: str) -> int:
    with urllib.request.urlopen(f"{base}/healthz", timeout=10) as reply:
        count: int = json.loads(reply.read())["sessions"]
    return count


async def test_a_webrtc_call_talks_is_interrupted_and_hangs_up(
    realtime_url: str, speak: Callable[..., np.ndarray]
) -> None:
    base = realtime_url.replace("ws://", "http://").removesuffix("/v1")

    def pcm(text: str) -> bytes:
        return float_to_pcm16(resample(speak(text, silence_s=0.5), SPEECH_RATE, REALTIME_RATE))

    before = await asyncio.to_thread(sessions, base)  # an earlier test's calls may still be ending
    status, message = await asyncio.to_thread(post_offer, f"{base}/v1/realtime/calls", "v=0\nnot an offer")
    assert status == 400 and "invalid_offer" in message

    call = Call()
    status, answer = await call.dial(f"{base}/v1/realtime/calls")
    assert status == 201, answer
    try:
        await call.until(lambda e: e["type"] == "session.created")
        call.microphone.say_soon(pcm("What is the capital of France?"))
        done = await call.until(lambda e: e["type"] == "response.done")
        assert done["response"]["status"] in FINISHED
        heard = call.of_type("conversation.item.input_audio_transcription.completed")[0]["transcript"]
        assert "capital" in heard.lower() or "france" in heard.lower(), heard  # robust to a misheard word
        await call.until(lambda e: e["type"] == "output_audio_buffer.stopped")
        assert len(call.sound_at) * 20 >= 500, "the answer was heard on the audio track"
        assert not call.of_type("response.output_audio.delta"), "audio goes on the track, not the channel"

        call.microphone.say_soon(pcm(LONG_QUESTION))
        playing = await call.until(
            lambda e: e["type"] == "output_audio_buffer.started" and e["response_id"] != done["response"]["id"]
        )
        call.microphone.say_soon(pcm("Stop. What is two plus two?"))
        cleared = await call.until(lambda e: e["type"] == "output_audio_buffer.cleared")
        assert cleared["response_id"] == playing["response_id"]
        cleared_at = call.arrived_at(cleared)
        await asyncio.sleep(1.0)  # listening for a while: does the cut answer go on sounding?
        later = call.events[call.events.index(cleared) :]
        next_answer = next((e for e in later if e["type"] == "output_audio_buffer.started"), None)
        next_at = call.arrived_at(next_answer) if next_answer else float("inf")
        tail = [t - cleared_at for t in call.sound_at if cleared_at < t < next_at]
        print(json.dumps({"webrtc_sound_after_clear_ms": round(1000 * max(tail, default=0.0))}))
        # What was already on the wire (and in the caller's jitter buffer) still plays: measured
        # 0.36 s here on a loaded machine. An answer that went on playing would sound for seconds.
        assert max(tail, default=0.0) < 0.6, "the cut answer stops sounding at the caller within 600 ms"
    finally:
        await call.hang_up()
    async with asyncio.timeout(15):  # the hang-up ends the session
        while await asyncio.to_thread(sessions, base) > before:
            await asyncio.sleep(0.5)  # polling the server's count: no event reaches the test


async def test_a_call_whose_peer_vanishes_ends_within_seconds(
    realtime_url: str, speak: Callable[..., np.ndarray]
) -> None:
    """A tab closed or a network gone mid-call sends no hang-up: the caller's media just
    stops, and the server ends the session once it has heard nothing for ``PEER_GONE_AFTER_S``."""
    base = realtime_url.replace("ws://", "http://").removesuffix("/v1")
    before = await asyncio.to_thread(sessions, base)  # the test above waited for its own to end
    call = Call()
    status, answer = await call.dial(f"{base}/v1/realtime/calls")
    assert status == 201, answer
    try:
        await call.until(lambda e: e["type"] == "session.created")
        assert await asyncio.to_thread(sessions, base) == before + 1
        call.microphone.say_soon(float_to_pcm16(resample(speak("Hello there."), SPEECH_RATE, REALTIME_RATE)))
        await call.until(lambda e: e["type"] == "input_audio_buffer.speech_started")  # media flows
        call.microphone.vanish()
        gone_at = time.monotonic()
        async with asyncio.timeout(PEER_GONE_AFTER_S + 10):
            while await asyncio.to_thread(sessions, base) > before:
                await asyncio.sleep(0.2)  # polling the server's count: a vanished peer hears nothing
        ended_after_s = time.monotonic() - gone_at
        print(json.dumps({"webrtc_vanished_peer_session_ended_after_s": round(ended_after_s, 1)}))
        assert ended_after_s >= PEER_GONE_AFTER_S - 0.5, "it ended for its silence, not for something else"
        assert ended_after_s < PEER_GONE_AFTER_S + 3, "within seconds of its silence"
    finally:
        await call.hang_up()
