"""One load-test session: a microphone-paced Realtime client that records what every turn did.

The session speaks its questions in real time (100 ms frames, trailing silence for the
server's VAD), waits for the answer and listens to it for as long as it plays, and now and
then interrupts an answer at a random moment: by speaking its next question (server-VAD
barge-in) or with ``response.cancel``; or says a backchannel over it (a hum that must not
interrupt: such a session asks for our interruption rules). Some questions it says with a pause
mid-sentence (a server that answers before they end cut the speaker off). What it hears is
filed by ``loadtest.client.session_log``.

With ``resume``, it is the client that the server's drain and resume are for: a connection
lost (any close but its own) is resumed with the session's ``resume_token``, and a
``session.draining`` makes it leave at the end of the turn and resume at once; the
conversation goes on with its next question. Failed attempts (no replica yet, a refusal) are
tried again, backing off, for ``RESUME_GIVE_UP_S``.

A session costs its process little, so that one process can drive hundreds of them beside
the server (``s2s-bench client`` measures it against an echo server):

- what it says is built once per process and sent on a deadline (``loadtest.client.microphone``);
- messages are handled as they are read, audio counted undecoded (``loadtest.client.wire``);
- permessage-deflate is not offered: on base64 audio it saves about a quarter of the bytes
  on a link where bytes are free, and costs both ends CPU for every message.
"""

import asyncio
import json
import logging
import random
import time
from collections.abc import Coroutine
from typing import Any, Literal

import websockets
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from handlers.audio import REALTIME_RATE
from loadtest.client.microphone import Microphone
from loadtest.client.prompts import PromptSet
from loadtest.client.records import Response, Resume, SessionLog, Turn
from loadtest.client.session_log import SessionListener
from loadtest.client.wire import DeliveringConnection

logger = logging.getLogger(__name__)

EVENT_TIMEOUT_S = 60.0
LISTEN_CAP_S = 10.0
"""Longest a session listens to an answer before its next turn."""
DEFAULT_ANSWERING_S = 0.5
"""How long an answer streams from its first audio to its end, when not calibrated."""

RESUME_GIVE_UP_S = 30.0
"""How long a session tries to resume after a loss: Serve replaces a lost replica in seconds."""
RESUME_BACKOFF_S = 0.2
"""Between attempts, times the attempt's number, up to ``RESUME_BACKOFF_MAX_S``."""
RESUME_BACKOFF_MAX_S = 2.0

TurnDetection = Literal["server_vad", "semantic_vad"]
OUR_INTERRUPTION_RULES = {"min_duration_ms": 150, "ignore_backchannels": True, "audio_lead_ms": 200}
"""Our extension's default interruption rules: 150 ms and more than a backchannel, 200 ms lead."""


class NotOpened(Exception):
    """The connection ended before ``session.created``: a refusal (its code is the message)."""


def _failure(error: BaseException) -> str:
    """What a failed resume attempt is filed as: an HTTP status, a close code or a name."""
    if isinstance(error, InvalidStatus):
        return str(error.response.status_code)
    return str(error) if isinstance(error, NotOpened) else type(error).__name__


def settings_update(kind: TurnDetection | None, our_rules: bool, noise_reduction: str | None = None) -> str:
    """The ``session.update`` asking for turn detection ``kind`` (``None``: the server's own,
    left as it is) and ``noise_reduction``; ``our_rules``: with ``OUR_INTERRUPTION_RULES``,
    which a session that says backchannels asks for whatever the server's own rule (OpenAI's,
    in ``cluster/loadtest.yaml``)."""
    audio_input: dict[str, Any] = {}
    if kind is not None or our_rules:
        detection: dict[str, Any] = {"type": kind or "server_vad"}
        if our_rules:
            detection["interruption"] = OUR_INTERRUPTION_RULES
        audio_input["turn_detection"] = detection
    if noise_reduction is not None:
        audio_input["noise_reduction"] = {"type": noise_reduction}
    return json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {"input": audio_input}}})


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
        compression: str | None = None,
        continuous_mic: bool = False,
        backchannel_rate: float = 0.0,
        pause_rate: float = 0.0,
        turn_detection: TurnDetection | None = None,
        noise_reduction: str | None = None,
        resume: bool = False,
    ) -> None:
        self.log = SessionLog(index)
        self._heard = SessionListener(self.log)
        self._url = url
        self._prompts = prompts
        self._order = order
        self._rng = rng
        self._interrupt_rate = interrupt_rate
        self._cancel_rate = cancel_rate
        self._on_turn_end = on_turn_end
        self._answering_s = answering_s or {}
        self._compression = compression
        """``"deflate"`` offers permessage-deflate (``s2s-bench client`` measures
        what it costs); ``None``, the default, does not."""
        self._continuous_mic = continuous_mic
        """Stream silence whenever no question is being spoken, as a browser's or a phone's
        microphone does, instead of sending audio only around questions."""
        self._backchannel_rate = backchannel_rate
        self._pause_rate = pause_rate
        """Share of questions said with a pause mid-sentence (``PromptSet.paused``)."""
        self._turn_detection = turn_detection
        """Asked for at the start; ``None``: the server's own."""
        self._noise_reduction = noise_reduction
        """``audio.input.noise_reduction.type`` asked for at the start; ``None``: none."""
        self._resume = resume
        self._microphone = Microphone()
        self._ws: Any = None
        self._speaking: set[asyncio.Task[None]] = set()

    @classmethod
    def uninterrupted(cls, url: str, prompts: PromptSet, order: list[int]) -> "Session":
        """A session that only asks (probe and calibration): no interruptions, no progress."""
        return cls(0, url, prompts, order, random.Random(), 0.0, 0.0, lambda _: None)

    async def run(self, turns: int, deadline: float) -> SessionLog:
        resuming: Resume | None = None
        token: str | None = None
        attempts = 0
        while True:
            try:
                lost = await self._connection(turns, deadline, resuming, token)
            except (OSError, TimeoutError, NotOpened, websockets.WebSocketException) as failure:
                attempts += 1
                if resuming is None or time.monotonic() - resuming.lost_at >= RESUME_GIVE_UP_S:
                    self.log.disconnected |= resuming is not None or not isinstance(failure, NotOpened)
                    break
                resuming.refusals.append(_failure(failure))
                await asyncio.sleep(min(RESUME_BACKOFF_MAX_S, RESUME_BACKOFF_S * attempts))
                continue
            token = self._heard.resume_token
            finished = len(self.log.turns) >= turns or time.monotonic() >= deadline
            if lost is None or not self._resume or token is None or finished:
                break
            resuming = Resume(lost, time.monotonic(), list(self.log.finished_items), told=self._heard.drain_told)
            attempts = 0
            self.log.resumes.append(resuming)
        return self.log

    async def _connection(self, turns: int, deadline: float, resuming: Resume | None, token: str | None) -> str | None:
        """One connection of the session (resuming with ``token``): why it was lost (a close
        code, or ``draining``), or ``None`` if the conversation ended on it."""
        url = f"{self._url}?model=s2s"
        if self._resume:
            url += "&drain_notice=true"
        if token is not None:
            url += f"&resume_token={token}"
        self._heard = SessionListener(self.log, resuming)
        opening = connect(url, max_size=None, compression=self._compression, create_connection=DeliveringConnection)
        async with opening as ws:
            assert isinstance(ws, DeliveringConnection)
            self._ws = self._microphone.ws = ws
            ws.deliver_to(self._heard.on_message)
            reader = asyncio.ensure_future(self._read())
            try:
                async with asyncio.timeout(EVENT_TIMEOUT_S):
                    await self._heard.created.wait()
                if self.log.model is None or self._heard.ended:  # refused: an error event says why
                    raise NotOpened(str(ws.close_code))
                if self._backchannel_rate or self._turn_detection or self._noise_reduction:
                    our_rules = bool(self._backchannel_rate)
                    await ws.send(settings_update(self._turn_detection, our_rules, self._noise_reduction))
                microphone = asyncio.ensure_future(self._microphone.stream_silence()) if self._continuous_mic else None
                try:
                    await self._converse(turns, deadline)
                except websockets.ConnectionClosed:
                    pass  # lost mid-turn: said below
                finally:
                    if microphone is not None:
                        microphone.cancel()
                if self._heard.ended:
                    return str(ws.close_code or 1006)
                return "draining" if self._heard.drain_told else None
            finally:
                self._heard.leaving = True
                reader.cancel()
                for speaking in self._speaking:
                    speaking.cancel()

    async def _converse(self, turns: int, deadline: float) -> None:
        """Ask ``turns`` questions (or stop at ``deadline``); a question spoken as a barge-in
        is the next turn, and is awaited even if it is one more than ``turns``."""
        pending: Turn | None = None
        while pending is not None or (len(self.log.turns) < turns and time.monotonic() < deadline):
            if pending is None and (self._heard.ended or self._heard.drain_told):
                return  # the session resumes on a new connection (or ends)
            turn = pending or self._new_turn(len(self.log.turns))
            if pending is None:
                await self._speak(turn)
            pending = await self._await_answer(turn)
            self._on_turn_end(turn)

    def _new_turn(self, index: int) -> Turn:
        paused = self._pause_rate > 0 and self._rng.random() < self._pause_rate
        prompts = self._prompts.paused if paused else self._prompts.prompts
        turn = Turn(self.log.index, index, prompts[self._order[index % len(self._order)]], paused=paused)
        self._heard.expect(turn)
        return turn

    async def _speak(self, turn: Turn) -> None:
        await self._microphone.say(turn.prompt, turn)

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
                if roll < self._interrupt_rate + self._cancel_rate + self._backchannel_rate:
                    await response.first_audio.wait()
                    await self._backchannel(turn, response)
                await response.done.wait()
        except TimeoutError:
            turn.timed_out = True
            return None
        if response.first_audio_at is not None:  # listen to the answer as it plays
            played = time.monotonic() - response.first_audio_at
            await asyncio.sleep(min(LISTEN_CAP_S, max(0.0, response.audio_bytes / (2 * REALTIME_RATE) - played)))
        return None

    async def _interrupt(self, turn: Turn, response: Response, by_speech: bool) -> Turn | None:
        """At a random moment while the server is still answering: speak the next question,
        or cancel."""
        if not await self._while_answering(turn, response):
            return None
        turn.interrupted_at = time.monotonic()
        if not by_speech:
            turn.interruption = "cancel"
            await self._ws.send(json.dumps({"type": "response.cancel"}))
            return None
        turn.interruption = "barge-in"
        spoken = self._new_turn(turn.index + 1)
        self._say_aside(self._speak(spoken))
        return spoken

    async def _backchannel(self, turn: Turn, response: Response) -> None:
        """At a random moment while the server is still answering, say the backchannel (the
        answer goes on: the session waits for its end as for any other)."""
        backchannel = self._prompts.backchannel
        if backchannel is None or not await self._while_answering(turn, response):
            return
        turn.interruption, turn.interrupted_at = "backchannel", time.monotonic()
        self._say_aside(self._microphone.say(backchannel))

    def _say_aside(self, saying: Coroutine[Any, Any, None]) -> None:
        """Speak over the answer (a barge-in, a backchannel) beside the turn's own wait."""
        task = asyncio.ensure_future(saying)
        self._speaking.add(task)
        task.add_done_callback(self._said)

    def _said(self, task: "asyncio.Task[None]") -> None:
        self._speaking.discard(task)
        # A socket lost mid-sentence is the session's to report (it resumes, or says why
        # not): taken here, it is not logged again as a task's unretrieved exception.
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, websockets.ConnectionClosed):
            logger.error("speaking over an answer failed", exc_info=error)

    async def _while_answering(self, turn: Turn, response: Response) -> bool:
        """Wait for a random moment of the answer (from its first audio to its
        ``response.done``, as long as calibration measured); whether it is still going."""
        answering_s = self._answering_s.get(turn.prompt.number, DEFAULT_ANSWERING_S)
        await asyncio.sleep(self._rng.uniform(0.0, 0.8 * answering_s))
        return not response.done.is_set()

    async def _read(self) -> None:
        """Until the connection ends; its events are read as they come (``SessionListener``)."""
        await self._ws.wait_closed()
        self._heard.connection_ended()
