"""One Realtime conversation: the parts of a session, wired and supervised.

Data flows one way: socket -> dispatch (here) -> :class:`AudioInput` -> VAD boundaries ->
:class:`TurnTaker` -> :class:`Conversation` / :class:`Responder` -> :class:`Outbox` ->
socket. Each part gets its collaborators passed in, so each can run against fake stages.

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
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemCreateEvent,
    ConversationItemDeletedEvent,
    ConversationItemDeleteEvent,
    ConversationItemDone,
    ConversationItemRetrieveEvent,
    ConversationItemTruncatedEvent,
    ConversationItemTruncateEvent,
    InputAudioBufferAppendEvent,
    InputAudioBufferClearedEvent,
    InputAudioBufferClearEvent,
    InputAudioBufferCommitEvent,
    RealtimeErrorEvent,
    ResponseCancelEvent,
    ResponseCreateEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
    SessionUpdateEvent,
)
from openai.types.realtime.realtime_server_event import ConversationItemRetrieved
from starlette.websockets import WebSocketState

from deployments.config import IngressConfig
from deployments.metrics import SessionMetrics
from deployments.realtime.audio_input import AudioInput
from deployments.realtime.conversation import Conversation, Item, prompt, wire_item
from deployments.realtime.limits import InputGuard, LimitExceeded, TooManyViolations
from deployments.realtime.outbox import Outbox
from deployments.realtime.protocol import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_POLICY_VIOLATION,
    ProtocolError,
    encode,
    error_event,
    new_id,
    parse_client_event,
    server_event,
)
from deployments.realtime.response import Responder, ResponseScope, ResponseSettings
from deployments.realtime.settings import SessionSettings
from deployments.realtime.stages import BoundedStages, Stages
from deployments.realtime.timeline import Timeline
from deployments.realtime.turns import TurnTaker
from handlers.audio import REALTIME_RATE, SPEECH_RATE, b64_pcm16_decode, pcm16_to_float, resample

logger = logging.getLogger(__name__)

MIN_COMMIT_MS = 100
FAILURE_REPORT_TIMEOUT_S = 1.0

Handler = Callable[[Any], Awaitable[None]]


class ClientLeft(Exception):
    """The socket closed: the session ends normally."""


class RealtimeSession:
    def __init__(
        self,
        websocket: WebSocket,
        stages: Stages,
        config: IngressConfig,
        scope: ResponseScope,
        model_name: str,
        metrics: SessionMetrics,
        prompt_budget_tokens: int | None = None,
    ) -> None:
        """``prompt_budget_tokens``: the LLM's context less its answer (``None``: unbounded)."""
        self.id = new_id("sess")
        self._ws = websocket
        stages = BoundedStages(stages, config.stage_timeout_s)
        self._tasks: asyncio.TaskGroup | None = None
        self._settings = SessionSettings(
            model_name, config.instructions, config.turn_detection, config.turn_detection, config.max_item_chars
        )
        self._outbox = Outbox(self._send, config.outgoing_events, metrics.sent, metrics.dropped)
        self._conversation = Conversation(config.history_items)
        self._guard = InputGuard(config.limits)
        self._max_item_chars = config.max_item_chars
        self._max_input_audio_s = config.max_input_audio_s
        self._audio = AudioInput(
            stages.detect,
            config.turn_detection,
            config.turn_detection,
            config.max_input_audio_s,
            config.limits.max_queued_audio_s,
            self._vad_failed,
        )
        self._responder = Responder(
            stages,
            scope,
            self._outbox,
            self._conversation,
            ResponseSettings(config.first_chunk_words, config.audio_delta_ms, prompt_budget_tokens),
            self._settings,
            metrics,
            self._spawn,
        )
        self._turns = TurnTaker(
            self._audio,
            stages,
            self._conversation,
            self._responder,
            self._outbox,
            self._settings,
            metrics,
            self._spawn,
            config.prefill_while_listening,
            config.partial_transcript_interval_s,
        )
        self._metrics = metrics
        self._handlers: dict[type[OpenAIModel], Handler] = {
            SessionUpdateEvent: self._on_session_update,
            InputAudioBufferAppendEvent: self._on_input_audio_buffer_append,
            InputAudioBufferCommitEvent: self._on_input_audio_buffer_commit,
            InputAudioBufferClearEvent: self._on_input_audio_buffer_clear,
            ConversationItemCreateEvent: self._on_conversation_item_create,
            ConversationItemTruncateEvent: self._on_conversation_item_truncate,
            ConversationItemRetrieveEvent: self._on_conversation_item_retrieve,
            ConversationItemDeleteEvent: self._on_conversation_item_delete,
            ResponseCreateEvent: self._on_response_create,
            ResponseCancelEvent: self._on_response_cancel,
        }

    # ---- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the socket until the client leaves, the server closes it or a part fails."""
        self._outbox.put(server_event(SessionCreatedEvent, session=self._settings.describe()))
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                for loop in (self._receive(), self._outbox.run(), self._audio.run(), self._turns.run()):
                    tasks.create_task(loop)
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
            self._tasks = None
            self._responder.cancel(None)
            self._turns.reset()

    async def close(self, code: int, reason: str) -> None:
        """Server-side close (shutdown): stop the response, then close with ``code``."""
        self._responder.cancel(None)
        with contextlib.suppress(RuntimeError):  # already closed by the client
            await self._ws.close(code=code, reason=reason)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
        """Start a task under the session's supervision (it fails the session if it fails)."""
        if self._tasks is None:
            coroutine.close()
            raise RuntimeError(f"session {self.id} is not running")
        return self._tasks.create_task(coroutine)

    async def _close_with(self, error: RealtimeErrorEvent, code: int) -> None:
        """Tell the client why, then close (straight to the socket: the send loop is gone)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(FAILURE_REPORT_TIMEOUT_S):
                await self._ws.send_text(encode(error))
                await self._ws.close(code=code, reason=error.error.code or "")

    async def _send(self, text: str) -> None:
        try:
            await self._ws.send_text(text)
        except (WebSocketDisconnect, OSError) as exc:
            raise ClientLeft from exc
        except RuntimeError as exc:  # Starlette's answer to sending on a closed socket
            if WebSocketState.DISCONNECTED in (self._ws.client_state, self._ws.application_state):
                raise ClientLeft from exc
            raise

    def _vad_failed(self) -> None:
        error = ProtocolError("vad_failed", "voice activity detection failed for a stretch of input audio")
        self._outbox.put(error_event(error, "server_error"))

    # ---- receiving -------------------------------------------------------------------

    async def _receive(self) -> None:
        try:
            while True:
                message = await self._ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                await self._on_message(message.get("text") or message.get("bytes") or "")
        except WebSocketDisconnect:
            pass
        raise ClientLeft

    async def _on_message(self, text: str | bytes) -> None:
        """Serve one client event; whatever goes wrong, the client hears of it and the
        session goes on (``TooManyViolations`` aside, which ends it)."""
        event_id = None
        try:
            size = len(text) if isinstance(text, bytes) or text.isascii() else len(text.encode())
            await self._guard.admit_event(size)
            event = parse_client_event(text)
            event_id = event.event_id
            handler = self._handlers.get(type(event))
            if handler is None:
                raise ProtocolError("unsupported_event", f"{event.type} is not supported by this server", "type")
            await handler(event)
        except ProtocolError as error:
            error.event_id = error.event_id or event_id
            self._outbox.put(error_event(error))
            if isinstance(error, LimitExceeded):
                self._guard.refused()
        except Exception:
            logger.exception("session %s: an event failed", self.id)
            failure = ProtocolError("event_failed", "the server failed to handle this event", event_id=event_id)
            self._outbox.put(error_event(failure, "server_error"))

    async def _on_session_update(self, event: SessionUpdateEvent) -> None:
        if self._settings.update(event.session):
            self._audio.reconfigure(self._settings.turn_detection)
            self._turns.reset()
        self._outbox.put(server_event(SessionUpdatedEvent, session=self._settings.describe()))

    async def _on_input_audio_buffer_append(self, event: InputAudioBufferAppendEvent) -> None:
        try:
            pcm = b64_pcm16_decode(event.audio)
        except ValueError as exc:
            raise ProtocolError("invalid_value", str(exc), "audio") from None
        await self._guard.admit_audio(len(pcm) / (2 * REALTIME_RATE))
        self._audio.append(pcm)

    async def _on_input_audio_buffer_commit(self, event: InputAudioBufferCommitEvent) -> None:
        utterance = await self._audio.commit()
        if len(utterance) < SPEECH_RATE * MIN_COMMIT_MS // 1000:
            raise ProtocolError(
                "input_audio_buffer_commit_empty", f"buffer too small: expected at least {MIN_COMMIT_MS}ms of audio"
            )
        self._turns.reset()
        self._turns.commit(utterance, new_id("item"))

    async def _on_input_audio_buffer_clear(self, event: InputAudioBufferClearEvent) -> None:
        await self._audio.clear()
        self._turns.reset()
        self._outbox.put(server_event(InputAudioBufferClearedEvent))

    async def _on_conversation_item_create(self, event: ConversationItemCreateEvent) -> None:
        item = event.item
        if item.id is not None and self._conversation.find(item.id) is not None:
            raise ProtocolError("invalid_value", f"the conversation already has an item {item.id[:64]!r}", "item.id")
        if item.type == "message" and [part.type for part in item.content] == ["input_audio"] and item.role == "user":
            await self._create_audio_item(item.id or new_id("item"), item.content[0].audio, event.previous_item_id)
            return
        added = self._client_item(item, "item")
        previous = self._add(added, event.previous_item_id)
        self._outbox.put(server_event(ConversationItemAdded, item=wire_item(added), previous_item_id=previous))
        self._outbox.put(server_event(ConversationItemDone, item=wire_item(added), previous_item_id=previous))

    async def _create_audio_item(self, item_id: str, audio: str | None, after: str | None) -> None:
        """A user's recorded audio, added as an item and transcribed as speech is."""
        try:
            pcm = b64_pcm16_decode(audio or "")
        except ValueError as exc:
            raise ProtocolError("invalid_value", str(exc), "item.content.audio") from None
        seconds = len(pcm) / (2 * REALTIME_RATE)
        if not MIN_COMMIT_MS / 1000 <= seconds <= self._max_input_audio_s:
            raise ProtocolError(
                "invalid_value",
                f"input_audio must be {MIN_COMMIT_MS} ms to {self._max_input_audio_s:g} s long",
                "item.content.audio",
            )
        utterance = resample(pcm16_to_float(pcm), REALTIME_RATE, SPEECH_RATE)
        try:
            self._turns.add_audio_item(utterance, item_id, after)
        except KeyError:
            raise _unknown_item(after, "previous_item_id") from None

    def _add(self, item: Item, after: str | None) -> str | None:
        try:
            return self._conversation.add(item, after)
        except KeyError:
            raise _unknown_item(after, "previous_item_id") from None

    async def _on_conversation_item_retrieve(self, event: ConversationItemRetrieveEvent) -> None:
        item = self._conversation.find(event.item_id)
        if item is None:
            raise _unknown_item(event.item_id, "item_id")
        self._outbox.put(server_event(ConversationItemRetrieved, item=wire_item(item)))

    async def _on_conversation_item_delete(self, event: ConversationItemDeleteEvent) -> None:
        if not self._conversation.delete(event.item_id):
            raise _unknown_item(event.item_id, "item_id")
        self._outbox.put(server_event(ConversationItemDeletedEvent, item_id=event.item_id))

    async def _on_conversation_item_truncate(self, event: ConversationItemTruncateEvent) -> None:
        item = self._conversation.find(event.item_id)
        if item is None or item.role != "assistant" or item.type != "message":
            raise ProtocolError("invalid_value", f"no assistant message {event.item_id[:64]!r}", "item_id")
        if event.content_index != 0:
            raise ProtocolError("invalid_value", "content_index must be 0 (an item has one part)", "content_index")
        if not item.spoken_aloud:
            raise ProtocolError("invalid_value", f"item {item.id!r} is a text answer: it has no audio", "item_id")
        if event.audio_end_ms < 0:
            raise ProtocolError("invalid_value", "audio_end_ms must not be negative", "audio_end_ms")
        # A client counts what it received, rounded as it likes: past the audio sent means
        # all of it was heard, never an error.
        audio_end_ms = min(event.audio_end_ms, math.floor(item.audio_ms))
        item.heard_until(event.audio_end_ms)
        self._outbox.put(
            server_event(ConversationItemTruncatedEvent, item_id=item.id, content_index=0, audio_end_ms=audio_end_ms)
        )

    async def _on_response_create(self, event: ResponseCreateEvent) -> None:
        if self._responder.current is not None:
            raise ProtocolError("conversation_already_has_active_response", "a response is already in progress")
        asked = event.response
        options = self._settings.response_options(asked)
        items = self._conversation.items
        if asked is not None and asked.input is not None:  # a context of its own for this answer
            items = tuple(self._client_item(item, f"response.input[{i}]") for i, item in enumerate(asked.input))
        self._metrics.turn_ended()
        timeline = Timeline()
        timeline.mark("requested")
        self._responder.start(prompt(items, options.instructions), timeline, options=options)

    def _client_item(self, item: Any, param: str) -> Item:
        """A client's text message, function call or function result as an item."""
        item_id = item.id or new_id("item")
        if item.type == "message":
            return Item(item_id, item.role, self._message_text(item, param))
        if item.type == "function_call":
            arguments = self._within_limit(item.arguments or "{}", f"{param}.arguments")
            return Item(item_id, "assistant", arguments, "function_call", item.call_id or new_id("call"), item.name)
        if item.type == "function_call_output":
            output = self._within_limit(item.output, f"{param}.output")
            return Item(item_id, "user", output, "function_call_output", item.call_id)
        raise ProtocolError("unsupported_value", f"{item.type} items are not supported", f"{param}.type")

    def _within_limit(self, text: str, param: str) -> str:
        if len(text) > self._max_item_chars:
            raise ProtocolError(
                "invalid_value",
                f"item text of {len(text)} characters is over this server's limit of {self._max_item_chars}",
                param,
            )
        return text

    def _message_text(self, item: Any, param: str) -> str:
        """The text of a message item's parts, within ``max_item_chars``."""
        if not {part.type for part in item.content} <= {"input_text", "text", "output_text"}:
            raise ProtocolError(
                "unsupported_value", "an item holds text parts, or one input_audio part of a user", f"{param}.content"
            )
        return self._within_limit(
            " ".join(getattr(part, "text", None) or "" for part in item.content), f"{param}.content"
        )

    async def _on_response_cancel(self, event: ResponseCancelEvent) -> None:
        if not self._responder.cancel("client_cancelled"):
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")


def _unknown_item(item_id: str | None, param: str) -> ProtocolError:
    return ProtocolError("item_not_found", f"no item {str(item_id)[:64]!r} in the conversation", param)
