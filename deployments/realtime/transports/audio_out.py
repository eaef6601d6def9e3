"""The port through which an answer's audio leaves for the caller, whatever carries it.

The response side makes :class:`AnswerAudio` frames (24 kHz PCM16) and hands them to the
outbox, which keeps them in order with the session's events and drops a cancelled answer's;
its send loop gives each to the transport's :class:`AudioOut`, and a :data:`CLEAR_AUDIO`
queued behind a barge-in's events to its ``clear``. Each transport owns its codec and how
its caller plays the audio:

- a WebSocket client plays what it is sent: frames leave as ``response.output_audio.delta``
  events in the session's output format (``transports.websocket.WebSocketAudio``), paced
  by the session (``Playback.room``) at most ``audio_lead_ms`` ahead;
- WebRTC plays them on the server's own track, in real time: it can pause and clear;
- Twilio gets μ-law ``media`` messages and a ``mark`` after each, whose echoes say what the
  caller has played (``deployments.realtime.transports.twilio``).
"""

from dataclasses import dataclass
from typing import ClassVar, Protocol

from deployments.realtime.transports.wire_audio import WireAudio


@dataclass(slots=True)
class AnswerAudio:
    """One frame of an answer's audio on its way out: an output event of the outbox, like
    the delta a WebSocket client gets for it (so it is dropped when its answer is cancelled)."""

    type: ClassVar[str] = "response.output_audio.delta"
    response_id: str
    item_id: str
    output_index: int
    wire: WireAudio
    """The session's output format when the answer began."""
    pcm16: bytes
    """24 kHz PCM16; empty at the end of each spoken piece (an encoder lets out what its
    resampler held)."""


class ClearAudio:
    """Control, queued behind a barge-in's (or cancel's) events: the caller stops playing."""

    type: ClassVar[str] = "audio.clear"


CLEAR_AUDIO = ClearAudio()


class AudioOut(Protocol):
    @property
    def plays_itself(self) -> bool:
        """Whether the server plays the audio in real time (WebRTC's track): it can pause it
        and needs no pacing. Otherwise the caller plays what it is sent, paced by the session."""
        ...

    async def play(self, frame: AnswerAudio) -> None:
        """Send (or queue for playing) one frame; called in order by the outbox's send loop."""
        ...

    def finished(self, response_id: str) -> None:
        """The answer's ``response.done`` went out: nothing more of it comes."""
        ...

    async def clear(self) -> None:
        """Stop what the caller hears now and drop what it was sent and has not played."""
        ...

    def pause(self, paused: bool) -> None:
        """Hold (``True``) or go on with the answer; only where ``plays_itself``."""
        ...

    def played_ms(self, response_id: str) -> float | None:
        """How much of the answer the caller is known to have played (``None``: only the
        caller knows; it says so with ``conversation.item.truncate``)."""
        ...
