"""The stages as Serve deployment handles: the one module of the session that calls Serve.

VAD is the ingress replica's batcher (``deployments.voice_activity``), which runs the
detector in the ingress or sends one batched call per tick to the VAD deployment.
"""

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.serve.handle import DeploymentHandle

from deployments.messages import LLMRequest, TTSRequest
from deployments.realtime.spoken_lines import SpokenLines
from deployments.realtime.stages import StageCall, StageStream
from deployments.telemetry import Carrier
from deployments.voice_activity import VADBatcher, VADResult
from handlers.listening import Hearing
from handlers.llm import ChatMessage
from handlers.synthetic import EveryPauseEnds
from handlers.tools import LLMOutput


@dataclass(frozen=True)
class ServeStages:
    """The stages as the model deployments' handles, and VAD as the ingress replica's
    batcher (which runs the detector in the ingress or on the VAD deployment)."""

    vad: VADBatcher
    turn_end: DeploymentHandle[Any] | None
    """``None``: the synthetic engines' stand-in (:class:`EveryPauseEnds`), in the ingress."""
    stt: DeploymentHandle[Any]
    llm: DeploymentHandle[Any]
    tts: DeploymentHandle[Any]
    lines: SpokenLines = field(default_factory=SpokenLines)
    """The server's own lines, whose audio the replica keeps (a call's greeting)."""

    def listen(self, hearing: Hearing, audio: np.ndarray) -> Awaitable[VADResult]:
        return self.vad.listen(hearing, audio)

    def end_of_turn(self, utterance: np.ndarray) -> StageCall[float]:
        if self.turn_end is None:
            return EveryPauseEnds()
        return self.turn_end.probability_complete.remote(utterance)

    def transcribe(self, audio: np.ndarray, over_answer: bool = False, trace: Carrier | None = None) -> StageCall[str]:
        return self.stt.transcribe.remote(audio, over_answer, trace)

    def prefill(self, messages: list[ChatMessage]) -> Awaitable[None]:
        return self.llm.prefill.remote(messages)

    def message_ends(self, text: str) -> Awaitable[float]:
        return self.llm.message_ends.remote(text)

    def fit(self, messages: list[ChatMessage]) -> Awaitable[int]:
        return self.llm.fit.remote(messages)

    def generate(self, request: LLMRequest) -> StageStream[LLMOutput]:
        return self.llm.options(stream=True).stream.remote(request)  # type: ignore[return-value]

    def synthesize(self, request: TTSRequest) -> StageStream[bytes]:
        if (kept := self.lines.kept(request.text)) is not None:
            return kept
        return self.tts.options(stream=True).synthesize.remote(request)  # type: ignore[return-value]
