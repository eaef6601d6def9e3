"""Responses: the session's current response and its lifecycle.

- ``start`` announces the response (``response.created``) before it returns, so a cancel
  that comes at once still finds a response the client has seen;
- ``cancel`` is synchronous: the scope's generation moves on (workers stop at their next
  check), the Serve streams are cancelled on their replicas (the LLM aborts its engine
  request), queued output is dropped, and ``response.done`` says ``cancelled``, with the
  words and audio the client was actually sent;
- a run that fails ends with an ``error`` and ``response.done`` ``failed``: never an
  answer cut short and passed off as complete. The error says what failed in our words (a
  :class:`StageFailure`: which stage, failed or timed out), never a replica's internals.

The LLM's outputs go where their kind says: text to the answer's sink (spoken or written,
``answer_sinks``), calls to ``function_calls``; their wire events are in
``response_events``. The prompt always fits the LLM's context (``Conversation.fit``). A
held run (``speculation``) is started like any other; the outbox keeps its events back.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol

from openai.types.realtime import RealtimeResponseStatus

from cancel import ScopeTicket
from deployments.messages import LLMRequest
from deployments.realtime.conversation import NothingToAnswer
from deployments.realtime.failures import StageFailure
from deployments.realtime.items import AssistantMessage, FunctionCall, Item
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import ProtocolError, new_id
from deployments.realtime.response.answer_sinks import AnswerSink, answer_sink
from deployments.realtime.response.config import ResponseSettings
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.function_calls import FunctionCalls, finish_call
from deployments.realtime.response.run import CancelReason, DropReason, ResponseRun, Status
from deployments.realtime.settings import ResponseOptions
from deployments.realtime.spoken_lines import sentences
from deployments.realtime.stages import StageStream
from deployments.realtime.timeline import Timeline
from handlers.llm import ChatMessage
from handlers.tools import FunctionCallArguments, FunctionCallStarted, LLMOutput, TokenCapReached

logger = logging.getLogger(__name__)


class ResponseScope(Protocol):
    """What a response needs of the session's cancel scope (``cancel.SessionScope``)."""

    @property
    def generation(self) -> int: ...

    def cancel(self) -> int: ...

    def ticket(self, generation: int | None = None) -> ScopeTicket: ...


class Responder:
    def __init__(self, kit: SessionKit, scope: ResponseScope, settings: ResponseSettings) -> None:
        self._kit, self._scope, self._settings = kit, scope, settings
        self._end_callbacks: list[Callable[[ResponseRun], None]] = []
        self.current: ResponseRun | None = None
        """The response a barge-in or ``response.cancel`` would stop."""

    def on_end(self, callback: Callable[[ResponseRun], None]) -> None:
        """Call ``callback`` with every response the client saw end."""
        self._end_callbacks.append(callback)

    def new_run(
        self, prompt: Awaitable[list[ChatMessage]], timeline: Timeline, options: ResponseOptions | None = None
    ) -> ResponseRun:
        """A run answering ``prompt`` (with the session's settings unless ``options``),
        not started yet."""
        options = options or self._kit.settings.response_options(None)
        answer = AssistantMessage(new_id("item"), spoken_aloud=not options.text_only)
        future = asyncio.ensure_future(prompt)
        return ResponseRun(new_id("resp"), answer, self._scope.generation, future, timeline, options)

    def start(self, run: ResponseRun) -> ResponseRun:
        """Start ``run``; unless the outbox holds it, it is now the current response.
        Output items are announced as the model starts each: an answer that is only a
        function call has no empty message beside it."""
        if not self._kit.outbox.holds(run.id):
            self.current = run
        ResponseEvents(self._kit.outbox, run).created()
        run.task = self._kit.spawn(self._run(run))
        run.task.add_done_callback(lambda _: self._kit.outbox.forget(run.id))
        return run

    def answer(
        self, prompt: Awaitable[list[ChatMessage]], timeline: Timeline, options: ResponseOptions | None = None
    ) -> ResponseRun:
        return self.start(self.new_run(prompt, timeline, options))

    def say(self, words: str) -> ResponseRun:
        """Say ``words`` as they are, without the LLM: a response like any other (paced, a
        barge-in stops it, the conversation keeps what was heard), a sentence a piece, as
        the ingress keeps a line said on every call ready (``spoken_lines``)."""
        timeline = Timeline()
        timeline.mark("requested")
        no_prompt: asyncio.Future[list[ChatMessage]] = asyncio.get_running_loop().create_future()
        no_prompt.set_result([])
        run = self.new_run(no_prompt, timeline)
        run.script = words
        return self.start(run)

    def show(self, run: ResponseRun) -> None:
        """The held ``run`` (current by now) is the answer: its outputs join the
        conversation and its events go out; if it ended while held, it ends now."""
        if run.options.in_conversation:
            for item in run.outputs:
                self._kit.conversation.add(item)
        run.timeline.shown()
        self._kit.outbox.release(run.id)
        if run.status == "completed":
            self.current = None
            self._ended(run)
            run.timeline.end(run.id, "completed")

    def cancel(self, reason: CancelReason | None) -> bool:
        """Stop the current response; ``False`` when the client had none to stop.

        Synchronous on purpose: nothing of the response can be queued between the decision
        and the generation bump.
        """
        run, self.current = self.current, None
        if run is None:
            return False
        self._scope.cancel()
        if self._kit.outbox.holds(run.id):
            self.abandon(run, reason or "cancelled")
            return False
        self._stop(run)
        self._kit.playback.stopped()  # the client stops playing a cancelled answer
        if reason is not None:
            self._kit.metrics.cancelled(reason)
        for item in run.outputs:
            if isinstance(item, AssistantMessage | FunctionCall):
                item.keep_sent()
        self._end(run, "cancelled", RealtimeResponseStatus(type="cancelled", reason=reason))
        return True

    def abandon(self, run: ResponseRun, reason: DropReason) -> None:
        """Drop a held run the client never saw: nothing to tell it, but the log and
        ``s2s_held_answers_dropped`` say why (a response id the client reports is found)."""
        if self.current is run:
            self.current = None
        self._stop(run)
        self._kit.metrics.held_dropped(reason)
        run.timeline.end(run.id, "dropped", reason)
        logger.info("response %s dropped unseen: %s", run.id, reason)

    def _stop(self, run: ResponseRun) -> None:
        """Stop the run's work and drop its output (queued, held and to come)."""
        run.stop()
        self._kit.outbox.cancel(run.id)
        if run.task is not None and run.task.done():  # ended while held: nothing more can come
            self._kit.outbox.forget(run.id)

    async def _run(self, run: ResponseRun) -> None:
        try:
            messages = await self._prompt(run) if run.script is None else None
            ticket = self._scope.ticket(run.generation)
            events = ResponseEvents(self._kit.outbox, run)
            sink = answer_sink(run, events, self._kit, ticket, self._settings)
            calls = FunctionCalls(run, events, self._kit.outbox, lambda call: self._announce(run, call))
            try:
                outputs = _said(run.script) if messages is None else self._generated(run, messages, ticket, sink)
                async with contextlib.aclosing(outputs) as pieces:
                    async for piece in pieces:
                        if not isinstance(piece, str):
                            await sink.played()  # outputs go out one after another
                            await calls.add(piece)
                            continue
                        if not any(item is run.answer for item in run.outputs):
                            self._announce(run, run.answer)
                        await sink.add(piece)
                await sink.played()
            finally:
                sink.stop()
        except NothingToAnswer:  # a turn of no words: its held run is dropped unseen
            run.status = "cancelled"
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

    async def _prompt(self, run: ResponseRun) -> list[ChatMessage]:
        """The run's prompt, made to fit the LLM's context."""
        messages = await self._kit.conversation.fit(
            await run.prompt, self._settings.prompt_budget_tokens, self._kit.stages.fit
        )
        run.timeline.mark("prompt_ready")
        return messages

    def _generated(
        self, run: ResponseRun, messages: list[ChatMessage], ticket: ScopeTicket, sink: AnswerSink
    ) -> AsyncGenerator[str | FunctionCallStarted | FunctionCallArguments, None]:
        """The LLM's answer to ``messages``, in the sink's pieces."""
        options = run.options
        llm_stage = run.timeline.stage("llm_node")
        bound = self._settings.answer_tokens if options.max_output_tokens is None else None
        request = LLMRequest(
            messages, ticket, run.id, options.max_output_tokens, options.tools, llm_stage.carrier, bound
        )
        llm = self._kit.stages.generate(request)
        run.streams.add(llm)
        return _pieces(llm, sink, run, llm_stage.end)

    def _announce(self, run: ResponseRun, item: Item) -> None:
        """``item`` is the run's next output: the client (and the conversation) get it."""
        run.outputs.append(item)
        previous = None
        if run.options.in_conversation:
            if self._kit.outbox.holds(run.id):  # joins the conversation when shown
                previous = run.outputs[-2].id if len(run.outputs) > 1 else run.follows
            else:
                previous = self._kit.conversation.add(item)
        ResponseEvents(self._kit.outbox, run).output_added(item, previous)

    def _finish(self, run: ResponseRun) -> None:
        if self.current is run and not self._kit.outbox.holds(run.id):
            self.current = None
        run.status = "completed"
        if not run.outputs:  # an empty answer still has its item
            self._announce(run, run.answer)
        events = ResponseEvents(self._kit.outbox, run)
        for item in run.outputs:
            if item is run.answer:
                events.answer_done()
            elif isinstance(item, FunctionCall):
                finish_call(item, events)
            events.output_done(item)
        cut = RealtimeResponseStatus(type="incomplete", reason="max_output_tokens") if run.cut_at_cap else None
        self._end(run, "completed", cut)

    def _fail(self, run: ResponseRun, failure: StageFailure | None) -> None:
        run.status = "failed"
        if self._kit.outbox.holds(run.id):
            return  # a held run: its adoption sees it failed and answers afresh
        if self.current is run:
            self.current = None
        code, why = (failure.code, failure.message) if failure else ("response_failed", "the server failed")
        error = ProtocolError(code, f"response {run.id} could not be completed: {why}")
        ResponseEvents(self._kit.outbox, run).failed(error)
        status = RealtimeResponseStatus(type="failed", error={"type": "server_error", "code": error.code})
        self._end(run, "failed", status)

    def _end(self, run: ResponseRun, status: Status, details: RealtimeResponseStatus | None = None) -> None:
        run.status = status
        ResponseEvents(self._kit.outbox, run).done(details, on_sent=lambda: self._kit.playback.answer_over(run.id))
        if not self._kit.outbox.holds(run.id):  # else it ends when shown
            self._ended(run)
            run.timeline.end(run.id, status, details.reason if details is not None and status == "cancelled" else None)
        self._kit.metrics.response_ended(run.timeline.report(run.id, status))

    def _ended(self, run: ResponseRun) -> None:
        for callback in self._end_callbacks:
            callback(run)


async def _said(words: str | None) -> AsyncGenerator[str, None]:
    """A scripted answer (``ResponseRun.script``), a sentence a piece."""
    for sentence in sentences(words or ""):
        yield sentence


async def _pieces(
    outputs: StageStream[LLMOutput], sink: AnswerSink, run: ResponseRun, llm_done: Callable[[], None]
) -> AsyncGenerator[str | FunctionCallStarted | FunctionCallArguments, None]:
    """The LLM's outputs as the responder takes them: text in the sink's pieces, function
    calls as they are; an answer cut at its token cap is marked so, and its unfinished
    sentence is not spoken. Pulled by the responder: nothing queues between them, so a
    cancel leaves no producer behind; closed with ``aclosing``."""
    timeline = run.timeline
    async for output in outputs:
        timeline.mark("llm_first_delta")
        if isinstance(output, TokenCapReached):
            run.cut_at_cap = True
        elif not isinstance(output, str):
            yield output
        else:
            for piece in sink.cut(output):
                timeline.mark("first_piece")
                yield piece
    for piece in sink.flush(run.cut_at_cap):
        timeline.mark("first_piece")
        yield piece
    llm_done()
