"""Thin Serve deployments around the handlers: the four models and the end-of-turn model.

Each holds one model (or, given a ``SyntheticConfig``, its synthetic stand-in from
``handlers.synthetic``, for load-testing the serving layer) and nothing per session: VAD
state travels with each call (when VAD runs here, not in the ingress), and the LLM and TTS
replicas watch the session's cancel scope through this process's :class:`cancel.ScopeCache`
only for the life of a request.
CPU-bound model calls run in a thread so the replica's event loop (which also carries the
scope cache's long-polls) stays responsive.
"""

import asyncio
from collections.abc import AsyncIterator

import numpy as np
from ray import serve

from cancel import ScopeCache
from deployments import telemetry
from deployments.coalesce import coalesced
from deployments.messages import LLMRequest, StoppedAsStale, TTSRequest
from deployments.placement import replica_placement
from deployments.voice_activity import VADCall, VADResult, in_process, listener_for
from handlers.audio import SPEECH_RATE
from handlers.denoise import NoiseReductionConfig
from handlers.llm import ChatEngine, ChatMessage, LanguageModel, LLMConfig
from handlers.stt import SpeechToText, STTConfig
from handlers.synthetic import ScriptedLanguageModel, SyntheticConfig, ToneSpeaker, ToneTranscriber
from handlers.tools import LLMOutput
from handlers.tts import TextToSpeech, TTSConfig
from handlers.turn_end import SmartTurn, TurnEndConfig


@serve.deployment
class VAD:
    """``vad.placement: deployment``: each call carries a tick's asks of every session of
    one ingress replica (``deployments.voice_activity``)."""

    placement = replica_placement

    def __init__(self, synthetic: SyntheticConfig | None, noise_reduction: NoiseReductionConfig) -> None:
        self._run = in_process(listener_for(synthetic, noise_reduction))

    async def detect_batch(self, calls: list[VADCall]) -> list[VADResult]:
        return await self._run(calls)

    def ready(self) -> bool:
        """Answering at all means the model is loaded (it loads in ``__init__``)."""
        return True


@serve.deployment
class TurnEnd:
    """Smart Turn for ``semantic_vad`` sessions: one utterance's verdict per call."""

    placement = replica_placement

    def __init__(self, config: TurnEndConfig) -> None:
        self._model = SmartTurn(config)
        self._model.probability_complete(np.zeros(SPEECH_RATE, dtype=np.float32))  # the first run pays the setup

    def probability_complete(self, utterance: np.ndarray) -> float:
        return self._model.probability_complete(utterance)

    def ready(self) -> bool:
        return True


@serve.deployment
class STT:
    placement = replica_placement

    def __init__(self, config: STTConfig, synthetic: SyntheticConfig | None = None) -> None:
        telemetry.configure("s2s-stt")
        self._stt: SpeechToText | ToneTranscriber = SpeechToText(config) if synthetic is None else ToneTranscriber()
        self._stt.transcribe(np.zeros(SPEECH_RATE, dtype=np.float32))  # first call pays ~1 s of setup

    def transcribe(self, audio: np.ndarray, over_answer: bool = False, trace: telemetry.Carrier | None = None) -> str:
        with telemetry.remote_span("stt.transcribe", trace) as span:
            span.set_attribute("s2s.audio_s", len(audio) / SPEECH_RATE)
            return self._stt.transcribe(audio, over_answer)

    def ready(self) -> bool:
        return True


@serve.deployment
class LLM:
    placement = replica_placement

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self, config: LLMConfig, synthetic: SyntheticConfig | None = None, delta_interval_s: float = 0.0
    ) -> None:
        """The engine is warmed up before the replica is ready: its first user's turn must not
        pay the engine's first-request setup."""
        telemetry.configure("s2s-llm")
        self._model: ChatEngine = (
            LanguageModel.create(config) if synthetic is None else ScriptedLanguageModel(synthetic)
        )
        if isinstance(self._model, LanguageModel):
            await self._model.warm_up()
        self._delta_interval_s = delta_interval_s

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMOutput]:
        """Token deltas until done, stale or cancelled (``response.cancel()`` lands here as
        ``CancelledError``; the handler then aborts the engine request). A stream stopped as
        stale ends with ``StoppedAsStale``, so that an early end is never taken for the end.
        Deltas within ``delta_interval_s`` of the last item sent travel as one item."""
        with (
            ScopeCache.for_current_loop().watch(request.ticket) as view,
            telemetry.remote_span("llm.generate", request.trace, (StoppedAsStale,)) as span,
        ):
            stream = self._model.stream(
                request.messages,
                view.is_stale,
                request.request_id,
                request.max_tokens,
                request.tools,
                request.answer_tokens,
            )
            deltas = 0
            async for delta in coalesced(stream, self._delta_interval_s):
                if deltas == 0:
                    span.add_event("first_delta")
                deltas += 1
                yield delta
            span.set_attribute("s2s.llm.deltas", deltas)
            if view.is_stale():
                raise StoppedAsStale(f"LLM request {request.request_id} stopped: its response was superseded")

    async def prefill(self, messages: list[ChatMessage]) -> None:
        await self._model.prefill(messages)

    async def message_ends(self, text: str) -> float:
        return await self._model.message_ends(text)

    def fit(self, messages: list[ChatMessage]) -> int:
        return self._model.fit(messages)

    def unfinished_requests(self) -> int:
        return self._model.unfinished_requests()

    async def check_health(self) -> None:
        await self._model.check_health()

    async def ready(self) -> bool:
        await self._model.check_health()
        return True

    def __del__(self) -> None:
        model = getattr(self, "_model", None)  # absent when __init__ failed
        if model is not None:
            model.shutdown()


@serve.deployment
class TTS:
    placement = replica_placement

    def __init__(self, config: TTSConfig, synthetic: SyntheticConfig | None = None) -> None:
        telemetry.configure("s2s-tts")
        self._tts: TextToSpeech | ToneSpeaker = (
            TextToSpeech(config) if synthetic is None else ToneSpeaker(synthetic, config.output_rate)
        )
        for _ in self._tts.synthesize("Ready."):  # first call pays phonemizer and ONNX setup
            pass

    def ready(self) -> bool:
        return True

    async def synthesize(self, request: TTSRequest) -> AsyncIterator[bytes]:
        """PCM16 at the configured rate, one chunk per sentence; stops between sentences once
        the response is stale, with ``StoppedAsStale``."""
        with (
            ScopeCache.for_current_loop().watch(request.ticket) as view,
            telemetry.remote_span("tts.synthesize", request.trace, (StoppedAsStale,)) as span,
        ):
            span.set_attribute("s2s.tts.characters", len(request.text))
            chunks = self._tts.synthesize(request.text, view.is_stale)
            while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
                yield chunk.pcm16
            if view.is_stale():
                raise StoppedAsStale("TTS request stopped: its response was superseded")
