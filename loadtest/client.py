"""One load-test session: a microphone-paced Realtime client that records what every turn did.

The session speaks its questions in real time (100 ms frames, trailing silence for the
server's VAD), waits for the answer and listens to it for as long as it plays, and now and
then interrupts an answer at a random moment: by speaking its next question (server-VAD
barge-in) or with ``response.cancel``. A reader task files every server event under the turn
and response it belongs to, and counts what must never happen: audio of a response after its
``response.done`` (stale bytes), ``response.done`` without ``response.created``, errors.
"""

import asyncio
import base64
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import websockets

from handlers.audio import REALTIME_RATE
from loadtest.prompts import Prompt, PromptSet

FRAME_MS = 100
FRAME_BYTES = REALTIME_RATE * 2 * FRAME_MS // 1000
TRAILING_SILENCE_S = 1.0
"""Silence after each question: twice the server's default ``silence_duration_ms``."""
EVENT_TIMEOUT_S = 60.0
LISTEN_CAP_S = 10.0
DEFAULT_ANSWERING_S = 0.5
"""How long an answer streams from its first audio to its end, when not calibrated."""
"""Longest a session listens to an answer before its next turn."""

Interruption = Literal["barge-in", "cancel"] | None


@dataclass
class Response:
    id: str
    created_at: float
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    audio_bytes: int = 0
    stale_bytes: int = 0
    transcript: str = ""
    done_at: float | None = None
    status: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    first_audio: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Turn:
    """One question and what the server did with it; times are ``time.monotonic()``."""

    session: int
    index: int
    prompt: Prompt
    speech_end_at: float | None = None
    speech_stopped_at: float | None = None
    transcribed_at: float | None = None
    heard: str | None = None
    response: Response | None = None
    interruption: Interruption = None
    interrupted_at: float | None = None
    """When the interrupting speech began to be sent, or ``response.cancel`` was sent."""
    barge_in_heard_at: float | None = None
    """When the server said ``speech_started`` for the interrupting speech."""
    timed_out: bool = False
    answered: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class SessionLog:
    """Everything one session saw."""

    index: int
    turns: list[Turn] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    done_without_created: int = 0
    unattributed_stale_bytes: int = 0
    disconnected: bool = False
    model: str | None = None


class Session:
    """Drives one WebSocket session through ``turns`` questions (or until ``deadline``)."""

    def __init__(
        self,
        index: int,
        url: str,
        prompts: PromptSet,
        order: list[int],
        rng: random.Random,
        interrupt_rate: float,
        cancel_rate: float,
        on_turn_end: Any,
        answering_s: dict[int, float] | None = None,
    ) -> None:
        self.log = SessionLog(index)
        self._url = url
        self._prompts = prompts
        self._order = order
        self._rng = rng
        self._interrupt_rate = interrupt_rate
        self._cancel_rate = cancel_rate
        self._on_turn_end = on_turn_end
        self._answering_s = answering_s or {}
        self._responses: dict[str, Response] = {}
        self._waiting: list[Turn] = []
        """Turns whose speech the server has not yet answered, oldest first."""
        self._ws: Any = None
        self._speaking: set[asyncio.Task[None]] = set()
        self._created = asyncio.Event()
        self._leaving = False

    @classmethod
    def uninterrupted(cls, url: str, prompts: PromptSet, order: list[int]) -> "Session":
        """A session that only asks (probe and calibration): no interruptions, no progress."""
        return cls(0, url, prompts, order, random.Random(), 0.0, 0.0, lambda _: None)

    async def run(self, turns: int, deadline: float) -> SessionLog:
        try:
            async with websockets.connect(f"{self._url}?model=s2s", max_size=None) as ws:
                self._ws = ws
                reader = asyncio.ensure_future(self._read())
                try:
                    async with asyncio.timeout(EVENT_TIMEOUT_S):
                        await self._created.wait()
                    if self.log.model is not None:  # else refused (an error event says why)
                        await self._converse(turns, deadline)
                finally:
                    self._leaving = True
                    reader.cancel()
                    for speaking in self._speaking:
                        speaking.cancel()
        except (OSError, TimeoutError, websockets.WebSocketException):
            self.log.disconnected = True
        return self.log

    async def _converse(self, turns: int, deadline: float) -> None:
        """Ask ``turns`` questions (or stop at ``deadline``); a question spoken as a barge-in
        is the next turn, and is awaited even if it is one more than ``turns``."""
        pending: Turn | None = None
        while pending is not None or (len(self.log.turns) < turns and time.monotonic() < deadline):
            turn = pending or self._new_turn(len(self.log.turns))
            if pending is None:
                await self._speak(turn)
            pending = await self._await_answer(turn)
            self._on_turn_end(turn)

    def _new_turn(self, index: int) -> Turn:
        prompt = self._prompts.prompts[self._order[index % len(self._order)]]
        turn = Turn(self.log.index, index, prompt)
        self.log.turns.append(turn)
        self._waiting.append(turn)
        return turn

    async def _speak(self, turn: Turn) -> None:
        """Send the question at microphone pace, then silence; note when speech ended."""
        audio = turn.prompt.pcm16
        start = time.monotonic()
        for offset in range(0, len(audio), FRAME_BYTES):
            await self._send_audio(audio[offset : offset + FRAME_BYTES])
            await asyncio.sleep(max(0.0, start + (offset + FRAME_BYTES) / (2 * REALTIME_RATE) - time.monotonic()))
        turn.speech_end_at = time.monotonic()
        silence = bytes(FRAME_BYTES)
        for _ in range(int(TRAILING_SILENCE_S * 1000 / FRAME_MS)):
            await self._send_audio(silence)
            await asyncio.sleep(FRAME_MS / 1000)

    async def _send_audio(self, pcm: bytes) -> None:
        event = {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
        await self._ws.send(json.dumps(event))

    async def _await_answer(self, turn: Turn) -> Turn | None:
        """Wait for the turn's answer, interrupting it as the dice say; return the turn the
        interruption spoke, if any."""
        try:
            async with asyncio.timeout(EVENT_TIMEOUT_S):
                await turn.answered.wait()
                response = turn.response
                if response is None:  # the connection ended first
                    return None
                roll = self._rng.random()
                if roll < self._interrupt_rate + self._cancel_rate:
                    await response.first_audio.wait()
                    spoken = await self._interrupt(turn, response, roll < self._interrupt_rate)
                    await response.done.wait()
                    return spoken
                await response.done.wait()
        except TimeoutError:
            turn.timed_out = True
            return None
        if response.first_audio_at is not None:  # listen to the answer as it plays
            played = time.monotonic() - response.first_audio_at
            await asyncio.sleep(min(LISTEN_CAP_S, max(0.0, response.audio_bytes / (2 * REALTIME_RATE) - played)))
        return None

    async def _interrupt(self, turn: Turn, response: Response, by_speech: bool) -> Turn | None:
        """At a random moment while the server is still answering (from its first audio to
        its ``response.done``, as long as calibration measured): speak the next question, or
        cancel."""
        answering_s = self._answering_s.get(turn.prompt.number, DEFAULT_ANSWERING_S)
        await asyncio.sleep(self._rng.uniform(0.0, 0.8 * answering_s))
        if response.done.is_set():
            return None
        turn.interrupted_at = time.monotonic()
        if not by_speech:
            turn.interruption = "cancel"
            await self._ws.send(json.dumps({"type": "response.cancel"}))
            return None
        turn.interruption = "barge-in"
        spoken = self._new_turn(turn.index + 1)
        speaking = asyncio.ensure_future(self._speak(spoken))
        self._speaking.add(speaking)
        speaking.add_done_callback(self._speaking.discard)
        return spoken

    async def _read(self) -> None:
        try:
            async for message in self._ws:
                self._on_event(json.loads(message), time.monotonic())
        except websockets.ConnectionClosed:
            pass
        self.log.disconnected = not self._leaving
        self._created.set()
        for turn in self._waiting:
            turn.answered.set()

    def _on_event(self, event: dict[str, Any], now: float) -> None:
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            self._on_audio(event, now)
        elif kind == "session.created":
            self.log.model = event["session"].get("model")
            self._created.set()
        elif kind == "input_audio_buffer.speech_started":
            turn = next((t for t in self.log.turns if t.interruption == "barge-in" and not t.barge_in_heard_at), None)
            if turn is not None:
                turn.barge_in_heard_at = now
        elif kind == "input_audio_buffer.speech_stopped":
            turn = self._oldest_waiting()
            if turn is not None and turn.speech_stopped_at is None:
                turn.speech_stopped_at = now
        elif kind == "conversation.item.input_audio_transcription.completed":
            turn = next((t for t in self.log.turns if t.heard is None and t.speech_stopped_at), None)
            if turn is not None:
                turn.heard, turn.transcribed_at = event.get("transcript", ""), now
        elif kind == "response.created":
            response = self._responses[event["response"]["id"]] = Response(event["response"]["id"], now)
            turn = self._oldest_waiting()
            if turn is not None:
                self._waiting.remove(turn)
                turn.response = response
                turn.answered.set()
        elif kind == "response.output_audio_transcript.done":
            answered = self._responses.get(event.get("response_id", ""))
            if answered is not None:
                answered.transcript = event.get("transcript", "")
        elif kind == "response.done":
            self._on_done(event["response"], now)
        elif kind == "error":
            code = event["error"].get("code") or event["error"].get("type") or "unknown"
            self.log.errors[code] = self.log.errors.get(code, 0) + 1

    def _oldest_waiting(self) -> Turn | None:
        return self._waiting[0] if self._waiting else None

    def _on_audio(self, event: dict[str, Any], now: float) -> None:
        size = len(base64.b64decode(event.get("delta", "")))
        response = self._responses.get(event.get("response_id", ""))
        if response is None:
            self.log.unattributed_stale_bytes += size
            return
        if response.done_at is not None:
            response.stale_bytes += size
            return
        if response.first_audio_at is None:
            response.first_audio_at = now
            response.first_audio.set()
        response.last_audio_at = now
        response.audio_bytes += size

    def _on_done(self, wire: dict[str, Any], now: float) -> None:
        response = self._responses.get(wire.get("id", ""))
        if response is None:
            self.log.done_without_created += 1
            return
        response.done_at, response.status = now, wire.get("status")
        response.first_audio.set()  # nothing more will come
        response.done.set()
