"""A WebRTC caller of ``POST /v1/realtime/calls`` (aiortc), for the bench and the tests.

It offers a microphone track and the ``oai-events`` data channel, as a browser does, and
keeps what it gets: the server's events (with their arrival times) and when each frame of
sound (not silence) arrived on the answer's track.
"""

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

from handlers.audio import REALTIME_RATE

FRAME = REALTIME_RATE // 50
"""20 ms, as a browser's Opus frames."""
SOUND_LEVEL = 300
"""Peak PCM16 level above which an answer frame is sound, not silence."""


class Microphone(MediaStreamTrack):
    """What the caller says: 24 kHz PCM16 in 20 ms frames at real-time pace, else silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = bytearray()
        self._started: float | None = None
        self._samples = 0
        self._gone = asyncio.Event()
        self._said_all: asyncio.Event | None = None
        self.said_at = 0.0
        """When the frame holding the last sample of what was said went out."""

    async def say(self, pcm16: bytes) -> float:
        """Queue ``pcm16`` and return once its last frame went out: when the speech ended."""
        self._queue += pcm16
        self._said_all = asyncio.Event()
        await self._said_all.wait()
        return self.said_at

    def say_soon(self, pcm16: bytes) -> None:
        """Queue ``pcm16`` without waiting for it to be sent."""
        self._queue += pcm16

    def vanish(self) -> None:
        """Send nothing more, and say nothing of it: as a closed tab or a lost network."""
        self._gone.set()

    async def recv(self) -> av.AudioFrame:
        if self._gone.is_set():
            await asyncio.Event().wait()  # never: the sender waits on a track that went quiet
        self._started = self._started or time.monotonic()
        await asyncio.sleep(max(0.0, self._started + self._samples / REALTIME_RATE - time.monotonic()))
        chunk = bytes(self._queue[: 2 * FRAME]).ljust(2 * FRAME, b"\0")
        del self._queue[: 2 * FRAME]
        if not self._queue and self._said_all is not None:
            self.said_at = time.monotonic()
            self._said_all.set()
            self._said_all = None
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
        """When each frame of sound (not silence) arrived (``time.monotonic``)."""
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self.channel.on("message", self._on_message)
        self.peer.on("track", self._on_track)

    async def dial(self, calls_url: str, bearer: str | None = None) -> tuple[int, str]:
        """Offer the call (with ``bearer``: a client secret, or the key); the HTTP status and
        the body (the SDP answer when 201)."""
        await self.peer.setLocalDescription(await self.peer.createOffer())
        status, answer = await asyncio.to_thread(post_offer, calls_url, self.peer.localDescription.sdp, bearer)
        if status == 201:
            await self.peer.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        return status, answer

    def _on_message(self, message: str) -> None:
        self.events.append(json.loads(message))
        self.event_times.append(time.monotonic())
        self._arrived.set()

    def _on_track(self, track: MediaStreamTrack) -> None:
        async def listen() -> None:
            with contextlib.suppress(MediaStreamError):
                while True:
                    frame = await track.recv()
                    if np.abs(frame.to_ndarray()).max() > SOUND_LEVEL:  # type: ignore[union-attr]
                        self.sound_at.append(time.monotonic())

        self._reader = asyncio.ensure_future(listen())

    async def until(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict[str, Any]:
        """The first event (of all so far) that ``predicate`` accepts, waiting for it."""
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                self._arrived.clear()
                await self._arrived.wait()

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]

    def arrived_at(self, event: dict[str, Any]) -> float:
        return self.event_times[self.events.index(event)]

    async def hang_up(self) -> None:
        await self.peer.close()
        if self._reader is not None:
            self._reader.cancel()


def post_offer(url: str, sdp: str, bearer: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/sdp"} | ({"Authorization": f"Bearer {bearer}"} if bearer else {})
    request = urllib.request.Request(url, sdp.encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
