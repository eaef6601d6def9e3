"""The four model stages as the session calls them.

The session code sees only these small protocols; ``serve_stages.ServeStages`` implements
them with Serve deployment handles, and tests implement them with coroutines and async
generators they control, so the session logic runs without Ray or models.
:class:`BoundedStages` puts a time bound on every wait for a stage and turns each failure
into a :class:`StageFailure` that says, in our words, which stage failed.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from deployments.messages import LLMRequest, TTSRequest
from deployments.realtime.failures import StageFailure, StageName
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


class Stages(Protocol):
    def detect(self, state: VADState, audio: np.ndarray) -> Awaitable[tuple[VADState, list[VADEvent]]]: ...

    def end_of_turn(self, utterance: np.ndarray) -> StageCall[float]:
        """The probability that ``utterance`` ends its speaker's turn (Smart Turn)."""
        ...

    def transcribe(self, audio: np.ndarray, over_answer: bool = False) -> StageCall[str]:
        """The words of ``audio``; ``over_answer=True``: speech heard over an answer, looked
        at to tell a real interruption from a hum (``handlers.stt.SpeechToText.transcribe``)."""
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
    response within seconds, with a message that is ours."""

    stages: Stages
    timeout_s: float

    def detect(self, state: VADState, audio: np.ndarray) -> Awaitable[tuple[VADState, list[VADEvent]]]:
        return _bounded(self.stages.detect(state, audio), "vad", self.timeout_s)

    def end_of_turn(self, utterance: np.ndarray) -> StageCall[float]:
        return _BoundedCall(self.stages.end_of_turn(utterance), "turn_end", self.timeout_s)

    def transcribe(self, audio: np.ndarray, over_answer: bool = False) -> StageCall[str]:
        return _BoundedCall(self.stages.transcribe(audio, over_answer), "stt", self.timeout_s)

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]:
        return _bounded(self.stages.prefill(messages), "llm", self.timeout_s)

    def message_ends(self, text: str) -> Awaitable[float]:
        return _bounded(self.stages.message_ends(text), "llm", self.timeout_s)

    def fit(self, messages: list[ChatMessage]) -> Awaitable[int]:
        return _bounded(self.stages.fit(messages), "llm", self.timeout_s)

    def generate(self, request: LLMRequest) -> StageStream[LLMOutput]:
        return _BoundedStream(self.stages.generate(request), "llm", self.timeout_s)

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]:
        return _BoundedStream(self.stages.synthesize(request), "tts", self.timeout_s)


async def _bounded(call: Awaitable[T], stage: StageName, timeout_s: float) -> T:
    try:
        async with asyncio.timeout(timeout_s):
            return await call
    except TimeoutError:
        raise StageFailure.timed_out(stage, timeout_s) from None
    except Exception as exc:
        raise StageFailure.failed(stage) from exc


class _BoundedCall(StageCall[T_co]):
    def __init__(self, call: StageCall[T_co], stage: StageName, timeout_s: float) -> None:
        self._call, self._stage, self._timeout_s = call, stage, timeout_s

    def __await__(self) -> Generator[Any, None, T_co]:
        return self._result().__await__()

    async def _result(self) -> T_co:
        try:
            return await _bounded(self._call, self._stage, self._timeout_s)
        except StageFailure:
            self._call.cancel()  # a hung call must not go on holding its replica
            raise

    def cancel(self) -> None:
        self._call.cancel()


class _BoundedStream(StageStream[T_co]):
    def __init__(self, stream: StageStream[T_co], stage: StageName, timeout_s: float) -> None:
        self._stream, self._stage, self._timeout_s = stream, stage, timeout_s

    def __aiter__(self) -> AsyncIterator[T_co]:
        return self._items()

    async def _items(self) -> AsyncIterator[T_co]:
        items = aiter(self._stream)
        while True:
            try:
                async with asyncio.timeout(self._timeout_s):
                    item = await anext(items)
            except StopAsyncIteration:
                return
            except TimeoutError:
                self._stream.cancel()
                raise StageFailure.timed_out(self._stage, self._timeout_s) from None
            except Exception as exc:
                raise StageFailure.failed(self._stage) from exc
            yield item

    def cancel(self) -> None:
        self._stream.cancel()
