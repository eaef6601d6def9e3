"""A Realtime test client on top of the stock ``openai`` SDK connection."""

import asyncio
import base64
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import jiwer
from openai import AsyncOpenAI
from websockets.asyncio.client import ClientConnection

from handlers.audio import REALTIME_RATE

APP_NAME = "voice-test"
MAX_SESSIONS = 4
EVENT_TIMEOUT_S = 60
HEARD_WER = 0.4
"""Word error of what tiny.en hears of a spoken question: a misheard word or two (0.17 each in
six words), never a different question (1.0)."""
LONG_QUESTION = "Please tell me a long story about a dragon who learns to bake bread in a small village."
"""A question whose answer is long: it is still playing when a test speaks over it."""


FINISHED = ("completed", "incomplete")
"""How an answer that ran its course ends: whole, or at its token cap (the suite's answers run
as long as the model rambles, and some reach it)."""


class Closed:
    """What the reader queues when the connection ends: why, if it ended with an error."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Client:
    """An SDK connection plus the bookkeeping the tests assert on.

    A reader task drains the socket all the time, as a real client does: a test that waits
    on one session while another's answer streams would otherwise leave that socket unread,
    its receive queue full, and its keepalive pong unseen, until the client itself closes
    the connection (1011, keepalive ping timeout)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.events: list[Any] = []
        self.received_at: list[float] = []
        """When each of ``events`` came off the socket (``time.monotonic``)."""
        self._received: asyncio.Queue[tuple[float, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.connection:
                self._received.put_nowait((time.monotonic(), event))
        except Exception as error:  # handed to whoever waits for the next event
            self._received.put_nowait((time.monotonic(), Closed(error)))
        else:
            self._received.put_nowait((time.monotonic(), Closed()))

    async def close(self) -> None:
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def send_audio(self, pcm: bytes, frame_ms: int = 100, realtime: bool = False) -> None:
        frame = REALTIME_RATE * 2 * frame_ms // 1000
        for offset in range(0, len(pcm), frame):
            chunk = base64.b64encode(pcm[offset : offset + frame]).decode()
            await self.connection.input_audio_buffer.append(audio=chunk)
            if realtime:
                await asyncio.sleep(frame_ms / 1000)  # pacing a live microphone, not synchronisation

    async def until(self, done: Callable[[Any], bool], timeout_s: float = EVENT_TIMEOUT_S) -> Any:
        """Receive events until ``done(event)``; return that event."""
        async with asyncio.timeout(timeout_s):
            while not isinstance((received := await self._received.get())[1], Closed):
                at, event = received
                self.events.append(event)
                self.received_at.append(at)
                if done(event):
                    return event
        self._received.put_nowait(received)  # every later wait sees the end too
        event = received[1]
        if event.error is not None:
            raise event.error
        raise AssertionError("connection closed before the expected event")

    def of_type(self, event_type: str, response_id: str | None = None) -> list[Any]:
        return [
            e
            for e in self.events
            if e.type == event_type and (response_id is None or getattr(e, "response_id", None) == response_id)
        ]


async def receive(ws: ClientConnection, event_type: str, timeout_s: float = 30) -> dict[str, Any]:
    """The next event of ``event_type`` on a raw WebSocket (those before it are skipped)."""
    async with asyncio.timeout(timeout_s):
        while True:
            event = json.loads(await ws.recv())
            if event["type"] == event_type:
                return event


def normalise(text: str) -> str:
    return str(jiwer.RemovePunctuation()(text.lower())).strip()


def assert_heard(said: str, transcript: str, bound: float = HEARD_WER) -> None:
    assert jiwer.wer(normalise(said), normalise(transcript)) <= bound, (said, transcript)


def is_done(event: Any) -> bool:
    return bool(event.type == "response.done")


def audio_of(client: Client, response_id: str) -> bytes:
    return b"".join(base64.b64decode(e.delta) for e in client.of_type("response.output_audio.delta", response_id))


async def sessions_released(realtime_url: str, timeout_s: float = 20) -> None:
    """Wait until the server counts no session against its cap: a client's close reaches the
    server, and the session is released (its scope closed on its host), a moment later."""
    health = realtime_url.replace("ws://", "http://").removesuffix("/v1") + "/healthz"

    def admitted() -> int:
        with urllib.request.urlopen(health, timeout=10) as reply:
            count: int = json.loads(reply.read())["admitted"]
        return count

    async with asyncio.timeout(timeout_s):
        while await asyncio.to_thread(admitted):
            await asyncio.sleep(0.2)  # polling another process: no event reaches the test


@asynccontextmanager
async def open_client(realtime_url: str, query: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """A session through the stock SDK, once the server has said ``session.created``;
    ``query``: extra query parameters of the connection."""
    sdk = AsyncOpenAI(api_key="unused", websocket_base_url=realtime_url)
    async with sdk.realtime.connect(model="s2s", extra_query=query or {}) as connection:
        client = Client(connection)
        try:
            await client.until(lambda e: e.type == "session.created")
            yield client
        finally:
            await client.close()
