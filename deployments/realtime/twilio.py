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
- Every message in passes the session's input guard (``transport.CallerAudio``,
  ``transport.CallerMessage``): one budget for the call, whatever it sends. Bad input (a
  frame that is not JSON or not Twilio's, a bad payload or digit) is refused and counts as
  breaking a limit, since a real Twilio never sends it; a caller that keeps breaking limits
  is hung up (1008), which Twilio's debugger shows. The call's first ``LOGGED_PROBLEMS``
  problems are logged with its id, the rest only counted (:class:`CallLog`).
"""

import asyncio
import base64
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import RealtimeErrorEvent, ResponseDoneEvent

from deployments.realtime.audio_out import AnswerAudio
from deployments.realtime.keypad import Keypad
from deployments.realtime.limits import Violation
from deployments.realtime.playout import audio_ms
from deployments.realtime.transport import CallerAudio, CallerInput, CallerMessage, ClientLeft, send_text
from deployments.realtime.wire_audio import PCMU, AnswerEncoder

logger = logging.getLogger(__name__)

MEDIA_STREAM_PATH = "/v1/twilio/media-stream"
START_TIMEOUT_S = 5.0
"""Twilio sends ``connected`` and ``start`` as the stream opens; a client that does not is
no Twilio stream, and holds one of the ingress's requests until then."""
MAX_PENDING_MARKS = 256
"""Marks kept awaiting their echo (25.6 s of 100 ms frames, well past the longest lead a paced
answer keeps): past it the oldest is forgotten, so a peer that never echoes cannot grow them;
a later mark's echo tells as much, so the played position is at worst low, never high."""
LOGGED_PROBLEMS = 5
"""Problems of one call logged one by one; the rest are counted, the count logged as it ends."""
DIGITS = frozenset("0123456789*#")


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
        if len(self._marks) > MAX_PENDING_MARKS:
            del self._marks[next(iter(self._marks))]
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


class CallLog:
    """One call's warnings: the first ``LOGGED_PROBLEMS`` in full, then only a count, logged
    once as the call ends, so a caller that floods the server cannot flood its log."""

    def __init__(self, call_sid: str) -> None:
        self._sid = call_sid
        self._logged = self._unlogged = 0

    def problem(self, what: str) -> None:
        if self._logged < LOGGED_PROBLEMS:
            self._logged += 1
            logger.warning("twilio call %s: %s", self._sid, what)
        else:
            self._unlogged += 1

    def ended(self, how: str) -> None:
        if self._unlogged:
            logger.warning("twilio call %s %s: %d more problems, not logged", self._sid, how, self._unlogged)
            self._unlogged = 0


class SendMessage:
    """Twilio's messages as JSON text on the socket; ``ClientLeft`` once it has gone."""

    def __init__(self, websocket: WebSocket, log: CallLog) -> None:
        self._ws, self._log = websocket, log

    async def __call__(self, message: dict[str, Any]) -> None:
        try:
            await send_text(self._ws, json.dumps(message))
        except ClientLeft:
            self._log.ended("left")
            raise


class TwilioTransport:
    """One Twilio media stream as the session's transport."""

    def __init__(self, websocket: WebSocket, start: StreamStart, instructions: str | None) -> None:
        self._ws = websocket
        self.start = start
        self._log = CallLog(start.call_sid)
        self._send = SendMessage(websocket, self._log)
        self.audio = TwilioAudio(self._send, start.stream_sid)
        self._keypad = Keypad()
        session: dict[str, Any] = {
            "type": "realtime",
            "audio": {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}},
        }
        if instructions is not None:
            session["instructions"] = instructions
        self._pending: deque[str | CallerInput] = deque([json.dumps({"type": "session.update", "session": session})])
        """The call's opening settings, Twilio's messages as taken, and keypad entries."""

    async def receive(self) -> str | CallerInput:
        while not self._pending:
            wait_s = self._keypad.wait_s()
            try:
                async with asyncio.timeout(wait_s):
                    message = await self._ws.receive()
            except TimeoutError:
                self._pending.extend(self._keypad.flush())
                continue
            except WebSocketDisconnect:
                self._log.ended("left")
                raise ClientLeft from None
            if message["type"] == "websocket.disconnect":
                self._log.ended("left")
                raise ClientLeft
            self._pending.append(self._taken(message.get("text") or message.get("bytes") or ""))
        return self._pending.popleft()

    def _taken(self, text: str | bytes) -> CallerInput:
        """One of Twilio's messages, for the session's guard to admit (``ClientLeft`` for ``stop``)."""
        size = len(text)
        try:
            message = json.loads(text)
            event = message["event"]
        except (ValueError, TypeError, KeyError, RecursionError):
            return CallerMessage(size, _refused(f"a message that is not Twilio's: {str(text)[:80]!r}"))
        if event == "media":
            try:
                return CallerAudio(base64.b64decode(_field(message, "media", "payload"), validate=True), size)
            except (ValueError, TypeError):
                return CallerMessage(size, _refused("a media message without a base64 media.payload"))
        if event == "mark":
            name = _field(message, "mark", "name")
            if not isinstance(name, str):
                return CallerMessage(size, _refused("a mark message without mark.name"))
            return CallerMessage(size, lambda: self.audio.echoed(name))
        if event == "dtmf":
            digit = _field(message, "dtmf", "digit")
            if not isinstance(digit, str) or digit not in DIGITS:
                return CallerMessage(size, _refused(f"a dtmf digit {str(digit)[:8]!r}"))
            return CallerMessage(size, lambda: self._pending.extend(self._keypad.press(digit)))
        if event == "stop":
            self._log.ended("stopped")
            raise ClientLeft
        if event in ("connected", "start"):
            return CallerMessage(size, lambda: None)
        return CallerMessage(size, _refused(f"an event {str(event)[:40]!r} Twilio does not send"))

    async def send(self, event: OpenAIModel) -> None:
        """Twilio takes no Realtime events: a ``response.done`` becomes a mark after the
        answer's audio (``response.done <id> <status>``: echoed once it has played), and an
        error is logged against the call (:class:`CallLog`)."""
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
            self._log.problem(f"{event.error.message} ({event.error.code})")

    async def close(self, code: int, reason: str) -> None:
        self._log.ended(f"closed with {code} ({reason})")
        with contextlib.suppress(RuntimeError):
            await self._ws.close(code=code, reason=reason)


def _field(message: dict[str, Any], part: str, name: str) -> Any:
    """``message[part][name]``, or ``None`` where the message is not shaped as Twilio's are."""
    inner = message.get(part)
    return inner.get(name) if isinstance(inner, dict) else None


def _refused(what: str) -> Callable[[], None]:
    """Serving a message Twilio never sends: refused, and counted as breaking a limit."""

    def refuse() -> None:
        raise Violation("invalid_twilio_message", f"sent {what}: ignored")

    return refuse
