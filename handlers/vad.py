"""Voice activity detection with silero-vad, split into a stateless detector and its state.

The detector (the ONNX model) is loaded once per process. Everything a session needs
between calls is in a small picklable :class:`VADState` (~2 KB: silero's recurrent state,
its 64-sample context, the segmenter's counters and < 32 ms of pending audio), so any
replica can serve any call and the audio itself stays with the caller, in an
:class:`UtteranceBuffer`. Settings use the OpenAI Realtime ``server_vad`` names.
"""

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from pydantic import BaseModel, Field
from silero_vad import VADIterator, load_silero_vad

from handlers.audio import SPEECH_RATE

CHUNK_SAMPLES = 512
"""silero-vad's window at 16 kHz (32 ms)."""


def ms_to_samples(ms: int) -> int:
    return ms * SPEECH_RATE // 1000


def samples_to_ms(samples: int) -> int:
    return samples * 1000 // SPEECH_RATE


class TurnDetection(BaseModel):
    """Turn-detection settings, named as the Realtime protocol's ``server_vad`` names them."""

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=5_000)
    silence_duration_ms: int = Field(500, ge=0, le=10_000)
    min_speech_duration_ms: int = Field(250, ge=0, le=10_000)
    """Shorter utterances (coughs, clicks) end flagged ``too_short`` so nothing transcribes them."""


@dataclass
class VADState:
    """One session's detector state; travels with each call to whichever replica serves it."""

    turn_detection: TurnDetection
    model_state: np.ndarray = field(default_factory=lambda: np.zeros((2, 1, 128), dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    triggered: bool = False
    temp_end: int = 0
    samples_seen: int = 0
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    speech_start: int | None = None

    @property
    def in_speech(self) -> bool:
        return self.speech_start is not None


@dataclass(frozen=True)
class SpeechStarted:
    start_sample: int

    @property
    def audio_start_ms(self) -> int:
        return samples_to_ms(self.start_sample)


@dataclass(frozen=True)
class SpeechStopped:
    start_sample: int
    end_sample: int
    too_short: bool

    @property
    def audio_end_ms(self) -> int:
        return samples_to_ms(self.end_sample)


@dataclass(frozen=True)
class SpeechPaused:
    """Silence began: the utterance so far ends at ``sample``, exactly where the
    :class:`SpeechStopped` it becomes (unless speech resumes within ``silence_duration_ms``)
    will end it. Lets the caller start work speculatively on the same audio."""

    sample: int


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back before the pause became a stop: speculative work is void."""


VADEvent = SpeechStarted | SpeechPaused | SpeechResumed | SpeechStopped


class VoiceActivityDetector:
    """The shared silero model; :meth:`detect` advances a session's :class:`VADState`."""

    def __init__(self) -> None:
        self._model = load_silero_vad(onnx=True)

    def detect(self, state: VADState, samples: np.ndarray) -> list[VADEvent]:
        """Feed 16 kHz float32 audio of any length; update ``state``; return boundaries."""
        iterator = self._restore(state)
        audio = np.concatenate([state.pending, samples.astype(np.float32, copy=False)])
        whole = len(audio) // CHUNK_SAMPLES * CHUNK_SAMPLES
        events: list[VADEvent] = []
        for offset in range(0, whole, CHUNK_SAMPLES):
            was_paused = bool(iterator.temp_end)
            boundary = iterator(torch.from_numpy(audio[offset : offset + CHUNK_SAMPLES]))
            state.samples_seen += CHUNK_SAMPLES
            if boundary and "start" in boundary and state.speech_start is None:
                state.speech_start = max(0, boundary["start"])
                events.append(SpeechStarted(state.speech_start))
            elif boundary and "end" in boundary and state.speech_start is not None:
                events.append(self._stop(state, boundary["end"]))
            elif state.speech_start is not None and was_paused != bool(iterator.temp_end):
                events.append(SpeechPaused(_silero_end(iterator)) if iterator.temp_end else SpeechResumed())
        state.pending = audio[whole:].copy()
        self._save(state, iterator)
        return events

    def flush(self, state: VADState) -> list[VADEvent]:
        """End of input: close an utterance still in progress."""
        if state.speech_start is None:
            return []
        state.triggered = False
        state.temp_end = 0
        return [self._stop(state, state.samples_seen)]

    def _stop(self, state: VADState, end_sample: int) -> SpeechStopped:
        assert state.speech_start is not None
        start, state.speech_start = state.speech_start, None
        too_short = end_sample - start < ms_to_samples(state.turn_detection.min_speech_duration_ms)
        return SpeechStopped(start, end_sample, too_short)

    def _restore(self, state: VADState) -> VADIterator:
        turn = state.turn_detection
        iterator = VADIterator(
            copy.copy(self._model),  # shares the ONNX session, not the recurrent state
            threshold=turn.threshold,
            sampling_rate=SPEECH_RATE,
            min_silence_duration_ms=turn.silence_duration_ms,
            speech_pad_ms=0,
        )  # its constructor resets the model copy; the session's state goes in after
        model = iterator.model
        model._state = torch.from_numpy(state.model_state)
        model._context = torch.from_numpy(state.context)
        if state.samples_seen:
            model._last_sr, model._last_batch_size = SPEECH_RATE, 1
        iterator.triggered, iterator.temp_end = state.triggered, state.temp_end
        iterator.current_sample = state.samples_seen
        return iterator

    @staticmethod
    def _save(state: VADState, iterator: VADIterator) -> None:
        state.model_state = iterator.model._state.numpy()
        state.context = iterator.model._context.numpy()
        state.triggered, state.temp_end = iterator.triggered, iterator.temp_end


def _silero_end(iterator: VADIterator) -> int:
    """Where silero will end the utterance if this pause lasts: ``VADIterator.__call__``
    ends it one window before the silence was first seen (speech padding is 0 here)."""
    return int(iterator.temp_end + iterator.speech_pad_samples - CHUNK_SAMPLES)


class UtteranceBuffer:
    """The session's input audio at 16 kHz, addressed by absolute sample index.

    Outside speech only the last ``prefix_padding_ms`` plus ``lookback_ms`` are kept (a
    detector answering later than the audio arrived may place a start that far back);
    during speech everything since the prefix, up to ``max_seconds`` (bounded memory).
    """

    def __init__(self, prefix_padding_ms: int = 300, max_seconds: float = 60.0, lookback_ms: int = 1_000) -> None:
        self.prefix_samples = ms_to_samples(prefix_padding_ms)
        self.lookback_samples = ms_to_samples(lookback_ms)
        self.max_samples = int(max_seconds * SPEECH_RATE)
        self._audio = np.zeros(0, dtype=np.float32)
        self._origin = 0
        self._keep_from: int | None = None

    @property
    def end_sample(self) -> int:
        return self._origin + len(self._audio)

    def append(self, samples: np.ndarray) -> None:
        self._audio = np.concatenate([self._audio, samples.astype(np.float32, copy=False)])
        idle_keep = self.end_sample - self.prefix_samples - self.lookback_samples
        keep_from = self._keep_from if self._keep_from is not None else idle_keep
        keep_from = max(keep_from, self.end_sample - self.max_samples)
        self._trim(keep_from)

    def mark_start(self, start_sample: int) -> None:
        """Speech began at ``start_sample``: keep audio from its prefix onwards."""
        self._keep_from = max(self._origin, start_sample - self.prefix_samples)

    def keep_all(self) -> None:
        """Keep everything from now on (manual commits: no detector marks the start)."""
        self._keep_from = self.end_sample

    def peek(self, end_sample: int | None = None) -> np.ndarray:
        """The utterance (prefix included) up to ``end_sample`` (default: all)."""
        start = self._keep_from if self._keep_from is not None else self._origin
        end = self.end_sample if end_sample is None else min(end_sample, self.end_sample)
        return self._audio[max(0, start - self._origin) : max(0, end - self._origin)].copy()

    def take(self, end_sample: int | None = None) -> np.ndarray:
        """:meth:`peek`, then forget that audio."""
        utterance = self.peek(end_sample)
        self._keep_from = None
        self._trim(self.end_sample if end_sample is None else min(end_sample, self.end_sample))
        return utterance

    def _trim(self, keep_from: int) -> None:
        drop = min(max(0, keep_from - self._origin), len(self._audio))
        if drop:
            self._audio = self._audio[drop:]
            self._origin += drop


class VADSession:
    """Detector, state and audio together: the one-process form used by tests and demos."""

    def __init__(self, detector: VoiceActivityDetector, turn_detection: TurnDetection | None = None) -> None:
        self.detector = detector
        self.state = VADState(turn_detection or TurnDetection())
        self.buffer = UtteranceBuffer(self.state.turn_detection.prefix_padding_ms)

    def feed(self, samples: np.ndarray) -> list[tuple[VADEvent, np.ndarray | None]]:
        """Return each boundary with the utterance audio for a usable :class:`SpeechStopped`."""
        self.buffer.append(samples)
        return [self._attach(e) for e in self.detector.detect(self.state, samples)]

    def flush(self) -> list[tuple[VADEvent, np.ndarray | None]]:
        return [self._attach(e) for e in self.detector.flush(self.state)]

    def _attach(self, event: VADEvent) -> tuple[VADEvent, np.ndarray | None]:
        if isinstance(event, SpeechStarted):
            self.buffer.mark_start(event.start_sample)
        if not isinstance(event, SpeechStopped):
            return event, None
        utterance = self.buffer.take(event.end_sample)
        return event, None if event.too_short else utterance
