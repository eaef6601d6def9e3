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
- Every message in passes the session's input guard (``port.CallerAudio``, in
  :data:`PCMU`, and ``port.CallerMessage``): one budget for the call, whatever it sends;
  what the call's side makes of them (its opening ``session.update``, a keypad entry's
  events) reaches the session typed (``port.MadeEvent``), never as JSON to parse. Only
  Twilio's own messages, in and out, are JSON. Bad input (a frame that is not JSON or not
  Twilio's, a bad payload or digit) is refused and counts as breaking a limit, since a real
  Twilio never sends it; a caller that keeps breaking limits is hung up (1008), which
  Twilio's debugger shows. The call's first ``LOGGED_PROBLEMS`` problems are logged with
  its id, the rest only counted (:class:`CallLog`).
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

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import RealtimeErrorEvent, ResponseDoneEvent, SessionCreatedEvent, SessionUpdateEvent

from deployments.realtime.limits import Violation
from deployments.realtime.protocol import CLOSE_NORMAL, CLOSE_SERVICE_RESTART, SessionDrainingEvent
from deployments.realtime.transports.audio_out import AnswerAudio
from deployments.realtime.transports.call_control import (
    Action,
    CallControl,
    CallEnding,
    CallLine,
    Say,
)
from deployments.realtime.transports.config import CallControlConfig
from deployments.realtime.transports.keypad import Keypad
from deployments.realtime.transports.port import (
    AgentLine,
    CallerAudio,
    CallerInput,
    CallerMessage,
    ClientLeft,
    MadeEvent,
)
from deployments.realtime.transports.websocket import send_text
from deployments.realtime.transports.wire_audio import PCMU, AnswerEncoder, audio_ms

logger = logging.getLogger(__name__)

MEDIA_STREAM_PATH = "/v1/twilio/media-stream"
DONE_MARK = "response.done"
"""The mark after each answer's audio: ``response.done <id> <status>``."""
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
        self._answering: str | None = None
        """The answer whose audio is going out and whose ``response.done`` has not."""

    async def play(self, frame: AnswerAudio) -> None:
        self._answering = frame.response_id
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
        await self._send({"event": "mark", "streamSid": self._sid, "mark": {"name": name}})

    def echoed(self, name: str) -> None:
        """Twilio echoed the mark ``name``: what was sent before it has played."""
        mark = self._marks.pop(name, None)
        if mark is not None:
            response_id, end_ms = mark
            self._played_ms[response_id] = max(self._played_ms.get(response_id, 0.0), end_ms)

    def finished(self, response_id: str) -> None:
        if self._answering == response_id:  # Twilio plays out what it holds
            self._answering = None

    async def clear(self) -> None:
        """Empty Twilio's buffer: of an answer still going out (a barge-in), or of audio not
        yet played (a mark not back). A turn after an answer that went out whole and played
        out sends nothing. The marks Twilio then echoes are of audio never played."""
        unplayed = bool(self._marks) or self._answering is not None
        self._answering = None
        self._marks.clear()
        self._encoder.reset()
        if unplayed:
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


@dataclass(frozen=True)
class CallPlan:
    """How one stream of a call opens, and what the call does beyond the conversation."""

    control: CallControlConfig
    """With the call's own greeting, if its TwiML gave one."""
    line: CallLine
    instructions: str | None
    """The call's system prompt (``None``: the server's)."""
    resumed: bool = False
    """The stream resumes the call's session: it has its settings, and has been greeted."""


class TwilioTransport:
    """One Twilio media stream as the session's transport, and the call's client: it opens
    the session with the call's settings and greeting, and acts on what the call's control
    finds due (:mod:`deployments.realtime.transports.call_control`)."""

    def __init__(self, websocket: WebSocket, start: StreamStart, plan: CallPlan) -> None:
        self._ws = websocket
        self.start = start
        self._log = CallLog(start.call_sid)
        self._send = SendMessage(websocket, self._log)
        self.audio = TwilioAudio(self._send, start.stream_sid)
        self._keypad = Keypad()
        self._line = plan.line
        self._control = CallControl(plan.control)
        self._pending: deque[CallerInput] = deque()
        """The call's opening, Twilio's messages as taken, keypad entries and lines to say."""
        if not plan.resumed:
            opening = {"type": "session.update", "session": self._settings(plan)}
            self._pending.append(MadeEvent(SessionUpdateEvent.model_validate(opening)))
            if plan.control.greeting:
                self._pending.append(AgentLine(plan.control.greeting))

    def _settings(self, plan: CallPlan) -> dict[str, Any]:
        pcmu = {"format": {"type": "audio/pcmu"}}
        session: dict[str, Any] = {"type": "realtime", "audio": {"input": pcmu, "output": pcmu}}
        if plan.instructions is not None:
            session["instructions"] = plan.instructions
        if tools := self._control.tools():
            session["tools"] = tools
        return session

    async def receive(self) -> CallerInput:
        while not self._pending:
            action = self._control.due()
            if action is not None:
                await self._act(action)
                continue
            waits = [wait for wait in (self._keypad.wait_s(), self._control.wait_s()) if wait is not None]
            try:
                async with asyncio.timeout(min(waits, default=None)):
                    message = await self._ws.receive()
            except TimeoutError:
                self._pending.extend(map(MadeEvent, self._keypad.flush()))
                continue
            except WebSocketDisconnect:
                self._log.ended("left")
                raise ClientLeft from None
            if message["type"] == "websocket.disconnect":
                self._log.ended("left")
                raise ClientLeft
            self._pending.append(self._taken(message.get("text") or message.get("bytes") or ""))
        return self._pending.popleft()

    async def _act(self, action: Action) -> None:
        """Say a line, or close the stream: ending the call (its next webhook finds how) or
        leaving a draining replica (its next stream resumes the session)."""
        if isinstance(action, Say):
            self._pending.append(AgentLine(action.text))
            return
        if isinstance(action, CallEnding):
            await self._line.ends(action)
            await self.close(CLOSE_NORMAL, str(action))
        else:
            await self.close(CLOSE_SERVICE_RESTART, "draining: the call goes on on a new stream")
        raise ClientLeft

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
                return CallerAudio(base64.b64decode(_field(message, "media", "payload"), validate=True), PCMU, size)
            except (ValueError, TypeError):
                return CallerMessage(size, _refused("a media message without a base64 media.payload"))
        if event == "mark":
            name = _field(message, "mark", "name")
            if not isinstance(name, str):
                return CallerMessage(size, _refused("a mark message without mark.name"))
            return CallerMessage(size, lambda: self._echoed(name))
        if event == "dtmf":
            digit = _field(message, "dtmf", "digit")
            if not isinstance(digit, str) or digit not in DIGITS:
                return CallerMessage(size, _refused(f"a dtmf digit {str(digit)[:8]!r}"))
            return CallerMessage(size, lambda: self._pending.extend(map(MadeEvent, self._keypad.press(digit))))
        if event == "stop":
            self._log.ended("stopped")
            raise ClientLeft
        if event in ("connected", "start"):
            return CallerMessage(size, lambda: None)
        return CallerMessage(size, _refused(f"an event {str(event)[:40]!r} Twilio does not send"))

    def _echoed(self, name: str) -> None:
        if name.startswith(DONE_MARK):
            self._control.played(name.split(" ")[1] if name.count(" ") == 2 else "")
        else:
            self.audio.echoed(name)

    async def send(self, event: OpenAIModel) -> None:
        """Twilio takes no Realtime events: a ``response.done`` becomes a mark after the
        answer's audio (``response.done <id> <status>``: echoed once it has played), and an
        error is logged against the call (:class:`CallLog`). The call's control sees them
        all; ``session.created``'s resume token is kept for the call's next stream."""
        self._control.seen(event)
        if isinstance(event, SessionDrainingEvent) and (action := self._control.due()) is not None:
            await self._act(action)  # between turns: the call leaves now
        if isinstance(event, SessionCreatedEvent):
            token = getattr(event.session, "resume_token", None)
            if token:
                await self._line.resumes_with(token)
        elif isinstance(event, ResponseDoneEvent):
            response = event.response
            await self._send(
                {
                    "event": "mark",
                    "streamSid": self.start.stream_sid,
                    "mark": {"name": f"{DONE_MARK} {response.id} {response.status}"},
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
