"""The session's transport port: client input in, server events out, the answer's audio out
(its :class:`AudioOut` port), and a close.

The session sees only :class:`Transport`; a WebSocket (``transports.websocket``), a WebRTC
call and a Twilio media stream are its adapters. What a transport hands the session is typed
(:data:`ClientInput`): a client's own event as the text it sent (``str | bytes``, which the
session parses), or :data:`CallerInput`: caller audio as bytes with its wire format, a
caller's other message, words to say, or an event the transport's side made, already typed.
No transport writes JSON for the session to parse. A client that has gone is
:class:`ClientLeft`, whichever direction notices it first.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from openai import BaseModel as OpenAIModel
from openai.types.realtime import RealtimeClientEvent

from deployments.realtime.transports.audio_out import AudioOut
from deployments.realtime.transports.wire_audio import WireAudio


class ClientLeft(Exception):
    """The client went away: the session ends normally."""


@dataclass(frozen=True, slots=True)
class CallerAudio:
    """The caller's audio as a transport took it (a Twilio ``media``, a WebRTC microphone's
    frames): served as ``input_audio_buffer.append``, with no event written to be parsed
    again (that cost more than all the rest of a 20 ms frame)."""

    audio: bytes
    wire: WireAudio
    """The format ``audio`` is in, whatever the session's input format is."""
    size: int
    """The message's size, for the event size limit."""


@dataclass(frozen=True, slots=True)
class CallerMessage:
    """Any other message of such a transport's caller (a Twilio ``mark`` or ``dtmf``, or one
    it refuses): the session's guard admits it like any client event, so one budget covers
    all that a caller sends, and only then does the transport serve it."""

    size: int
    """The message's size, for the event size limit."""
    serve: Callable[[], None]
    """Serves it once admitted; raises ``limits.Violation`` for a message the transport
    refuses (a strike: its peer hears no ``error``, and a real one never sends it)."""


@dataclass(frozen=True, slots=True)
class AgentLine:
    """Words the transport's side has the agent say as they are (a phone call's greeting,
    its prompt after a silence), unless an answer is under way. Made by the server, never
    sent by a caller: no budget of the caller's is spent on it."""

    text: str


@dataclass(frozen=True, slots=True)
class MadeEvent:
    """A client event the transport's side makes (a call's opening ``session.update``, a
    keypad entry's ``conversation.item.create`` and ``response.create``), already typed:
    served as the client's own. No budget of the caller's is spent on it: the message that
    led to it (a ``dtmf``) was admitted already."""

    event: RealtimeClientEvent


CallerInput = CallerAudio | CallerMessage | AgentLine | MadeEvent
ClientInput = str | bytes | CallerInput
"""What a transport hands the session: a client's event as sent, or :data:`CallerInput`."""


class SendEvent(Protocol):
    """Sends one server event to the client (``ClientLeft`` if it has gone)."""

    async def __call__(self, event: OpenAIModel) -> None: ...


class Transport(Protocol):
    async def receive(self) -> ClientInput:
        """The next client input (``ClientLeft`` once the client has gone)."""
        ...

    async def send(self, event: OpenAIModel) -> None:
        """Send one server event (``ClientLeft`` if the client has gone)."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Close with ``code`` (RFC 6455); nothing happens if it is closed already."""
        ...

    @property
    def audio(self) -> AudioOut:
        """How the answer's audio leaves for this client."""
        ...
