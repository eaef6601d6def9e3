"""The four model stages as the session calls them.

The session code sees only these small protocols; :class:`ServeStages` implements them
with Serve deployment handles, and tests implement them with coroutines and async
generators they control, so the session logic runs without Ray or models.
"""

from collections.abc import AsyncIterator, Awaitable, Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
from ray.serve.handle import DeploymentHandle

from deployments.messages import LLMRequest, TTSRequest
from handlers.llm import ChatMessage
from handlers.vad import VADEvent, VADState

T_co = TypeVar("T_co", covariant=True)


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

    def transcribe(self, audio: np.ndarray) -> StageCall[str]: ...

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]: ...

    def generate(self, request: LLMRequest) -> StageStream[str]: ...

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]: ...


@dataclass(frozen=True)
class ServeStages:
    """The stages as the four model deployments' handles."""

    vad: DeploymentHandle
    stt: DeploymentHandle
    llm: DeploymentHandle
    tts: DeploymentHandle

    def detect(self, state: VADState, audio: np.ndarray) -> Awaitable[tuple[VADState, list[VADEvent]]]:
        return self.vad.detect.remote(state, audio)  # type: ignore[no-any-return]

    def transcribe(self, audio: np.ndarray) -> StageCall[str]:
        return self.stt.transcribe.remote(audio)  # type: ignore[no-any-return]

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]:
        return self.llm.prefill.remote(messages)  # type: ignore[no-any-return]

    def generate(self, request: LLMRequest) -> StageStream[str]:
        return self.llm.options(stream=True).stream.remote(request)  # type: ignore[return-value]

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]:
        return self.tts.options(stream=True).synthesize.remote(request)  # type: ignore[return-value]
