"""A WebRTC call's transport without a peer connection: its microphone reaches the session
as ``CallerAudio`` in PCM16, and the data channel's text as the client sent it."""

import asyncio
from collections.abc import Callable
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError
from fakes import FakeSocket, FakeStages, Harness

from deployments.realtime.transports.port import CallerAudio, ClientLeft
from deployments.realtime.transports.webrtc import FRAME_SAMPLES, AnswerTrack, WebRTCTransport
from deployments.realtime.transports.websocket import WebSocketTransport
from deployments.realtime.transports.wire_audio import PCM16
from handlers.audio import REALTIME_RATE


class FakePeer:
    def __init__(self) -> None:
        self.handlers: dict[str, Callable[..., Any]] = {}

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        self.handlers[event] = handler

    async def close(self) -> None:
        pass


class Microphone:
    """An audio track of 20 ms frames at 24 kHz, then hung up."""

    kind = "audio"

    def __init__(self, frames: list[bytes]) -> None:
        self._frames = list(frames)
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if not self._frames:
            raise MediaStreamError
        samples = np.frombuffer(self._frames.pop(0), dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = REALTIME_RATE
        frame.pts = self._pts
        self._pts += FRAME_SAMPLES
        return frame


class Channel:
    label = "oai-events"
    readyState = "open"

    def __init__(self) -> None:
        self.handlers: dict[str, Callable[..., Any]] = {}

    def on(self, event: str, handler: Callable[..., Any]) -> None:
        self.handlers[event] = handler

    def send(self, text: str) -> None:
        pass


async def test_the_microphone_reaches_the_session_as_pcm16_caller_audio() -> None:
    peer = FakePeer()
    transport = WebRTCTransport(peer)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    frames = [rng.integers(-3000, 3000, FRAME_SAMPLES, dtype="<i2").tobytes() for _ in range(5)]
    peer.handlers["track"](Microphone(frames))
    async with asyncio.timeout(5):
        audio = await transport.receive()
        assert isinstance(audio, CallerAudio)
        assert audio.wire is PCM16
        assert audio.audio == b"".join(frames), "100 ms of the caller's PCM16, as it came"
        assert audio.size == len(audio.audio)
        with pytest.raises(ClientLeft):  # the track ended: hung up
            await transport.receive()


async def test_the_data_channels_text_goes_to_the_session_as_sent() -> None:
    peer = FakePeer()
    transport = WebRTCTransport(peer)  # type: ignore[arg-type]
    channel = Channel()
    peer.handlers["datachannel"](channel)
    sent = '{"type": "output_audio_buffer.clear"}'
    channel.handlers["message"](sent)
    async with asyncio.timeout(5):
        assert await transport.receive() == sent


class ServerPlayedSocket(WebSocketTransport):
    """A session's transport whose answer the server plays itself, as a WebRTC call's track
    does; what the track tells the caller is kept."""

    def __init__(self, socket: FakeSocket) -> None:
        super().__init__(socket)  # type: ignore[arg-type]
        self.told: list[str] = []
        self._changed = asyncio.Event()
        self.audio = AnswerTrack(self._tell)  # type: ignore[assignment]

    def _tell(self, event: Any) -> None:
        self.told.append(event.type)
        self._changed.set()

    async def told_of(self, kind: str) -> None:
        async with asyncio.timeout(5):
            while kind not in self.told:
                self._changed.clear()
                await self._changed.wait()


async def test_a_clear_from_the_caller_stops_only_its_own_calls_audio() -> None:
    """The data channel's ``output_audio_buffer.clear`` is served by the session as a typed
    event: the call's track drops what it queued, while another session on the same stages,
    whose client plays its own audio, is told the event is not served and keeps its answer."""
    stages = FakeStages()
    stages.tts_chunks, stages.tts_chunk_ms = 3, 500
    played: list[ServerPlayedSocket] = []

    def call(socket: FakeSocket) -> ServerPlayedSocket:
        played.append(ServerPlayedSocket(socket))
        return played[0]

    async with Harness(stages, name="call", transport=call) as a, Harness(stages, name="socket") as b:
        a.socket.client_sends(type="response.create")
        b.socket.client_sends(type="response.create")
        track = played[0].audio
        await b.socket.wait_type("response.output_audio.delta")
        await played[0].told_of("output_audio_buffer.started")
        a.socket.client_sends(type="output_audio_buffer.clear")
        b.socket.client_sends(type="output_audio_buffer.clear")
        await played[0].told_of("output_audio_buffer.cleared")
        assert not track._queue, "the call's queued audio was dropped"
        error = await b.socket.wait_type("error")
        assert error["error"]["code"] == "unsupported_event"
        done = await b.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed", "the other session's answer went on"
        assert not a.socket.of_type("error"), "the call's clear was served, not refused"
