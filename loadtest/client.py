"""One load-test session: a microphone-paced Realtime client that records what every turn did.

The session speaks its questions in real time (100 ms frames, trailing silence for the
server's VAD), waits for the answer and listens to it for as long as it plays, and now and
then interrupts an answer at a random moment: by speaking its next question (server-VAD
barge-in) or with ``response.cancel``; or says a backchannel over it (a hum that must not
interrupt: such a session asks for our interruption rules). Some questions it says with a pause
mid-sentence (a server that answers before they end cut the speaker off). What it hears is
filed by ``loadtest.session_log``.

With ``resume``, it is the client that issue 40's drain and resume are for: a connection
lost (any close but its own) is resumed with the session's ``resume_token``, and a
``session.draining`` makes it leave at the end of the turn and resume at once; the
conversation goes on with its next question. Failed attempts (no replica yet, a refusal) are
tried again, backing off, for ``RESUME_GIVE_UP_S``.

A session costs its process little, so that one process can drive hundreds of them beside
the server (``python -m loadtest.bench_client`` measures it against an echo server):

- the JSON text of each audio frame of a question is built once per process and prompt;
- frames go out on a deadline schedule (no drift), messages are handled as they are read,
  and audio is counted without decoding it (``loadtest.wire``);
- permessage-deflate is not offered: on base64 audio it saves about a quarter of the bytes
  on a link where bytes are free, and costs both ends CPU for every message.
"""

import asyncio
import base64
import functools
import json
import logging
import random
import time
from collections.abc import Coroutine
from typing import Any, Literal

import websockets
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deployments.realtime.interruptions import InterruptionRules
from handlers.audio import REALTIME_RATE
from loadtest.prompts import Prompt, PromptSet
from loadtest.session_log import Response, Resume, SessionListener, SessionLog, Turn
from loadtest.wire import DeliveringConnection, running_metronome

logger = logging.getLogger(__name__)

FRAME_MS = 100
FRAME_BYTES = REALTIME_RATE * 2 * FRAME_MS // 1000
TRAILING_SILENCE_S = 1.0
"""Silence after each question: twice the server's default ``silence_duration_ms``."""
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


class NotOpened(Exception):
    """The connection ended before ``session.created``: a refusal (its code is the message)."""


def _failure(error: BaseException) -> str:
    """What a failed resume attempt is filed as: an HTTP status, a close code or a name."""
    if isinstance(error, InvalidStatus):
        return str(error.response.status_code)
    return str(error) if isinstance(error, NotOpened) else type(error).__name__


def turn_detection_update(kind: TurnDetection, our_rules: bool) -> str:
    """The ``session.update`` asking for ``kind``; ``our_rules``: with our extension's default
    interruption rules (an interruption lasts 150 ms and says more than a backchannel), which
    a session that says backchannels asks for whatever the server's own rule (OpenAI's, in
    ``cluster/loadtest.yaml``)."""
    detection: dict[str, Any] = {"type": kind}
    if our_rules:
        detection["interruption"] = InterruptionRules().model_dump()
    session = {"type": "realtime", "audio": {"input": {"turn_detection": detection}}}
    return json.dumps({"type": "session.update", "session": session})


def _append_event(pcm: bytes) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


SILENCE_EVENT = _append_event(bytes(FRAME_BYTES))
"""The ``input_audio_buffer.append`` of one frame of silence."""


@functools.lru_cache(maxsize=1024)
def spoken_frames(prompt: Prompt) -> tuple[tuple[str, float], ...]:
    """The question as it is sent: each frame's ``input_audio_buffer.append`` event (JSON text)
    and the seconds of audio from the question's start to that frame's end. Built once per
    process and prompt, whatever the number of sessions asking it."""
    audio = prompt.pcm16
    return tuple(
        (
            _append_event(audio[offset : offset + FRAME_BYTES]),
            min(offset + FRAME_BYTES, len(audio)) / (2 * REALTIME_RATE),
        )
        for offset in range(0, len(audio), FRAME_BYTES)
    )


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
        """``"deflate"`` offers permessage-deflate (``python -m loadtest.bench_client`` measures
        what it costs); ``None``, the default, does not."""
        self._continuous_mic = continuous_mic
        """Stream silence whenever no question is being spoken, as a browser's or a phone's
        microphone does, instead of sending audio only around questions."""
        self._backchannel_rate = backchannel_rate
        self._pause_rate = pause_rate
        """Share of questions said with a pause mid-sentence (``PromptSet.paused``)."""
        self._turn_detection = turn_detection
        """Asked for at the start; ``None``: the server's own."""
        self._resume = resume
        self._voices: list[object] = []
        """Voices being said right now, oldest first (a barge-in may overlap the last
        question's silence, a question a backchannel's). A microphone carries one signal, so
        only the newest is sent: two voices' frames in turn would be audio at twice real
        time, and a server would hear them as one garbled utterance."""
        self._ws: Any = None
        self._sent_ms = 0.0
        """Input audio sent so far: the position the server's ``audio_end_ms`` names."""
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
            self._ws = ws
            ws.deliver_to(self._heard.on_message)
            reader = asyncio.ensure_future(self._read())
            try:
                async with asyncio.timeout(EVENT_TIMEOUT_S):
                    await self._heard.created.wait()
                if self.log.model is None or self._heard.ended:  # refused: an error event says why
                    raise NotOpened(str(ws.close_code))
                if self._backchannel_rate or self._turn_detection:
                    kind = self._turn_detection or "server_vad"
                    await ws.send(turn_detection_update(kind, our_rules=bool(self._backchannel_rate)))
                microphone = asyncio.ensure_future(self._microphone()) if self._continuous_mic else None
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
        await self._say(turn.prompt, turn)

    async def _say(self, prompt: Prompt, turn: Turn | None = None) -> None:
        """Send the prompt at microphone pace, then silence; note when the turn's speech
        ended. Each frame is due when the audio before it has played (from the start: no
        drift); while a newer voice is said, this one's frames go unsent."""
        metronome = running_metronome()
        start = time.monotonic()
        played = 0.0
        resumes = prompt.resumes_at_s
        voice = object()
        self._voices.append(voice)
        try:
            for event, frame_end in spoken_frames(prompt):
                if turn is not None and resumes is not None and played <= resumes < frame_end:
                    turn.resumed_at_ms = self._sent_ms + 1000 * (resumes - played)
                if self._voices[-1] is voice:
                    await self._append(event, frame_end - played)
                played = frame_end
                await metronome.until(start + played)
            if turn is not None:
                turn.speech_end_at = time.monotonic()
            for frame in range(1, int(TRAILING_SILENCE_S * 1000 / FRAME_MS) + 1):
                if self._voices[-1] is voice:
                    await self._append(SILENCE_EVENT, FRAME_MS / 1000)
                await metronome.until(start + played + frame * FRAME_MS / 1000)
        finally:
            self._voices.remove(voice)

    async def _microphone(self) -> None:
        """The continuous microphone: a frame of silence every frame's length while no
        question is being spoken."""
        metronome = running_metronome()
        due = time.monotonic()
        while True:
            due += FRAME_MS / 1000
            await metronome.until(due)
            if not self._voices:
                await self._append(SILENCE_EVENT, FRAME_MS / 1000)

    async def _append(self, event: str, seconds: float) -> None:
        """Send an ``input_audio_buffer.append`` of ``seconds`` of audio, counted before the
        send, so concurrent speakers count it in the order it goes out."""
        self._sent_ms += 1000 * seconds
        await self._ws.send(event)

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
        self._say_aside(self._say(backchannel))

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
