"""The LLM's outputs read ahead of the answer's sink, so what is ready goes out merged.

The LLM writes faster than a listener hears. A spoken answer therefore waits before each
piece until the client's playback runs low (``AnswerSink.ready``), and meanwhile the model's
text is read on: every piece completed by then goes to the TTS in one call. Sentences that
a barge-in makes moot are never synthesised, and a long answer costs a Serve call or two,
not one per sentence.

Order is kept: text and function calls come out as the LLM gave them, and an LLM failure
comes out after everything the LLM gave before it. The reading task belongs to the
response: leaving the ``async with`` (done, failed or cancelled) cancels it, so no reader
outlives its response.
"""

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from deployments.realtime.answer_sinks import AnswerSink
from deployments.realtime.stages import StageStream
from deployments.realtime.timeline import Timeline
from handlers.tools import FunctionCallArguments, FunctionCallStarted, LLMOutput

CallPart = FunctionCallStarted | FunctionCallArguments


class ReadAhead:
    def __init__(self, outputs: StageStream[LLMOutput], sink: AnswerSink, timeline: Timeline) -> None:
        self._outputs, self._sink, self._timeline = outputs, sink, timeline
        self._items: deque[LLMOutput] = deque()
        self._changed = asyncio.Event()
        self._ended = False
        self._error: BaseException | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "ReadAhead":
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def take(self, ready: Callable[[], Awaitable[None]]) -> list[str] | CallPart | None:
        """The next output: a function call, or every text piece queued once ``ready``
        returns (the sink's own wait), in order; ``None`` at the end. Raises the LLM's
        failure once the outputs before it are taken."""
        while not self._items and not self._ended:
            self._changed.clear()
            await self._changed.wait()
        if not self._items:
            if self._error is not None:
                raise self._error
            return None
        head = self._items[0]
        if not isinstance(head, str):
            self._items.popleft()
            return head
        await ready()
        pieces: list[str] = []
        while self._items and isinstance(piece := self._items[0], str):
            pieces.append(piece)
            self._items.popleft()
        return pieces

    async def _read(self) -> None:
        try:
            async for output in self._outputs:
                self._timeline.mark("llm_first_delta")
                if isinstance(output, str):
                    self._queue(*self._sink.cut(output))
                else:
                    self._queue(output)
            self._queue(*self._sink.flush())
        except Exception as exc:  # taken after the outputs before it
            self._error = exc
        finally:
            self._ended = True
            self._changed.set()

    def _queue(self, *outputs: LLMOutput) -> None:
        for output in outputs:
            if isinstance(output, str):
                self._timeline.mark("first_piece")
            self._items.append(output)
        if outputs:
            self._changed.set()
