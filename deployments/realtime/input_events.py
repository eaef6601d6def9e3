"""The client's audio in: ``input_audio_buffer.*`` events (audio appended in the session's
input format, or a transport's ``CallerAudio`` in its own, committed as a user item, cleared) and the
audio of a user audio item."""

from collections.abc import Callable

import numpy as np
from openai.types.realtime import (
    ConversationItem,
    InputAudioBufferAppendEvent,
    InputAudioBufferClearedEvent,
    InputAudioBufferClearEvent,
    InputAudioBufferCommitEvent,
)

from deployments.realtime.audio_input import AudioInput
from deployments.realtime.items import MIN_AUDIO_MS
from deployments.realtime.kit import SessionKit
from deployments.realtime.limits import InputGuard
from deployments.realtime.protocol import ProtocolError, new_id, server_event
from deployments.realtime.transports.wire_audio import WireAudio
from deployments.realtime.turn_taking.taker import TurnTaker
from handlers.audio import SPEECH_RATE, b64_audio_decode, resample


class InputAudioEvents:
    def __init__(
        self,
        kit: SessionKit,
        audio: AudioInput,
        guard: InputGuard,
        turns: TurnTaker,
        on_audio: Callable[[bytes, WireAudio], None] | None = None,
    ) -> None:
        """``on_audio``: told of each piece of audio taken in (the bytes, their format): every
        caller's audio passes here, whatever carried it."""
        self._kit, self._audio, self._guard, self._turns, self._on_audio = kit, audio, guard, turns, on_audio

    async def append(self, event: InputAudioBufferAppendEvent) -> None:
        await self.append_audio(event.audio)

    async def append_audio(self, audio: str) -> None:
        """Base64 audio in the session's input format."""
        try:
            data = b64_audio_decode(audio)
        except ValueError as exc:
            raise ProtocolError("invalid_value", str(exc), "audio") from None
        await self.append_wire(data, self._kit.settings.input_audio)

    async def append_wire(self, data: bytes, wire: WireAudio) -> None:
        """Audio in ``wire``'s format (the session's input format, or the one a transport's
        ``CallerAudio`` names), checked against the audio rate limit."""
        try:
            samples = wire.samples(data)
        except ValueError as exc:
            raise ProtocolError("invalid_value", str(exc), "audio") from None
        await self._guard.admit_audio(wire.seconds(len(data)))
        self._audio.append(samples, wire.rate)
        if self._on_audio is not None:
            self._on_audio(data, wire)

    async def commit(self, event: InputAudioBufferCommitEvent) -> None:
        utterance = await self._audio.commit()
        if len(utterance) < SPEECH_RATE * MIN_AUDIO_MS // 1000:
            raise ProtocolError(
                "input_audio_buffer_commit_empty", f"buffer too small: expected at least {MIN_AUDIO_MS}ms of audio"
            )
        self._turns.reset()
        self._turns.transcription.commit(utterance, new_id("item"))

    async def clear(self, event: InputAudioBufferClearEvent) -> None:
        await self._audio.clear()
        self._turns.reset()
        self._kit.outbox.put(server_event(InputAudioBufferClearedEvent))


def is_user_audio(item: ConversationItem) -> bool:
    """Whether a client's item is a user's recorded audio (added as speech is: transcribed)."""
    return item.type == "message" and item.role == "user" and [part.type for part in item.content] == ["input_audio"]


def client_audio(item: ConversationItem, wire: WireAudio, max_seconds: float, param: str) -> np.ndarray:
    """The audio of a client's user audio item (:func:`is_user_audio`, in the session's input
    format ``wire``), at the STT's rate."""
    audio = item.content[0].audio if item.type == "message" else None  # type: ignore[union-attr]
    try:
        data = b64_audio_decode(audio or "")
        samples = wire.samples(data)
    except ValueError as exc:
        raise ProtocolError("invalid_value", str(exc), f"{param}.content.audio") from None
    seconds = wire.seconds(len(data))
    if not MIN_AUDIO_MS / 1000 <= seconds <= max_seconds:
        raise ProtocolError(
            "invalid_value",
            f"input_audio must be {MIN_AUDIO_MS} ms to {max_seconds:g} s long",
            f"{param}.content.audio",
        )
    return resample(samples, wire.rate, SPEECH_RATE)
