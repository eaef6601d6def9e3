"""Responses: the LLM's reply, cut into speakable pieces, spoken by TTS, sent as audio frames.

A :class:`ResponseRun` is one response, with its own id: everything it sends is tagged with
that id, so the outbox can drop exactly its output when it is cancelled. The
:class:`Responder` owns the session's current response and its lifecycle:

- ``start`` announces the response (``response.created``) before it returns, so a cancel
  that comes at once still finds a response the client has seen (review D4);
- ``cancel`` is synchronous: the scope's generation moves on (workers stop at their next
  check), the Serve streams are cancelled on their replicas (the LLM aborts its engine
  request), queued output is dropped, and ``response.done`` says ``cancelled``, with the
  words the client was sent audio for (review D3);
- a run that fails ends with an ``error`` and ``response.done`` ``failed``: never an
  answer cut short and passed off as complete. The error says what failed in our words (a
  :class:`StageFailure`: which stage, failed or timed out), never a replica's internals.
- a TTS replica that dies mid-piece costs no words: the piece is spoken by another replica
  at once, or the response fails within 2 s (``deployments.realtime.failover``).

The prompt always fits the LLM's context: when the conversation may have outgrown it, the LLM
deployment counts it with the model's tokenizer and the oldest items leave the conversation
(``Stages.fit``), for good, so later turns start from the same place and keep vLLM's prefix
cache.

A speculative run is started *held* in the pause that may end the user's turn and is
``adopt``-ed when it does: shown if it answers exactly what the turn ended with, else
replaced by a fresh run.
"""

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    RealtimeResponse,
    RealtimeResponseStatus,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from cancel import ScopeTicket
from deployments.messages import LLMRequest, TTSRequest
from deployments.metrics import SessionMetrics
from deployments.realtime.conversation import Conversation, Item, wire_item
from deployments.realtime.failover import FailoverStream
from deployments.realtime.outbox import Outbox
from deployments.realtime.protocol import ProtocolError, error_event, new_id, server_event
from deployments.realtime.settings import ResponseOptions, SessionSettings
from deployments.realtime.stages import StageFailure, Stages, StageStream
from deployments.realtime.timeline import Timeline
from handlers.audio import REALTIME_RATE
from handlers.llm import ChatMessage
from handlers.text import SpeechChunker
from handlers.tools import FunctionCallArguments, FunctionCallStarted, LLMOutput

logger = logging.getLogger(__name__)

CancelReason = Literal["turn_detected", "client_cancelled"]
Status = Literal["in_progress", "completed", "cancelled", "failed"]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class ResponseScope(Protocol):
    """What a response needs of the session's cancel scope (``cancel.SessionScope``)."""

    @property
    def generation(self) -> int: ...

    def cancel(self) -> int: ...

    def ticket(self, generation: int | None = None) -> ScopeTicket: ...


@dataclass
class ResponseRun:
    id: str
    item: Item
    generation: int
    prompt: "asyncio.Future[list[ChatMessage]]"
    timeline: Timeline
    shown: bool = True
    """False while held: the client has seen nothing of it yet."""
    options: ResponseOptions = ResponseOptions()
    after: str | None = None
    """The item a held run's first output follows (the user's turn)."""
    outputs: list[Item] = field(default_factory=list)
    """The items announced so far, in output order: the answer (``item``), function calls."""
    calls: list[Item] = field(default_factory=list)
    """The function calls, by the model's call index."""
    status: Status = "in_progress"
    streams: set[StageStream[Any]] = field(default_factory=set)
    task: "asyncio.Task[None] | None" = None

    def stop(self) -> None:
        for stream in self.streams:
            stream.cancel()
        if self.task is not None:
            self.task.cancel()
        self.prompt.cancel()


@dataclass(frozen=True)
class ResponseSettings:
    first_chunk_words: int
    audio_delta_ms: int
    prompt_budget_tokens: int | None
    """The LLM's context less its answer's tokens (``None``: no limit to keep to)."""


class Responder:
    def __init__(
        self,
        stages: Stages,
        scope: ResponseScope,
        outbox: Outbox,
        conversation: Conversation,
        settings: ResponseSettings,
        session: SessionSettings,
        metrics: SessionMetrics,
        spawn: Spawn,
    ) -> None:
        self._stages = stages
        self._session = session
        self._scope = scope
        self._outbox = outbox
        self._conversation = conversation
        self._settings = settings
        self._metrics = metrics
        self._spawn = spawn
        self._frame_bytes = REALTIME_RATE * settings.audio_delta_ms // 1000 * 2
        self.current: ResponseRun | None = None
        """The response a barge-in or ``response.cancel`` would stop."""
        self.ended: Callable[[ResponseRun], None] = lambda run: None
        """Told of every response the client saw end (turn-taking times silence from it)."""

    def start(
        self,
        prompt: Awaitable[list[ChatMessage]],
        timeline: Timeline,
        held: bool = False,
        previous_item_id: str | None = None,
        options: ResponseOptions | None = None,
    ) -> ResponseRun:
        """Start answering ``prompt``; a held run is seen by nobody until adopted.

        ``previous_item_id`` is the item a held run's answer will follow once adopted (the
        user's turn); a shown run's outputs follow the conversation's last item, unless
        ``options`` keep them out of the conversation. Without ``options``, the session's
        settings apply. Output items are announced as the model starts each: an answer
        that is only a function call has no empty message beside it.
        """
        options = options or self._session.response_options(None)
        item = Item(new_id("item"), "assistant", spoken_aloud=not options.text_only)
        future = asyncio.ensure_future(prompt)
        run = ResponseRun(new_id("resp"), item, self._scope.generation, future, timeline, options=options)
        if held:
            run.shown = False
            run.after = previous_item_id
            self._outbox.hold(run.id)
        else:
            self.current = run
        self._emit(run, ResponseCreatedEvent, response=wire_response(run))
        run.task = self._spawn(self._run(run))
        run.task.add_done_callback(lambda _: self._outbox.forget(run.id))
        return run

    def adopt(self, run: ResponseRun, prompt: Awaitable[list[ChatMessage]]) -> None:
        """The turn ended: ``run`` (held) becomes the response, shown once it is confirmed to
        answer ``prompt``, the conversation as it now stands; else a fresh run answers it."""
        self.current = run
        self._spawn(self._confirm(run, asyncio.ensure_future(prompt)))

    def cancel(self, reason: CancelReason | None) -> bool:
        """Stop the current response; ``False`` when the client had none to stop.

        Synchronous on purpose: nothing of the response can be queued between the decision
        and the generation bump.
        """
        run, self.current = self.current, None
        if run is None:
            return False
        self._scope.cancel()
        self._stop(run)
        if not run.shown:
            return False
        if reason is not None:
            self._metrics.cancelled(reason)
        if run.item.spoken_aloud:
            run.item.heard_until(run.item.audio_ms)
        self._end(run, "cancelled", RealtimeResponseStatus(type="cancelled", reason=reason))
        return True

    def abandon(self, run: ResponseRun) -> None:
        """Drop a held run the client never saw: nothing to tell it."""
        if self.current is run:
            self.current = None
        self._stop(run)

    def _stop(self, run: ResponseRun) -> None:
        """Stop the run's work and drop its output (queued, held and to come)."""
        run.stop()
        self._outbox.cancel(run.id)

    async def _confirm(self, run: ResponseRun, prompt: "asyncio.Future[list[ChatMessage]]") -> None:
        try:
            same = await run.prompt == await prompt
        except Exception:  # a transcription failed: answer afresh (or fail there, visibly)
            same = False
        if self.current is not run:
            return  # cancelled meanwhile
        if same and run.status in ("in_progress", "completed"):
            run.timeline.adopted = True
            run.shown = True
            if run.options.in_conversation:
                for item in run.outputs:
                    self._conversation.add(item)
            self._outbox.release(run.id)
            if run.status == "completed":  # it ended while held: the client sees it end now
                self.current = None
                self.ended(run)
            return
        self.abandon(run)
        self.start(prompt, run.timeline.for_fresh_answer())

    async def _run(self, run: ResponseRun) -> None:
        try:
            messages = await self._fitted(await run.prompt)
            run.timeline.mark("prompt_ready")
            ticket = self._scope.ticket(run.generation)
            options = run.options
            llm = self._stages.generate(LLMRequest(messages, ticket, run.id, options.max_output_tokens, options.tools))
            run.streams.add(llm)
            spoken = run.item.spoken_aloud
            chunker = SpeechChunker(first_chunk_max_words=self._settings.first_chunk_words) if spoken else None
            async with contextlib.aclosing(_pieces(llm, chunker, run.timeline)) as pieces:
                async for piece in pieces:
                    if not isinstance(piece, str):
                        await self._call(run, piece)
                        continue
                    if run.item not in run.outputs:
                        self._announce(run, run.item)
                    await (self._speak(run, piece, ticket) if spoken else self._write(run, piece))
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Cancelled: Serve reports a stream cancelled under its consumer as
                # RequestCancelledError; it is this cancellation, not a failure.
                raise asyncio.CancelledError from None
            logger.warning("response %s failed", run.id, exc_info=exc)  # the session goes on
            self._fail(run, exc if isinstance(exc, StageFailure) else None)
        else:
            self._finish(run)

    async def _fitted(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` within the LLM's context: if they may not fit, the LLM says how many
        of the oldest must go, and those items leave the conversation."""
        budget = self._settings.prompt_budget_tokens
        if budget is None or _most_tokens(messages) <= budget:
            return messages
        dropped = await self._stages.fit(messages)
        if not dropped:
            return messages
        system = messages[:1] if messages[0]["role"] == "system" else []
        kept = messages[len(system) + dropped :]
        self._conversation.forget_oldest(dropped)
        return system + kept

    def _announce(self, run: ResponseRun, item: Item) -> None:
        """``item`` is the run's next output: the client (and the conversation) get it."""
        run.outputs.append(item)
        wire = wire_item(item, "in_progress")
        if run.options.in_conversation:
            if run.shown:
                previous = self._conversation.add(item)
            else:
                previous = run.outputs[-2].id if len(run.outputs) > 1 else run.after
            self._emit(run, ConversationItemAdded, item=wire, previous_item_id=previous)
        self._emit(run, ResponseOutputItemAddedEvent, response_id=run.id, output_index=len(run.outputs) - 1, item=wire)
        if item is run.item:
            self._emit(run, ResponseContentPartAddedEvent, part=_part(item, ""), **_ids(run))

    async def _call(self, run: ResponseRun, piece: FunctionCallStarted | FunctionCallArguments) -> None:
        """The model calls a function: the call is an output item of its own."""
        if isinstance(piece, FunctionCallStarted):
            call = Item(new_id("item"), "assistant", "", "function_call", piece.call_id, piece.name, complete=False)
            run.calls.append(call)
            self._announce(run, call)
            return
        call = run.calls[piece.index]
        await self._outbox.room(run.id)
        call.text += piece.delta
        self._emit(
            run,
            ResponseFunctionCallArgumentsDeltaEvent,
            response_id=run.id,
            item_id=call.id,
            output_index=run.outputs.index(call),
            call_id=call.call_id,
            delta=piece.delta,
        )

    async def _write(self, run: ResponseRun, delta: str) -> None:
        """A text answer: the LLM's deltas as they come, no TTS."""
        await self._outbox.room(run.id)
        run.item.text += delta
        self._emit(run, ResponseTextDeltaEvent, delta=delta, **_ids(run))

    async def _speak(self, run: ResponseRun, piece: str, ticket: ScopeTicket) -> None:
        text = piece if not run.item.text else " " + piece
        self._emit(run, ResponseAudioTranscriptDeltaEvent, delta=text, **_ids(run))
        request = TTSRequest(piece, ticket)
        tts = FailoverStream(lambda: self._stages.synthesize(request), run.id)  # a lost replica: another speaks
        run.streams.add(tts)
        continues_piece = False
        async for pcm in tts:
            run.timeline.mark("tts_first_audio")
            run.item.speak(text, _ms(len(pcm)), continues_piece)
            continues_piece = True
            for offset in range(0, len(pcm), self._frame_bytes):
                await self._outbox.room(run.id)
                frame = pcm[offset : offset + self._frame_bytes]
                self._emit(run, ResponseAudioDeltaEvent, delta=base64.b64encode(frame).decode("ascii"), **_ids(run))
                run.timeline.mark("first_audio")
                run.item.audio_ms += _ms(len(frame))
        run.streams.discard(tts)

    def _finish(self, run: ResponseRun) -> None:
        if self.current is run and run.shown:
            self.current = None
        run.status = "completed"
        if not run.outputs:  # an empty answer still has its item
            self._announce(run, run.item)
        for index, item in enumerate(run.outputs):
            if item is run.item:
                self._answer_done(run)
            else:
                item.complete = True
                self._emit(
                    run,
                    ResponseFunctionCallArgumentsDoneEvent,
                    response_id=run.id,
                    item_id=item.id,
                    output_index=index,
                    call_id=item.call_id,
                    name=item.name,
                    arguments=item.text,
                )
            self._emit(run, ResponseOutputItemDoneEvent, response_id=run.id, output_index=index, item=wire_item(item))
            if run.options.in_conversation:
                self._emit(run, ConversationItemDone, item=wire_item(item))
        self._end(run, "completed")

    def _answer_done(self, run: ResponseRun) -> None:
        """The spoken or written answer's content is whole."""
        answer = run.item
        if answer.spoken_aloud:
            self._emit(run, ResponseAudioDoneEvent, **_ids(run))
            self._emit(run, ResponseAudioTranscriptDoneEvent, transcript=answer.text, **_ids(run))
        else:
            self._emit(run, ResponseTextDoneEvent, text=answer.text, **_ids(run))
        self._emit(run, ResponseContentPartDoneEvent, part=_part(answer, answer.text), **_ids(run))

    def _fail(self, run: ResponseRun, failure: StageFailure | None) -> None:
        run.status = "failed"
        if not run.shown:
            return  # a held run: adoption sees it failed and answers afresh
        if self.current is run:
            self.current = None
        code, why = (failure.code, failure.message) if failure else ("response_failed", "the server failed")
        error = ProtocolError(code, f"response {run.id} could not be completed: {why}")
        self._outbox.put(error_event(error, "server_error"), run.id)
        status = RealtimeResponseStatus(type="failed", error={"type": "server_error", "code": error.code})
        self._end(run, "failed", status)

    def _end(self, run: ResponseRun, status: Status, details: RealtimeResponseStatus | None = None) -> None:
        run.status = status
        self._emit(run, ResponseDoneEvent, response=wire_response(run, details))
        if run.shown:
            self.ended(run)
        self._metrics.response_ended(run.timeline.report(run.id, status))

    def _emit(self, run: ResponseRun, event_type: Any, **fields: Any) -> None:
        self._outbox.put(server_event(event_type, **fields), run.id)


async def _pieces(
    outputs: StageStream[LLMOutput], chunker: SpeechChunker | None, timeline: Timeline
) -> AsyncGenerator[LLMOutput, None]:
    """The LLM's outputs as the responder takes them: text in speakable pieces (with a
    ``chunker``) or as it comes, function calls as they are. Pulled by the responder:
    nothing queues between them, so a cancel leaves no producer behind (review D1); closed
    with ``aclosing``."""
    async for output in outputs:
        timeline.mark("llm_first_delta")
        if chunker is None or not isinstance(output, str):
            yield output
            continue
        for piece in chunker.feed(output):
            timeline.mark("first_piece")
            yield piece
    for piece in chunker.flush() if chunker is not None else ():
        timeline.mark("first_piece")
        yield piece


def wire_response(run: ResponseRun, details: RealtimeResponseStatus | None = None) -> RealtimeResponse:
    return RealtimeResponse(
        id=run.id,
        object="realtime.response",
        status=run.status,
        status_details=details,
        output_modalities=["audio"] if run.item.spoken_aloud else ["text"],
        conversation_id=None if run.options.in_conversation else "none",
        max_output_tokens=run.options.max_output_tokens or "inf",
        metadata=run.options.metadata,
        output=[] if run.status == "in_progress" else [wire_item(item, run.status) for item in run.outputs],
    )


def _part(item: Item, text: str) -> dict[str, str]:
    return {"type": "audio", "transcript": text} if item.spoken_aloud else {"type": "text", "text": text}


def _most_tokens(messages: list[ChatMessage]) -> int:
    """More tokens than ``messages`` can take in any byte-level tokenizer (each byte at most a
    token, plus the chat template's markup), so below the budget no count is needed."""
    return 64 + sum(16 + len(json.dumps(m).encode()) for m in messages)


def _ids(run: ResponseRun) -> dict[str, Any]:
    """Where the answer's content is: its item's place among the run's outputs."""
    return {
        "response_id": run.id,
        "item_id": run.item.id,
        "output_index": run.outputs.index(run.item),
        "content_index": 0,
    }


def _ms(pcm_bytes: int) -> float:
    return pcm_bytes * 1000 / (2 * REALTIME_RATE)
