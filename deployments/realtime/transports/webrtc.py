"""WebRTC calls (``POST /v1/realtime/calls``, as OpenAI's GA API has them), with aiortc.

A call is the same :class:`RealtimeSession` behind another :class:`Transport`:
- client events arrive on the ``oai-events`` data channel, and server events leave on it;
- the microphone is an Opus track: decoded and resampled to 24 kHz PCM16, it reaches the
  session as ``CallerAudio`` of 100 ms in :data:`PCM16` (served as ``input_audio_buffer.append``
  is, whatever the session's input format), so every input limit applies unchanged;
- the answer's audio goes to an Opus track the server paces in real time (the track is the
  session's :class:`AudioOut` port): no event carries it. The server plays the audio, so a
  barge-in, a cancel or ``output_audio_buffer.clear`` (which the session serves by clearing
  the track) empties its queue: playback stops at once, with ``output_audio_buffer.cleared``; and
  ``output_audio_buffer.started``/``stopped`` say when the answer begins and ends playing.
  While the session decides whether speech is an interruption, playback pauses (silence,
  nothing dropped) and resumes where it stopped if it was not.
A call whose peer goes (hang-up, a closed channel, a failed connection, or its microphone
falling silent for ``PEER_GONE_AFTER_S``: a tab closed, a network gone) ends its session.
"""

import asyncio
import contextlib
import fractions
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from openai import BaseModel as OpenAIModel
from openai.types.realtime.realtime_server_event import (
    OutputAudioBufferCleared,
    OutputAudioBufferStarted,
    OutputAudioBufferStopped,
)

from cancel import spawn_detached
from deployments.realtime.protocol import encode, server_event
from deployments.realtime.transports.audio_out import AnswerAudio
from deployments.realtime.transports.config import IceServer
from deployments.realtime.transports.port import CallerAudio, ClientLeft
from deployments.realtime.transports.wire_audio import PCM16
from handlers.audio import REALTIME_RATE

FRAME_SAMPLES = REALTIME_RATE // 50
"""20 ms: the frame the answer track plays and the microphone is batched in (×5)."""
DATA_CHANNEL = "oai-events"
PEER_GONE_AFTER_S = 5.0
"""No microphone frame for this long (twice this for the first): the peer is gone. A browser
sends one every 20 ms while its track lives, muted or not; ICE's consent check alone takes
~30 s. Only a caller whose offer sends audio has a track to watch (``_on_track``)."""


class BadOffer(ValueError):
    """The SDP offer cannot be answered (HTTP 400 with this message)."""


@dataclass(frozen=True)
class IceServers:
    """The configured STUN/TURN servers (``ingress.webrtc``), credentials read from the
    environment: for the server's peer connections, and as the voice page is given them."""

    for_server: list[RTCIceServer]
    for_page: list[dict[str, Any]]

    @classmethod
    def from_config(cls, servers: list[IceServer]) -> "IceServers":
        for_server, for_page = [], []
        for server in servers:
            credential = _credential(server.credential_env)
            for_server.append(RTCIceServer(server.urls, server.username, credential))
            if server.offer_to_page:
                entry = {"urls": server.urls, "username": server.username, "credential": credential}
                for_page.append({key: value for key, value in entry.items() if value is not None})
        return cls(for_server, for_page)


def _credential(variable: str | None) -> str | None:
    if variable is None:
        return None
    if variable not in os.environ:
        raise RuntimeError(f"an ingress.webrtc ICE server's credential_env names {variable!r}, which is not set")
    return os.environ[variable]


class AnswerTrack(MediaStreamTrack):
    """The answer's audio as the server plays it: 20 ms frames in real time, silence when
    there is nothing to say or while paused; ``clear`` stops playback at once. The session's
    :class:`AudioOut` port for a call."""

    kind = "audio"
    plays_itself = True

    def __init__(self, tell: Callable[[OpenAIModel], None]) -> None:
        super().__init__()
        self._tell = tell
        self._queue = bytearray()
        self._response_id: str | None = None
        """The response whose audio is playing (``started`` was said, ``stopped`` not yet)."""
        self._finished: str | None = None
        """A response whose audio is all here: ``stopped`` once it has played."""
        self._started_at: float | None = None
        self._samples = 0
        self.paused = False

    async def play(self, frame: AnswerAudio) -> None:
        if self._response_id != frame.response_id:
            self._response_id = frame.response_id
            self._tell(server_event(OutputAudioBufferStarted, response_id=frame.response_id))
        self._queue += frame.pcm16

    def finished(self, response_id: str) -> None:
        """``response_id`` sent all its audio: playback stops when it has played."""
        self._finished = response_id

    def pause(self, paused: bool) -> None:
        self.paused = paused

    def played_ms(self, response_id: str) -> float | None:
        return None  # the session's clock is the track's: it counts what was played

    async def clear(self) -> None:
        """Stop playing now, dropping what was queued."""
        self.paused = False
        if self._response_id is not None:
            self._queue.clear()
            self._tell(server_event(OutputAudioBufferCleared, response_id=self._response_id))
            self._response_id = None

    async def recv(self) -> av.AudioFrame:
        if self._started_at is None:
            self._started_at = time.monotonic()
        wait = self._started_at + self._samples / REALTIME_RATE - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)  # real-time pacing: the track is the clock
        chunk = b"" if self.paused else bytes(self._queue[: 2 * FRAME_SAMPLES])
        del self._queue[: len(chunk)]
        if (
            not self.paused
            and not self._queue
            and self._response_id is not None
            and self._response_id == self._finished
        ):
            self._tell(server_event(OutputAudioBufferStopped, response_id=self._response_id))
            self._response_id = None
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME_SAMPLES)
        frame.planes[0].update(chunk.ljust(2 * FRAME_SAMPLES, b"\0"))
        frame.sample_rate = REALTIME_RATE
        frame.pts = self._samples
        frame.time_base = fractions.Fraction(1, REALTIME_RATE)
        self._samples += FRAME_SAMPLES
        return frame


class WebRTCTransport:
    """One call's peer connection as the session's transport."""

    def __init__(self, peer: RTCPeerConnection) -> None:
        self._peer = peer
        self._incoming: asyncio.Queue[str | bytes | CallerAudio | None] = asyncio.Queue()
        """The data channel's messages as sent, the microphone's audio; ``None``: the peer went."""
        self._channel: Any = None
        self._unsent: list[str] = []
        """Server events from before the data channel opened (``session.created``)."""
        self.answer = AnswerTrack(self._send_event)
        self.audio = self.answer
        self._tasks: set[asyncio.Task[None]] = set()
        peer.on("datachannel", self._on_channel)
        peer.on("track", self._on_track)
        peer.on("connectionstatechange", self._on_state)

    @classmethod
    async def answer_offer(cls, offer_sdp: str, ice_servers: list[RTCIceServer]) -> tuple["WebRTCTransport", str]:
        """A transport for the call ``offer_sdp`` opens, and the SDP answer (with the
        candidates gathered through ``ice_servers`` too)."""
        if "m=audio" not in offer_sdp:
            raise BadOffer("the SDP offer has no audio: offer a microphone track (m=audio)")
        peer = RTCPeerConnection(RTCConfiguration(iceServers=ice_servers))
        transport = cls(peer)
        try:
            await peer.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
            peer.addTrack(transport.answer)
            await peer.setLocalDescription(await peer.createAnswer())
        except Exception as exc:
            await peer.close()
            raise BadOffer(f"the SDP offer could not be answered: {str(exc)[:200]}") from None
        return transport, peer.localDescription.sdp

    async def receive(self) -> str | bytes | CallerAudio:
        message = await self._incoming.get()
        if message is None:
            raise ClientLeft
        return message

    async def send(self, event: OpenAIModel) -> None:
        self._send_text(encode(event))

    async def close(self, code: int, reason: str) -> None:
        self._incoming.put_nowait(None)
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self._peer.close()

    def _send_event(self, event: Any) -> None:
        self._send_text(encode(event))

    def _send_text(self, text: str) -> None:
        if self._channel is None or self._channel.readyState != "open":
            self._unsent.append(text)
            return
        self._channel.send(text)

    def _on_channel(self, channel: Any) -> None:
        if channel.label != DATA_CHANNEL:
            return
        self._channel = channel

        def opened() -> None:
            unsent, self._unsent = self._unsent, []
            for text in unsent:
                channel.send(text)

        channel.on("open", opened)
        if channel.readyState == "open":
            opened()
        channel.on("message", self._on_message)
        channel.on("close", lambda: self._incoming.put_nowait(None))

    def _on_message(self, message: str | bytes) -> None:
        self._incoming.put_nowait(message)  # the client's event, for the session to parse

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            task = spawn_detached(self._microphone(track))
            self._tasks.add(task)

    async def _microphone(self, track: MediaStreamTrack) -> None:
        """The caller's audio as ``CallerAudio`` of 100 ms in :data:`PCM16`; its size (for
        the event size limit) is its byte count."""
        resampler = av.AudioResampler(format="s16", layout="mono", rate=REALTIME_RATE)
        pending = bytearray()
        wait_s = 2 * PEER_GONE_AFTER_S  # the first frame waits for the connection's set-up too
        while True:
            try:
                async with asyncio.timeout(wait_s):
                    frame = await track.recv()
            except (MediaStreamError, TimeoutError):
                self._incoming.put_nowait(None)  # hung up, or gone without a word
                return
            wait_s = PEER_GONE_AFTER_S
            assert isinstance(frame, av.AudioFrame)  # an audio track's frames
            for converted in resampler.resample(frame):
                pending += bytes(converted.planes[0])[: 2 * converted.samples]
            if len(pending) >= 10 * FRAME_SAMPLES:
                self._incoming.put_nowait(CallerAudio(bytes(pending), PCM16, len(pending)))
                pending.clear()

    async def _on_state(self) -> None:
        if self._peer.connectionState in ("failed", "closed"):
            self._incoming.put_nowait(None)
