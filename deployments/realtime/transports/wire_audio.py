"""The audio formats a session's client may speak, in and out, and their conversion.

Inside the server an answer is PCM16 at 24 kHz and the input goes to the models at 16 kHz,
whatever the wire carries; a format converts at the edge only. The GA protocol names three:
``audio/pcm`` (PCM16 at 24 kHz), and the telephone's G.711 ``audio/pcmu`` (μ-law) and
``audio/pcma`` (A-law), 8 kHz with one byte a sample and no ``rate`` field. Resampling is
soxr's, streamed, so that no seam is heard between frames.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
from openai.types.realtime.realtime_audio_formats import AudioPCM, AudioPCMA, AudioPCMU

from deployments.realtime.protocol import ProtocolError
from handlers import g711
from handlers.audio import REALTIME_RATE, StreamResampler, float_to_pcm16, pcm16_to_float

TELEPHONE_RATE = 8_000
"""G.711's rate: the only one it has."""


@dataclass(frozen=True)
class WireAudio:
    """One audio format of the protocol."""

    type: str
    rate: int
    law: str | None
    """G.711's companding (``"ulaw"``, ``"alaw"``); ``None``: PCM16."""

    @property
    def bytes_per_second(self) -> int:
        return self.rate * (1 if self.law else 2)

    def seconds(self, nbytes: int) -> float:
        """How long ``nbytes`` of this format play."""
        return nbytes / self.bytes_per_second

    def describe(self) -> AudioPCM | AudioPCMU | AudioPCMA:
        """The format as ``session.created``/``session.updated`` show it."""
        if self.law == "ulaw":
            return AudioPCMU(type="audio/pcmu")
        if self.law == "alaw":
            return AudioPCMA(type="audio/pcma")
        return AudioPCM(type="audio/pcm", rate=REALTIME_RATE)

    def samples(self, data: bytes) -> np.ndarray:
        """The client's bytes as float32 samples at ``rate``; ``ValueError`` if they cannot be."""
        if self.law is None:
            return pcm16_to_float(data)
        return g711.decode(data, self.law).astype(np.float32) / 32768.0

    def wire_bytes(self, samples: np.ndarray) -> bytes:
        """Float32 samples at ``rate`` as the wire's bytes (the inverse of :meth:`samples`)."""
        pcm16 = float_to_pcm16(samples)
        return pcm16 if self.law is None else g711.encode(np.frombuffer(pcm16, dtype="<i2"), self.law)


PCM16 = WireAudio("audio/pcm", REALTIME_RATE, None)
"""The server's own audio: every answer is made in it, whatever the wire carries."""
PCMU = WireAudio("audio/pcmu", TELEPHONE_RATE, "ulaw")
PCMA = WireAudio("audio/pcma", TELEPHONE_RATE, "alaw")
_BY_TYPE = {wire.type: wire for wire in (PCM16, PCMU, PCMA)}


def audio_ms(pcm16_bytes: int) -> float:
    """How long ``pcm16_bytes`` of the server's own audio (:data:`PCM16`) play, in ms."""
    return PCM16.seconds(pcm16_bytes) * 1000


def wire_audio(requested: Any, param: str, current: WireAudio) -> WireAudio:
    """The format a ``session.update`` asks for (``None``: ``current`` stays), refusing what
    is not served with ``unsupported_value``."""
    if requested is None:
        return current
    wire = _BY_TYPE.get(requested.type or current.type)
    if wire is None:
        raise ProtocolError("unsupported_value", f"{requested.type!r} is not served: {_SERVED}", f"{param}.type")
    rate = getattr(requested, "rate", None)  # the SDK's types give G.711 none; Azure's take 8000
    if rate is not None and rate != (REALTIME_RATE if wire is PCM16 else TELEPHONE_RATE):
        raise ProtocolError("unsupported_value", f"{wire.type} is served at {wire.rate} Hz only", f"{param}.rate")
    return wire


_SERVED = "audio/pcm (24000 Hz), audio/pcmu and audio/pcma (8000 Hz) are"


class AnswerEncoder:
    """Answers' 24 kHz PCM16 as a wire's bytes, frame by frame, one resampler stream at a time:
    a new answer or format starts a fresh one. The resampler's filter holds the last ~64 ms
    back, so an empty frame (the end of a spoken piece) lets it out and the next piece starts
    afresh too: nothing of a sentence is lost or runs into the next."""

    def __init__(self) -> None:
        self._stream: tuple[str, WireAudio, StreamResampler] | None = None

    def encode(self, response_id: str, wire: WireAudio, pcm16: bytes) -> bytes:
        if wire.law is None:
            return pcm16
        if self._stream is None or self._stream[:2] != (response_id, wire):
            self._stream = (response_id, wire, StreamResampler(REALTIME_RATE, wire.rate))
        samples = self._stream[2].process(pcm16_to_float(pcm16), last=not pcm16)
        if not pcm16:
            self._stream = None
        return wire.wire_bytes(samples)

    def reset(self) -> None:
        """What was held back is dropped (the caller's audio was cleared)."""
        self._stream = None
