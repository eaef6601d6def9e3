"""A WebRTC call (``POST /v1/realtime/calls``) from an aiortc client, no browser: offer and
answer, speech in, spoken audio and events out, a barge-in the server stops at once, a
hang-up that ends the session, and a bad offer refused."""

import asyncio
import contextlib
import fractions
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample

FRAME = REALTIME_RATE // 50
LONG_QUESTION = "Please tell me a long story about a dragon who learns to bake bread in a small village."


class Microphone(MediaStreamTrack):
    """What the caller says: 24 kHz PCM16 in 20 ms frames at real-time pace, else silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = bytearray()
        self._started: float | None = None
        self._samples = 0

    def say(self, pcm16: bytes) -> None:
        self._queue += pcm16

    async def recv(self) -> av.AudioFrame:
        self._started = self._started or time.monotonic()
        await asyncio.sleep(max(0.0, self._started + self._samples / REALTIME_RATE - time.monotonic()))
        chunk = bytes(self._queue[: 2 * FRAME]).ljust(2 * FRAME, b"\0")
        del self._queue[: 2 * FRAME]
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk)
        frame.sample_rate, frame.pts = REALTIME_RATE, self._samples
        frame.time_base = fractions.Fraction(1, REALTIME_RATE)
        self._samples += FRAME
        return frame


class Call:
    """The client's side of one call: its events, and when it heard sound."""

    def __init__(self) -> None:
        self.peer = RTCPeerConnection()
        self.microphone = Microphone()
        self.peer.addTrack(self.microphone)
        self.channel = self.peer.createDataChannel("oai-events")
        self.events: list[dict[str, Any]] = []
        self.event_times: list[float] = []
        self.sound_at: list[float] = []
        """When each frame of sound (not silence) arrived."""
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.channel.on("message", self._on_message)
        self.peer.on("track", self._on_track)

    def _on_message(self, message: str) -> None:
        self.events.append(json.loads(message))
        self.event_times.append(time.monotonic())
        self._arrived.set()

    def _on_track(self, track: MediaStreamTrack) -> None:
        async def listen() -> None:
            with contextlib.suppress(MediaStreamError):
                while True:
                    frame = await track.recv()
                    if np.abs(frame.to_ndarray()).max() > 300:  # type: ignore[union-attr]
                        self.sound_at.append(time.monotonic())

        self._reader = asyncio.ensure_future(listen())

    async def until(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                self._arrived.clear()
                await self._arrived.wait()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]

    async def hang_up(self) -> None:
        await self.peer.close()
        if self._reader is not None:
            self._reader.cancel()


def post_offer(url: str, sdp: str) -> tuple[int, str]:
    request = urllib.request.Request(url, sdp.encode(), {"Content-Type": "application/sdp"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


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
    await call.peer.setLocalDescription(await call.peer.createOffer())
    status, answer = await asyncio.to_thread(post_offer, f"{base}/v1/realtime/calls", call.peer.localDescription.sdp)
    assert status == 201, answer
    await call.peer.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    try:
        await call.until(lambda e: e["type"] == "session.created")
        call.microphone.say(pcm("What is the capital of France?"))
        done = await call.until(lambda e: e["type"] == "response.done")
        assert done["response"]["status"] == "completed"
        heard = call.of_type("conversation.item.input_audio_transcription.completed")[0]["transcript"]
        assert "capital" in heard.lower() or "france" in heard.lower(), heard  # robust to a misheard word
        await call.until(lambda e: e["type"] == "output_audio_buffer.stopped")
        assert len(call.sound_at) * 20 >= 500, "the answer was heard on the audio track"
        assert not call.of_type("response.output_audio.delta"), "audio goes on the track, not the channel"

        call.microphone.say(pcm(LONG_QUESTION))
        playing = await call.until(
            lambda e: e["type"] == "output_audio_buffer.started" and e["response_id"] != done["response"]["id"]
        )
        call.microphone.say(pcm("Stop. What is two plus two?"))
        cleared = await call.until(lambda e: e["type"] == "output_audio_buffer.cleared")
        assert cleared["response_id"] == playing["response_id"]
        cleared_at = call.event_times[call.events.index(cleared)]
        await asyncio.sleep(1.0)  # listening for a while: does the cut answer go on sounding?
        later = call.events[call.events.index(cleared) :]
        next_answer = next((e for e in later if e["type"] == "output_audio_buffer.started"), None)
        next_at = call.event_times[call.events.index(next_answer)] if next_answer else float("inf")
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
