"""Phone calls through Twilio Media Streams: the same :class:`RealtimeSession` behind a
transport that speaks Twilio's messages (https://www.twilio.com/docs/voice/media-streams/websocket-messages).

- A call opens with ``connected`` then ``start`` (:func:`read_start`): its ``streamSid`` and
  ``customParameters`` (the ``<Parameter>``s of the TwiML: ``api_key``, ``instructions``).
  The session then speaks ``audio/pcmu`` both ways, as Twilio does (8 kHz μ-law).
- ``media`` in is the caller's audio, appended as it comes (any length); ``mark`` in is the
  echo of one of ours: the audio before it has been played (or cleared); ``dtmf`` in is a
  keypad digit (``keypad.Keypad``); ``stop`` in, or the socket going, ends the session.
- Out, the answer's audio is ``media`` with a ``mark`` after each (:class:`TwilioAudio`, the
  session's audio port): a barge-in sends ``clear`` at once, and the cut answer is kept as
  far as the marks say the caller heard it. After each answer's audio comes the mark
  ``response.done <id> <status>``, echoed once the answer has played out. Nothing else goes
  to Twilio: its stream takes only ``media``, ``mark`` and ``clear``, so the session's
  ``error`` events are logged.
- Bad input (a frame that is not JSON or not Twilio's, a bad payload, a flood) is logged
  with the call's id and costs nothing else; the session's own limits apply to the audio,
  and a caller that keeps breaking them is hung up (1008), which Twilio's debugger shows.
"""

import asyncio
import base64
import contextlib
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import RealtimeErrorEvent, ResponseDoneEvent

from deployments.realtime.audio_out import AnswerAudio
from deployments.realtime.keypad import Keypad
from deployments.realtime.playout import audio_ms
from deployments.realtime.transport import CallerAudio, ClientLeft, send_text
from deployments.realtime.wire_audio import PCMU, AnswerEncoder

logger = logging.getLogger(__name__)

MEDIA_STREAM_PATH = "/v1/twilio/media-stream"
START_TIMEOUT_S = 10.0
"""Twilio sends ``connected`` and ``start`` as the stream opens; a client that does not is
no Twilio stream."""


class BadStream(ValueError):
    """The stream did not open as Twilio's do (closed 1008 with this as the reason)."""


@dataclass(frozen=True)
class StreamStart:
    """What a stream's ``start`` message says."""

    stream_sid: str
    call_sid: str
    parameters: dict[str, str] = field(default_factory=dict)
    """``customParameters``: the TwiML's ``<Parameter>`` names and values."""


async def read_start(websocket: WebSocket) -> StreamStart:
    """Read a stream's opening (``connected``, then ``start``); ``BadStream`` for anything
    else before ``start`` (a ``media`` before it included)."""
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                message = _parsed(await websocket.receive_text())
                if message.get("event") == "connected":
                    continue
                if message.get("event") != "start":
                    raise BadStream(f"{str(message.get('event'))[:40]!r} before 'start'")
                start = message.get("start")
                if not isinstance(start, dict) or not isinstance(start.get("streamSid"), str):
                    raise BadStream("'start' without start.streamSid")
                parameters = start.get("customParameters") or {}
                if not isinstance(parameters, dict):
                    raise BadStream("start.customParameters is not an object")
                return StreamStart(
                    start["streamSid"],
                    str(start.get("callSid", "")),
                    {str(key): str(value) for key, value in parameters.items()},
                )
    except TimeoutError:
        raise BadStream(f"no 'start' within {START_TIMEOUT_S:g} s") from None
    except (KeyError, RuntimeError):  # Starlette's answer to a binary frame or a closed socket
        raise BadStream("the stream closed or sent a binary frame before 'start'") from None


def _parsed(text: str) -> dict[str, Any]:
    try:
        message = json.loads(text)
    except ValueError:
        raise BadStream("a message that is not JSON") from None
    if not isinstance(message, dict):
        raise BadStream("a message that is not a JSON object")
    return message


def twiml_connect(stream_url: str, parameters: dict[str, str]) -> str:
    """The TwiML that answers a call by connecting it to ``stream_url`` (bidirectional)."""
    tags = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in parameters.items())
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(stream_url)}>{tags}</Stream></Connect></Response>"
    )


class TwilioAudio:
    """The answer's audio as μ-law ``media`` messages, each followed by a ``mark`` naming
    how far into its answer it ends: Twilio echoes a mark once the audio before it has
    played, so the echoes are the caller's real position."""

    plays_itself = False

    def __init__(self, send: "SendMessage", stream_sid: str) -> None:
        self._send, self._sid = send, stream_sid
        self._encoder = AnswerEncoder()
        self._sent_ms: dict[str, float] = {}
        self._marks: dict[str, tuple[str, float]] = {}
        """Marks sent and not yet echoed: name -> (response id, ms of it played by then)."""
        self._played_ms: dict[str, float] = {}
        self._next_mark = 0
        self._unplayed = False
        """Audio went out since the last ``clear``."""

    async def play(self, frame: AnswerAudio) -> None:
        if frame.response_id not in self._sent_ms:  # a new answer: the last one's counts go
            self._sent_ms = {frame.response_id: 0.0}
            self._played_ms = {frame.response_id: 0.0}
        mulaw = self._encoder.encode(frame.response_id, PCMU, frame.pcm16)
        end_ms = self._sent_ms[frame.response_id] = self._sent_ms[frame.response_id] + audio_ms(len(frame.pcm16))
        if not mulaw:
            return
        payload = base64.b64encode(mulaw).decode("ascii")
        await self._send({"event": "media", "streamSid": self._sid, "media": {"payload": payload}})
        self._next_mark += 1
        name = str(self._next_mark)
        self._marks[name] = (frame.response_id, end_ms)
        self._unplayed = True
        await self._send({"event": "mark", "streamSid": self._sid, "mark": {"name": name}})

    def echoed(self, name: str) -> None:
        """Twilio echoed the mark ``name``: what was sent before it has played."""
        mark = self._marks.pop(name, None)
        if mark is not None:
            response_id, end_ms = mark
            self._played_ms[response_id] = max(self._played_ms.get(response_id, 0.0), end_ms)

    def finished(self, response_id: str) -> None:
        pass  # Twilio plays out what it holds

    async def clear(self) -> None:
        """Empty Twilio's buffer; the marks it then echoes are of audio never played."""
        self._marks.clear()
        self._encoder.reset()
        if self._unplayed:
            self._unplayed = False
            await self._send({"event": "clear", "streamSid": self._sid})

    def pause(self, paused: bool) -> None:
        pass  # paced instead: the session stops sending

    def played_ms(self, response_id: str) -> float | None:
        return self._played_ms.get(response_id, 0.0)


class SendMessage:
    """Twilio's messages as JSON text on the socket; ``ClientLeft`` once it has gone."""

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket

    async def __call__(self, message: dict[str, Any]) -> None:
        await send_text(self._ws, json.dumps(message))


class TwilioTransport:
    """One Twilio media stream as the session's transport."""

    def __init__(self, websocket: WebSocket, start: StreamStart, instructions: str | None) -> None:
        self._ws = websocket
        self.start = start
        self._send = SendMessage(websocket)
        self.audio = TwilioAudio(self._send, start.stream_sid)
        self._keypad = Keypad()
        session: dict[str, Any] = {
            "type": "realtime",
            "audio": {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}},
        }
        if instructions is not None:
            session["instructions"] = instructions
        self._pending: deque[str | CallerAudio] = deque([json.dumps({"type": "session.update", "session": session})])
        """Client events made from Twilio's messages, and the call's opening settings."""

    async def receive(self) -> str | bytes | CallerAudio:
        while not self._pending:
            wait_s = self._keypad.wait_s()
            try:
                async with asyncio.timeout(wait_s):
                    message = await self._ws.receive()
            except TimeoutError:
                self._pending.extend(self._keypad.flush())
                continue
            except WebSocketDisconnect:
                raise ClientLeft from None
            if message["type"] == "websocket.disconnect":
                raise ClientLeft
            self._take(message.get("text") or message.get("bytes") or "")
        return self._pending.popleft()

    def _take(self, text: str | bytes) -> None:
        """Turn one of Twilio's messages into client events (or into nothing)."""
        try:
            message = json.loads(text)
            event = message["event"]
        except (ValueError, TypeError, KeyError):
            self._bad(f"a message that is not Twilio's: {str(text)[:80]!r}")
            return
        if event == "media":
            payload = (message.get("media") or {}).get("payload")
            if not isinstance(payload, str):
                self._bad("a media message without media.payload")
                return
            self._pending.append(CallerAudio(payload, len(text)))
        elif event == "mark":
            self.audio.echoed(str((message.get("mark") or {}).get("name")))
        elif event == "dtmf":
            digit = str((message.get("dtmf") or {}).get("digit", ""))
            if digit in "0123456789*#" and len(digit) == 1:
                self._pending.extend(self._keypad.press(digit))
            else:
                self._bad(f"a dtmf digit {digit[:8]!r}")
        elif event == "stop":
            raise ClientLeft
        elif event not in ("connected", "start"):
            self._bad(f"an event {str(event)[:40]!r} Twilio does not send")

    def _bad(self, what: str) -> None:
        logger.warning("twilio call %s sent %s: ignored", self.start.call_sid, what)

    async def send(self, event: OpenAIModel) -> None:
        """Twilio takes no Realtime events: a ``response.done`` becomes a mark after the
        answer's audio (``response.done <id> <status>``: echoed once it has played), and an
        error is logged against the call."""
        if isinstance(event, ResponseDoneEvent):
            response = event.response
            await self._send(
                {
                    "event": "mark",
                    "streamSid": self.start.stream_sid,
                    "mark": {"name": f"response.done {response.id} {response.status}"},
                }
            )
        elif isinstance(event, RealtimeErrorEvent):
            error = event.error
            logger.warning("twilio call %s: %s (%s)", self.start.call_sid, error.message, error.code)

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(RuntimeError):
            await self._ws.close(code=code, reason=reason)
