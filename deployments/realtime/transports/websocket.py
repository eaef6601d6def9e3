"""The WebSocket transport: Starlette's WebSocket as the session's :class:`Transport`.

A client sends the protocol's events as text, handed to the session as sent, and gets the
server's as text; the answer's audio leaves as ``response.output_audio.delta`` events in the
session's output format (:class:`WebSocketAudio`, its :class:`AudioOut` port), paced by the
session (``Playback.room``) since the client plays what it is sent.
"""

import base64
import contextlib

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import ResponseAudioDeltaEvent
from starlette.websockets import WebSocketState

from deployments.realtime.protocol import encode, server_event
from deployments.realtime.transports.audio_out import AnswerAudio
from deployments.realtime.transports.port import ClientLeft, SendEvent
from deployments.realtime.transports.wire_audio import AnswerEncoder


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


class WebSocketAudio:
    """Frames as ``response.output_audio.delta`` events, base64 in the session's format."""

    plays_itself = False

    def __init__(self, send: SendEvent) -> None:
        self._send = send
        self._encoder = AnswerEncoder()

    async def play(self, frame: AnswerAudio) -> None:
        encoded = self._encoder.encode(frame.response_id, frame.wire, frame.pcm16)
        if not encoded:
            return
        audio = base64.b64encode(encoded).decode("ascii")
        delta = server_event(
            ResponseAudioDeltaEvent,
            delta=audio,
            response_id=frame.response_id,
            item_id=frame.item_id,
            output_index=frame.output_index,
            content_index=0,
        )
        await self._send(delta)

    def finished(self, response_id: str) -> None:
        pass  # the client plays it out

    async def clear(self) -> None:
        self._encoder.reset()  # the client stops at speech_started (or a cancelled response.done)

    def pause(self, paused: bool) -> None:
        pass  # paced instead: the session stops sending

    def played_ms(self, response_id: str) -> float | None:
        return None
