"""The four model stages as the session calls them.

The session code sees only these small protocols; ``serve_stages.ServeStages`` implements
them with Serve deployment handles, and tests implement them with coroutines and async
generators they control, so the session logic runs without Ray or models.
:class:`BoundedStages` puts a time bound on every wait for a stage and turns each failure
into a :class:`StageFailure` that says, in our words, which stage failed. A stage known to
have no running replica (:class:`StageWatch`) fails a call at once, ``{stage}_unavailable``,
instead of after the time bound; so does a call that waits for its first output while the
watch finds its stage has none.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from deployments.messages import LLMRequest, TTSRequest
from deployments.realtime.failures import StageFailure, StageName
from deployments.telemetry import Carrier
from deployments.voice_activity import VADResult
from handlers.listening import Hearing
from handlers.llm import ChatMessage
from handlers.tools import LLMOutput

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


class StageCall(Protocol[T_co]):
    """One call to a stage: awaited once for its result; ``cancel`` stops it on the replica."""

    def __await__(self) -> Generator[Any, None, T_co]: ...

    def cancel(self) -> None: ...


class StageStream(Protocol[T_co]):
    """A streaming call: ``cancel`` stops the replica's generator (closing only the
    consumer would leave it running)."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    def cancel(self) -> None: ...


class StageWatch(Protocol):
    """Which stages have no running replica (``deployments.replica_watch`` on Serve)."""

    @property
    def suspect_after_s(self) -> float | None:
        """How long a call may wait for its first output before :meth:`slow` is asked, and
        asked again (``None``: never)."""
        ...

    def down(self, stage: StageName) -> bool: ...

    def failed(self, stage: StageName, exc: Exception) -> None:
        """A call to ``stage`` failed with ``exc`` (the watch tells a lost replica apart)."""
        ...

    def slow(self, stage: StageName) -> "asyncio.Future[bool]":
        """A call to ``stage`` is still waiting for its first output: whether the stage is down
        (a replica that dies while no call is in flight fails none: Serve queues the next)."""
        ...


class NoWatch:
    """Every stage taken for up: calls wait for their time bound."""

    suspect_after_s = None

    def down(self, stage: StageName) -> bool:
        return False

    def failed(self, stage: StageName, exc: Exception) -> None:
        return

    def slow(self, stage: StageName) -> "asyncio.Future[bool]":
        raise AssertionError("never asked: suspect_after_s is None")


NO_WATCH = NoWatch()


class Stages(Protocol):
    def listen(self, hearing: Hearing, audio: np.ndarray) -> Awaitable[VADResult]: ...

    def end_of_turn(self, utterance: np.ndarray) -> StageCall[float]:
        """The probability that ``utterance`` ends its speaker's turn (Smart Turn)."""
        ...

    def transcribe(self, audio: np.ndarray, over_answer: bool = False, trace: Carrier | None = None) -> StageCall[str]:
        """The words of ``audio``; ``over_answer=True``: speech heard over an answer, looked
        at to tell a real interruption from a hum (``handlers.stt.SpeechToText.transcribe``);
        ``trace``: the caller's span."""
        ...

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]: ...

    def message_ends(self, text: str) -> Awaitable[float]:
        """The probability that a user's message ``text`` is whole (the LLM's own reading)."""
        ...

    def fit(self, messages: list[ChatMessage]) -> Awaitable[int]:
        """How many of the oldest non-system messages must go for the prompt to fit the
        LLM's context with room for the answer (``LanguageModel.fit``)."""
        ...

    def generate(self, request: LLMRequest) -> StageStream[LLMOutput]: ...

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]: ...


@dataclass(frozen=True)
class BoundedStages:
    """``stages`` with every wait bounded by ``timeout_s`` (a call's result, a stream's next
    item) and every failure a :class:`StageFailure`: a stage that dies or hangs ends the
    response within seconds, with a message that is ours; one that ``watch`` knows to have no
    running replica ends it at once."""

    stages: Stages
    timeout_s: float
    watch: StageWatch = NO_WATCH

    def _bound(self, stage: StageName) -> "_Bound":
        return _Bound(stage, self.timeout_s, self.watch)

    def listen(self, hearing: Hearing, audio: np.ndarray) -> Awaitable[VADResult]:
        return self._bound("vad").result(self.stages.listen(hearing, audio))

    def end_of_turn(self, utterance: np.ndarray) -> StageCall[float]:
        return _BoundedCall(self.stages.end_of_turn(utterance), self._bound("turn_end"))

    def transcribe(self, audio: np.ndarray, over_answer: bool = False, trace: Carrier | None = None) -> StageCall[str]:
        return _BoundedCall(self.stages.transcribe(audio, over_answer, trace), self._bound("stt"))

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]:
        return self._bound("llm").result(self.stages.prefill(messages))

    def message_ends(self, text: str) -> Awaitable[float]:
        return self._bound("llm").result(self.stages.message_ends(text))

    def fit(self, messages: list[ChatMessage]) -> Awaitable[int]:
        return self._bound("llm").result(self.stages.fit(messages))

    def generate(self, request: LLMRequest) -> StageStream[LLMOutput]:
        return _BoundedStream(self.stages.generate(request), self._bound("llm"))

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]:
        return _BoundedStream(self.stages.synthesize(request), self._bound("tts"))


@dataclass(frozen=True)
class _Bound:
    """How one stage's waits end: in time, failed, timed out, or at once when it is down."""

    stage: StageName
    timeout_s: float
    watch: StageWatch

    def failure(self, exc: Exception) -> StageFailure:
        self.watch.failed(self.stage, exc)
        return StageFailure.failed(self.stage)

    async def result(self, call: Awaitable[T]) -> T:
        try:
            if self.watch.down(self.stage):
                raise StageFailure.unavailable(self.stage)
            return await self.within(call, first=True)
        except StageFailure:
            _withdraw(call)  # a hung or queued call must not go on holding or waiting for a replica
            raise
        except Exception as exc:
            raise self.failure(exc) from exc

    async def within(self, step: Awaitable[T], first: bool) -> T:
        """``step`` (a call's result, a stream's next item) within the time bound, else a
        :class:`StageFailure`; a ``first`` output is also given up at once when the watch
        finds the stage down while it waits. Other errors pass."""
        suspicion = None
        try:
            async with asyncio.timeout(self.timeout_s) as timeout:
                suspicion = _Suspicion(self.stage, self.watch, timeout) if first else None
                try:
                    return await step
                finally:
                    if suspicion is not None:
                        suspicion.stop()
        except TimeoutError:
            if suspicion is not None and suspicion.found_down:
                raise StageFailure.unavailable(self.stage) from None
            raise StageFailure.timed_out(self.stage, self.timeout_s) from None


class _Suspicion:
    """While a call waits for its first output: every ``watch.suspect_after_s``, ask the
    watch whether the stage is down, and if so end the wait at once (expire ``timeout``).
    Only a slow call asks: a prompt one costs a timer, no remote call."""

    def __init__(self, stage: StageName, watch: StageWatch, timeout: asyncio.Timeout) -> None:
        self._stage, self._watch, self._timeout = stage, watch, timeout
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self.found_down = False
        self._arm()

    def _arm(self) -> None:
        if (after_s := self._watch.suspect_after_s) is not None:
            self._timer = self._loop.call_later(after_s, self._ask)

    def _ask(self) -> None:
        self._watch.slow(self._stage).add_done_callback(self._answered)

    def _answered(self, verdict: "asyncio.Future[bool]") -> None:
        if self._stopped or self._timeout.expired():  # the wait ended or is ending meanwhile
            return
        if verdict.result():
            self.found_down = True
            self._timeout.reschedule(self._loop.time())
        else:
            self._arm()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()


def _withdraw(call: Awaitable[Any]) -> None:
    """A call given up on: stopped where it waits (a Serve call is cancelled, a coroutine
    not yet awaited closed)."""
    if isinstance(call, Coroutine):
        call.close()
    elif callable(cancel := getattr(call, "cancel", None)):
        cancel()


class _BoundedCall(StageCall[T_co]):
    def __init__(self, call: StageCall[T_co], bound: _Bound) -> None:
        self._call, self._bound = call, bound

    def __await__(self) -> Generator[Any, None, T_co]:
        return self._bound.result(self._call).__await__()

    def cancel(self) -> None:
        self._call.cancel()


class _BoundedStream(StageStream[T_co]):
    def __init__(self, stream: StageStream[T_co], bound: _Bound) -> None:
        self._stream, self._bound = stream, bound

    def __aiter__(self) -> AsyncIterator[T_co]:
        return self._items()

    async def _items(self) -> AsyncIterator[T_co]:
        bound = self._bound
        if bound.watch.down(bound.stage):
            self._stream.cancel()
            raise StageFailure.unavailable(bound.stage)
        items = aiter(self._stream)
        first = True
        while True:
            try:
                item = await bound.within(anext(items), first)
            except StopAsyncIteration:
                return
            except StageFailure:
                self._stream.cancel()  # a hung or queued stream must not go on holding or waiting for a replica
                raise
            except Exception as exc:
                raise bound.failure(exc) from exc
            first = False
            yield item

    def cancel(self) -> None:
        self._stream.cancel()
