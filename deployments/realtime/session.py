"""One Realtime conversation: the parts of a session, wired and supervised.

Data flows one way: socket -> dispatch (here) -> :class:`AudioInput` -> VAD boundaries ->
:class:`TurnTaker` -> :class:`Conversation` / :class:`Responder` -> :class:`Outbox` ->
socket. Each part takes the session's kit (:mod:`deployments.realtime.kit`) and a few parts of
its own, so each can run against fake stages.

Supervision: the receive loop, the send loop, the VAD loop, turn-taking and every task
they start (responses, transcriptions) run in one ``asyncio.TaskGroup``. If any of them
fails unexpectedly the client gets an ``error`` (``server_error``) and the socket closes
with 1011, releasing everything as a normal end does: never a live socket with a dead loop.

Bad input is answered, never fatal: every event that cannot be served (malformed, over a
limit of :mod:`deployments.realtime.limits`, or failing in its handler) gets an ``error``
and the session goes on; only a client that keeps going over limits is closed (1008).
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from openai import BaseModel as OpenAIModel
from openai.types.realtime import (
    ConversationItemCreateEvent,
    ConversationItemDeleteEvent,
    ConversationItemRetrieveEvent,
    ConversationItemTruncateEvent,
    InputAudioBufferAppendEvent,
    InputAudioBufferClearEvent,
    InputAudioBufferCommitEvent,
    OutputAudioBufferClearEvent,
    RealtimeErrorEvent,
    RealtimeSessionCreateRequest,
    ResponseCancelEvent,
    ResponseCreateEvent,
    ResponseDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
    SessionUpdateEvent,
)

from deployments.metrics import SessionMetrics
from deployments.realtime.audio_input import AudioInput
from deployments.realtime.input_events import InputAudioEvents
from deployments.realtime.item_events import ItemEvents, replay
from deployments.realtime.kit import KitPorts, build_kit
from deployments.realtime.limits import InputGuard, TooManyViolations, Violation
from deployments.realtime.protocol import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_POLICY_VIOLATION,
    ProtocolError,
    SessionDrainingEvent,
    error_event,
    new_id,
    parse_client_event,
    server_event,
)
from deployments.realtime.recording.capture import RecordingRequest, each
from deployments.realtime.response.config import ResponseSettings
from deployments.realtime.response.requests import ResponseRequests
from deployments.realtime.response.responder import Responder, ResponseScope
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.settings import SessionSettings
from deployments.realtime.stages import NO_WATCH, BoundedStages, Stages, StageWatch
from deployments.realtime.supervision import Supervisor
from deployments.realtime.transports.port import (
    AgentLine,
    CallerAudio,
    CallerMessage,
    ClientInput,
    ClientLeft,
    MadeEvent,
    Transport,
)
from deployments.realtime.turn_taking.taker import TurnTaker
from deployments.session_store.record import item_from_record
from deployments.session_store.writer import SessionRecordWriter, StoredSession

logger = logging.getLogger(__name__)

FAILURE_REPORT_TIMEOUT_S = 1.0

E = TypeVar("E", bound=OpenAIModel)
Handler = Callable[[E], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class SessionStart:
    """How one session starts: the model it speaks with, and what its opening asked for."""

    model_name: str
    prompt_budget_tokens: int | None = None
    """The LLM's context less its answer (``None``: unbounded)."""
    watch: StageWatch = NO_WATCH
    """Which stages have no running replica (their calls fail at once)."""
    stored: StoredSession | None = None
    """Where the session's record is kept (``None``: nowhere, no resume)."""
    drain_notice: bool = False
    """The client asked for ``session.draining`` events."""
    recording: RecordingRequest | None = None
    """Whether its audio and report are recorded (``None``: not)."""


class RealtimeSession:
    def __init__(
        self,
        transport: Transport,
        stages: Stages,
        config: SessionConfig,
        scope: ResponseScope,
        metrics: SessionMetrics,
        start: SessionStart,
    ) -> None:
        stored = start.stored
        self.id = stored.session_id if stored is not None else new_id("sess")
        self._transport, self._start, self._draining = transport, start, False
        self._supervisor = Supervisor(self.id)
        self.settings = SessionSettings.for_new_session(config, start.model_name)
        stages = BoundedStages(stages, config.stage_timeout_s, start.watch)
        ports = KitPorts(self._send, transport.audio, lambda event: self._on_sent(event))
        self._kit = kit = build_kit(config, self.settings, stages, metrics, self._supervisor.spawn, ports)
        self._record = self._resume(stored)
        self._capture, self._refusal = start.recording.open(self.id) if start.recording is not None else (None, None)
        if self._capture is not None:  # a recording the budget refuses or stops is told of
            self._capture.tell = kit.outbox.put
        self._on_sent = each((metrics, self._record, self._capture))
        self._guard = InputGuard(config.limits)
        self._audio = AudioInput(stages.listen, self.settings, config, self._vad_failed)
        self._responder = Responder(kit, scope, ResponseSettings.from_config(config, start.prompt_budget_tokens))
        self._turns = TurnTaker(
            kit, self._audio, self._responder, config.partial_transcript_interval_s, config.prefill_while_listening
        )
        on_audio = self._capture.heard if self._capture is not None else None
        self._input = InputAudioEvents(kit, self._audio, self._guard, self._turns, on_audio)
        items = ItemEvents(kit, self._turns.transcription, config)
        self._handlers = self._dispatch(items, ResponseRequests(kit, self._responder, config.max_item_chars))

    def _resume(self, stored: StoredSession | None) -> SessionRecordWriter | None:
        """The stored session's settings and items, if it resumes one; the writer that keeps
        its record from now on (``None``: it is kept nowhere)."""
        if stored is None:
            return None
        resumed = stored.resumed
        if resumed is not None and resumed["settings"]:
            self.settings.update(SessionUpdateEvent(type="session.update", session=resumed["settings"]).session)
        for record in resumed["items"] if resumed is not None else []:
            self._kit.conversation.add(item_from_record(record))
        writer = SessionRecordWriter(self.settings, self._kit.conversation, stored.save, self._superseded)
        stored.rewrite_with(writer.rewrite)
        return writer

    def _dispatch(self, items: ItemEvents, responses: ResponseRequests) -> dict[type[OpenAIModel], Handler[Any]]:
        """Each client event type's handler."""
        return {
            SessionUpdateEvent: self._on_session_update,
            InputAudioBufferAppendEvent: self._input.append,
            InputAudioBufferCommitEvent: self._input.commit,
            InputAudioBufferClearEvent: self._input.clear,
            ConversationItemCreateEvent: items.create,
            ConversationItemTruncateEvent: items.truncate,
            ConversationItemRetrieveEvent: items.retrieve,
            ConversationItemDeleteEvent: items.delete,
            ResponseCreateEvent: responses.create,
            ResponseCancelEvent: responses.cancel,
            OutputAudioBufferClearEvent: self._on_output_audio_clear,
        }

    # ---- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the socket until the client leaves, the server closes it or a part fails."""
        self._kit.outbox.put(server_event(SessionCreatedEvent, session=self._described()))
        if self._refusal is not None:  # asked for a recording the server does not make
            self._kit.outbox.put(error_event(self._refusal))
        replay(self._kit.conversation, self._kit.outbox)
        try:
            await self._supervisor.run(self._receive(), self._kit.outbox.run(), self._audio.run(), self._turns.run())
        except* ClientLeft:
            pass
        except* TooManyViolations as group:
            error = ProtocolError("too_many_violations", str(group.exceptions[0]))
            await self._close_with(error_event(error), CLOSE_POLICY_VIOLATION)
        except* Exception as failure:
            logger.error("session %s failed", self.id, exc_info=failure)
            error = ProtocolError("session_failed", "the server failed this session; please reconnect")
            await self._close_with(error_event(error, "server_error"), CLOSE_INTERNAL_ERROR)
        finally:
            self._responder.cancel(None)
            self._turns.reset()
            if self._capture is not None:
                self._capture.finish()

    def open_with(self, session: dict[str, Any]) -> None:
        """Before ``run``: the settings of the client secret the session was opened with, as
        its first ``session.update`` (checked when the secret was made)."""
        update = SessionUpdateEvent.model_validate({"type": "session.update", "session": session})
        if self.settings.update(update.session):
            self._audio.reconfigure(self.settings.turn_detection)
        self._audio.reduce_noise(self.settings.noise_reduction)
        if self._record is not None:  # its resume must open with them too
            self._record.rewrite()

    def _described(self) -> RealtimeSessionCreateRequest:
        """The session as ``session.created`` shows it: its settings, and (extra fields, which
        the stock SDKs keep) its id and the token that resumes it."""
        session = self.settings.describe()
        session.id = self.id  # type: ignore[attr-defined]
        if self._start.stored is not None:
            session.resume_token = self._start.stored.resume_token  # type: ignore[attr-defined]
        return session

    def _superseded(self) -> None:
        """The session was resumed on another connection: this one ends, saying so."""
        error = ProtocolError("session_resumed_elsewhere", "this session was resumed on another connection")
        with contextlib.suppress(RuntimeError):  # unless it has ended already
            self._supervisor.spawn(self._close_with(error_event(error), CLOSE_POLICY_VIOLATION))

    def draining(self, closes_in_s: float) -> None:
        """The replica is being replaced: the socket closes in ``closes_in_s``."""
        self._draining = True
        if self._start.drain_notice:
            self._kit.outbox.put(server_event(SessionDrainingEvent, closes_in_ms=round(closes_in_s * 1000)))

    async def close(self, code: int, reason: str) -> None:
        """Server-side close (shutdown, a drain's end): stop the response, see the record
        hold what the client was told, then close with ``code``."""
        self._responder.cancel(None)
        if self._record is not None:
            await self._record.flushed()
        await self._transport.close(code, reason)

    async def _send(self, event: OpenAIModel) -> None:
        """Send ``event``. A draining session's client leaves at its turn's end
        (``response.done``), or at once between turns (``session.draining``), and resumes
        elsewhere, so those events wait until the record holds everything before them: the
        resume then finds the whole turn."""
        leaving_cue = isinstance(event, ResponseDoneEvent | SessionDrainingEvent)
        if self._draining and self._record is not None and leaving_cue:
            await self._record.flushed()
        await self._transport.send(event)

    async def _close_with(self, error: RealtimeErrorEvent, code: int) -> None:
        """Tell the client why, then close (straight to the socket: the send loop is gone)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FAILURE_REPORT_TIMEOUT_S):
                await self._transport.send(error)
                self._on_sent(error)  # counted and recorded like any error sent
                await self._transport.close(code, error.error.code or "")

    def _vad_failed(self) -> None:
        error = ProtocolError("vad_failed", "voice activity detection failed for a stretch of input audio")
        self._kit.outbox.put(error_event(error, "server_error"))

    # ---- receiving -------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:  # until the transport says ClientLeft
            await self._on_message(await self._transport.receive())

    async def _on_message(self, message: ClientInput) -> None:
        """Serve one client event; whatever goes wrong, the client hears of it and the
        session goes on (``TooManyViolations`` aside, which ends it)."""
        event_id = None
        try:
            if isinstance(message, CallerAudio):
                await self._guard.admit_event(message.size)
                await self._input.append_wire(message.audio, message.wire)
                return
            if isinstance(message, CallerMessage):
                await self._guard.admit_event(message.size)
                message.serve()
                return
            if isinstance(message, AgentLine):
                if self._responder.current is None:
                    self._responder.say(message.text)
                return
            if isinstance(message, MadeEvent):
                event = message.event
            else:
                size = len(message) if isinstance(message, bytes) or message.isascii() else len(message.encode())
                await self._guard.admit_event(size)
                event = parse_client_event(message)
            event_id = event.event_id
            handler = self._handlers.get(type(event))
            if handler is None:
                raise ProtocolError("unsupported_event", f"{event.type} is not supported by this server", "type")
            await handler(event)
        except ProtocolError as error:
            error.event_id = error.event_id or event_id
            self._kit.outbox.put(error_event(error))
            if isinstance(error, Violation):
                self._guard.refused()
        except Exception:
            logger.exception("session %s: an event failed", self.id)
            failure = ProtocolError("event_failed", "the server failed to handle this event", event_id=event_id)
            self._kit.outbox.put(error_event(failure, "server_error"))

    async def _on_output_audio_clear(self, event: OutputAudioBufferClearEvent) -> None:
        """The client asks the server to stop playing: only where the server plays the answer
        itself (a WebRTC call); a WebSocket client plays, and stops, its own audio."""
        if not self._transport.audio.plays_itself:
            raise ProtocolError("unsupported_event", "output_audio_buffer.clear is served on WebRTC calls only", "type")
        await self._transport.audio.clear()

    async def _on_session_update(self, event: SessionUpdateEvent) -> None:
        if self.settings.update(event.session):
            self._audio.reconfigure(self.settings.turn_detection)
            self._turns.reset()
        self._audio.reduce_noise(self.settings.noise_reduction)
        self._kit.outbox.put(server_event(SessionUpdatedEvent, session=self.settings.describe()))
