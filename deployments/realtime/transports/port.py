"""The session's transport: client events in, server events out, the answer's audio out
(its :class:`AudioOut` port), and a close.

The session sees only :class:`Transport`; :class:`WebSocketTransport` is Starlette's
WebSocket (a WebRTC call and a Twilio media stream are others). A client that has gone is
:class:`ClientLeft`, whichever direction notices it first.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from starlette.websockets import WebSocketState

from deployments.realtime.protocol import encode
from deployments.realtime.transports.audio_out import AudioOut, WebSocketAudio


class ClientLeft(Exception):
    """The client went away: the session ends normally."""


@dataclass(frozen=True, slots=True)
class CallerAudio:
    """The caller's audio as a transport of another protocol took it (a Twilio ``media``):
    served as ``input_audio_buffer.append``, with no event written to be parsed again (that
    cost more than all the rest of a 20 ms frame)."""

    audio: bytes
    """In the session's input format."""
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


CallerInput = CallerAudio | CallerMessage | AgentLine


class Transport(Protocol):
    async def receive(self) -> str | bytes | CallerInput:
        """The next client message (``ClientLeft`` once the client has gone)."""
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


class WebSocketTransport:
    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket
        self.audio = WebSocketAudio(self.send)

    async def receive(self) -> str | bytes:
        try:
            message = await self._ws.receive()
        except WebSocketDisconnect:
            raise ClientLeft from None
        if message["type"] == "websocket.disconnect":
            raise ClientLeft
        data: str | bytes = message.get("text") or message.get("bytes") or ""
        return data

    async def send(self, event: OpenAIModel) -> None:
        await send_text(self._ws, encode(event))

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(RuntimeError):  # already closed by the client
            await self._ws.close(code=code, reason=reason)


async def send_text(websocket: WebSocket, text: str) -> None:
    """Send ``text`` on a WebSocket; ``ClientLeft`` if the client has gone."""
    try:
        await websocket.send_text(text)
    except (WebSocketDisconnect, OSError) as exc:
        raise ClientLeft from exc
    except RuntimeError as exc:  # Starlette's answer to sending on a closed socket
        if WebSocketState.DISCONNECTED in (websocket.client_state, websocket.application_state):
            raise ClientLeft from exc
        raise
