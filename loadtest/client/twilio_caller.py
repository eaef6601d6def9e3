"""Twilio's side of a phone call's media stream, written from Twilio's docs
(https://www.twilio.com/docs/voice/media-streams/websocket-messages): what the tests and the
load test's telephony mode call the server with.

It opens as Twilio does (``connected``, then ``start`` with the call's ``customParameters``),
sends the caller's voice as μ-law ``media`` of 20 ms, and plays what it gets as Twilio does:
``media`` is queued and played in order in real time (``play_speed`` faster, for tests that
need not wait), each ``mark`` is echoed once the audio before it has played, and ``clear``
empties the queue and echoes every mark still waiting.
"""

import asyncio
import base64
import contextlib
import json
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

from websockets.asyncio.client import ClientConnection, connect

FRAME_BYTES = 160
"""20 ms of μ-law at 8 kHz: what Twilio sends in each ``media``."""
DONE_MARK = "response.done"
"""The server's mark after an answer's audio (``deployments.realtime.transports.twilio``)."""


@dataclass
class Answer:
    """An answer's audio as the caller played (or was sent) it, up to its done mark."""

    audio: bytearray = field(default_factory=bytearray)
    first_audio_at: float | None = None
    done: str | None = None
    """The done mark's name (``response.done <id> <status>``), once it has played."""


def call_sid(name: str) -> str:
    return f"CA{name}"


@dataclass(frozen=True)
class TwiML:
    """What a voice webhook's TwiML tells Twilio to do, in the verbs this server writes."""

    stream_url: str | None = None
    """``<Connect><Stream url>``: the media stream to open."""
    parameters: dict[str, str] = field(default_factory=dict)
    """Its ``<Parameter>``s, the stream's ``customParameters``."""
    redirect: str | None = None
    """``<Redirect>`` after the stream: where Twilio asks next once the server closes it."""
    ending: str | None = None
    """``hang_up`` (``<Hangup/>``) or ``dial <number>`` (``<Dial>``): how the call ends."""


def read_twiml(text: bytes) -> TwiML:
    response = ElementTree.fromstring(text)
    if response.find("Hangup") is not None:
        return TwiML(ending="hang_up")
    if (dial := response.find("Dial")) is not None:
        return TwiML(ending=f"dial {(dial.text or '').strip()}")
    stream = response.find("Connect/Stream")
    if stream is None:
        raise ConnectionError("the webhook's TwiML connects no stream, and neither hangs up nor dials")
    parameters = {str(p.get("name")): str(p.get("value")) for p in stream.findall("Parameter")}
    redirect = response.find("Redirect")
    return TwiML(
        stream.get("url"), parameters, redirect.text.strip() if redirect is not None and redirect.text else None
    )


async def ask_webhook(webhook_url: str, name: str, api_key: str | None) -> TwiML:
    """What Twilio does as call ``name`` comes in, or is redirected: ask the voice webhook
    (with the API key as HTTP basic auth, as a number's webhook URL carries it) for TwiML."""
    form = urllib.parse.urlencode({"CallSid": call_sid(name), "From": "+15550100"}).encode()
    request = urllib.request.Request(webhook_url, data=form, method="POST")
    if api_key is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"twilio:{api_key}".encode()).decode())

    def ask() -> bytes:
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())

    return read_twiml(await asyncio.to_thread(ask))


async def stream_parameters(webhook_url: str, name: str, api_key: str | None) -> dict[str, str]:
    """The stream's ``<Parameter>``s from the TwiML that answers call ``name``."""
    return (await ask_webhook(webhook_url, name, api_key)).parameters


class TwilioCall:
    """One whole call as Twilio places it: the webhook's TwiML, followed verb by verb. The
    call's first TwiML connects a stream; when the server closes a stream (a drain, a lost
    replica) with the call still on, ``<Redirect>`` asks the webhook again, whose TwiML
    connects a new stream or ends the call (:attr:`ending`)."""

    def __init__(self, webhook_url: str, name: str, api_key: str | None = None) -> None:
        self.webhook_url, self.name, self._api_key = webhook_url, name, api_key
        self._next_url = webhook_url
        self.ending: str | None = None
        self.streams = 0

    async def next(self) -> TwiML:
        """The TwiML that comes next: the call's answer, then each redirect's."""
        twiml = await ask_webhook(self._next_url, self.name, self._api_key)
        if twiml.redirect is not None:
            self._next_url = urllib.parse.urljoin(self.webhook_url, twiml.redirect)
        self.ending = twiml.ending
        return twiml

    def stream(self, twiml: TwiML, play_speed: float = 1.0) -> "contextlib.AbstractAsyncContextManager[TwilioCaller]":
        """The stream ``twiml`` connects, opened as Twilio opens one (over ``ws`` where the
        webhook is plain ``http``, as a local server's is)."""
        if twiml.stream_url is None:
            raise ConnectionError(f"the call ended ({twiml.ending}): no stream to open")
        url = twiml.stream_url
        if self.webhook_url.startswith("http://"):
            url = url.replace("wss://", "ws://", 1)
        self.streams += 1
        return TwilioCaller.dial(url, twiml.parameters, play_speed, name=self.name, stream=self.streams)


class TwilioCaller:
    def __init__(self, websocket: ClientConnection, stream_sid: str, play_speed: float) -> None:
        self._ws, self.sid, self._play_speed = websocket, stream_sid, play_speed
        self._sequence = 0
        self._chunk = 0
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        """What Twilio holds to play: ("media", bytes) and ("mark", name), in order."""
        self.answers: list[Answer] = [Answer()]
        self.clears: list[float] = []
        """When each ``clear`` arrived (``time.monotonic``)."""
        self.played: list[tuple[float, float]] = []
        """(when it began, seconds) of each ``media`` played: when the caller heard what."""
        self.closed: tuple[int, str] | None = None
        self.closed_at: float | None = None
        self.started_at = 0.0
        """When ``start`` was sent (``time.monotonic``)."""
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def dial(
        cls,
        url: str,
        parameters: dict[str, str] | None = None,
        play_speed: float = 1.0,
        name: str = "1",
        open_timeout_s: float = 10.0,
        stream: int = 1,
    ) -> AsyncIterator["TwilioCaller"]:
        """Call ``name``'s ``stream``-th stream to ``url`` (``ws(s)://…/v1/twilio/media-stream``),
        opened as Twilio opens one; hung up (``stop``) when the block ends, unless the server
        closed it first."""
        async with connect(url, max_size=None, open_timeout=open_timeout_s) as websocket:
            caller = cls(websocket, f"MZ{name}" + (f"-{stream}" if stream > 1 else ""), play_speed)
            await caller._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            start = {
                "accountSid": "AC0",
                "streamSid": caller.sid,
                "callSid": call_sid(name),
                "tracks": ["inbound"],
                "customParameters": parameters or {},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            }
            await caller._send({"event": "start", "start": start})
            caller.started_at = time.monotonic()
            caller._tasks = [asyncio.ensure_future(caller._read()), asyncio.ensure_future(caller._play())]
            try:
                yield caller
            finally:
                with contextlib.suppress(Exception):
                    await caller._send({"event": "stop", "stop": {"accountSid": "AC0", "callSid": call_sid(name)}})
                for task in caller._tasks:
                    task.cancel()

    async def _send(self, message: dict[str, Any]) -> None:
        self._sequence += 1
        message = {"sequenceNumber": str(self._sequence), **message}
        if message["event"] != "connected":
            message["streamSid"] = self.sid
        await self._ws.send(json.dumps(message))

    async def say(self, mulaw: bytes, realtime: bool = True) -> None:
        """The caller's voice, 20 ms a ``media`` (sent in real time unless told not to)."""
        started = time.monotonic()
        for offset in range(0, len(mulaw), FRAME_BYTES):
            self._chunk += 1
            payload = base64.b64encode(mulaw[offset : offset + FRAME_BYTES]).decode()
            timestamp = str(20 * self._chunk)
            media = {"track": "inbound", "chunk": str(self._chunk), "timestamp": timestamp, "payload": payload}
            await self._send({"event": "media", "media": media})
            if realtime:
                await asyncio.sleep(max(started + (offset + FRAME_BYTES) / 8000 - time.monotonic(), 0))

    async def press(self, digit: str) -> None:
        await self._send({"event": "dtmf", "dtmf": {"track": "inbound_track", "digit": digit}})

    async def _read(self) -> None:
        try:
            async for text in self._ws:
                message = json.loads(text)
                if message.get("streamSid") != self.sid:
                    raise AssertionError(f"a message for another stream: {message}")
                if message["event"] == "media":
                    answer = self.answers[-1]
                    if answer.first_audio_at is None:
                        answer.first_audio_at = time.monotonic()
                    self._queue.put_nowait(("media", base64.b64decode(message["media"]["payload"])))
                elif message["event"] == "mark":
                    self._queue.put_nowait(("mark", message["mark"]["name"]))
                elif message["event"] == "clear":
                    self.clears.append(time.monotonic())
                    self._clear()
                self._changed.set()
        finally:
            self.closed = (self._ws.close_code or 1006, self._ws.close_reason or "")
            self.closed_at = time.monotonic()
            self._changed.set()

    def _clear(self) -> None:
        """Twilio empties its buffer and echoes the marks still waiting."""
        while not self._queue.empty():
            kind, value = self._queue.get_nowait()
            if kind == "mark":
                self._echo(value)

    def _echo(self, name: str) -> None:
        task = asyncio.ensure_future(self._send({"event": "mark", "mark": {"name": name}}))
        self._tasks.append(task)
        if name.startswith(DONE_MARK):
            self.answers[-1].done = name
            self.answers.append(Answer())
        self._changed.set()

    async def _play(self) -> None:
        while True:
            kind, value = await self._queue.get()
            if kind == "mark":
                self._echo(value)
                continue
            self.answers[-1].audio += value
            self.played.append((time.monotonic(), len(value) / 8000 / self._play_speed))
            await asyncio.sleep(len(value) / 8000 / self._play_speed)

    async def until(self, done: Callable[[], bool], timeout_s: float = 90.0) -> None:
        """Until ``done()`` holds, looked at again at each message and echo."""
        async with asyncio.timeout(timeout_s):
            while not done():
                if self.closed is not None:
                    raise ConnectionError(f"the stream closed: {self.closed}")
                self._changed.clear()
                await self._changed.wait()

    async def until_answered(self, count: int, timeout_s: float = 90.0) -> None:
        """Until ``count`` answers have played to their end."""
        await self.until(lambda: len(self.answered()) >= count, timeout_s)

    def answered(self) -> list[Answer]:
        """The answers played to their end so far."""
        return [answer for answer in self.answers if answer.done is not None]
