"""The four model stages as the session calls them.

The session code sees only these small protocols; ``serve_stages.ServeStages`` implements
them with Serve deployment handles, and tests implement them with coroutines and async
generators they control, so the session logic runs without Ray or models.
:class:`BoundedStages` puts a time bound on every wait for a stage and turns each failure
into a :class:`StageFailure` that says, in our words, which stage failed. A stage known to
have no running replica (:class:`StageWatch`) fails a call at once, ``{stage}_unavailable``,
instead of after the time bound.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from deployments.messages import LLMRequest, TTSRequest
from deployments.realtime.failures import StageFailure, StageName
from deployments.telemetry import Carrier
from handlers.llm import ChatMessage
from handlers.tools import LLMOutput
from handlers.vad import VADEvent, VADState

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

    def down(self, stage: StageName) -> bool: ...

    def failed(self, stage: StageName, exc: Exception) -> None:
        """A call to ``stage`` failed with ``exc`` (the watch tells a lost replica apart)."""
        ...


class NoWatch:
    """Every stage taken for up: calls wait for their time bound."""

    def down(self, stage: StageName) -> bool:
        return False

    def failed(self, stage: StageName, exc: Exception) -> None:
        return


NO_WATCH = NoWatch()


class Stages(Protocol):
    def detect(self, state: VADState, audio: np.ndarray) -> Awaitable[tuple[VADState, list[VADEvent]]]: ...

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

    def detect(self, state: VADState, audio: np.ndarray) -> Awaitable[tuple[VADState, list[VADEvent]]]:
        return self._bound("vad").result(self.stages.detect(state, audio))

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
        if self.watch.down(self.stage):
            _withdraw(call)
            raise StageFailure.unavailable(self.stage)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await call
        except TimeoutError:
            raise StageFailure.timed_out(self.stage, self.timeout_s) from None
        except Exception as exc:
            raise self.failure(exc) from exc


def _withdraw(call: Awaitable[Any]) -> None:
    """A call given up on before it was awaited: stopped where it waits (a Serve call is
    cancelled, a coroutine closed)."""
    if isinstance(call, Coroutine):
        call.close()
    elif callable(cancel := getattr(call, "cancel", None)):
        cancel()


class _BoundedCall(StageCall[T_co]):
    def __init__(self, call: StageCall[T_co], bound: _Bound) -> None:
        self._call, self._bound = call, bound

    def __await__(self) -> Generator[Any, None, T_co]:
        return self._result().__await__()

    async def _result(self) -> T_co:
        try:
            return await self._bound.result(self._call)
        except StageFailure:
            self._call.cancel()  # a hung call must not go on holding its replica
            raise

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
        while True:
            try:
                async with asyncio.timeout(bound.timeout_s):
                    item = await anext(items)
            except StopAsyncIteration:
                return
            except TimeoutError:
                self._stream.cancel()
                raise StageFailure.timed_out(bound.stage, bound.timeout_s) from None
            except Exception as exc:
                raise bound.failure(exc) from exc
            yield item

    def cancel(self) -> None:
        self._stream.cancel()
