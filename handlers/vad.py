"""Voice activity detection with silero-vad, split into a stateless detector and its state.

The detector (the ONNX network and silero's own segmenter) is loaded once per process.
Everything a session needs between calls is in a small picklable :class:`VADState` (~2 KB
of numpy and numbers: silero's recurrent state, its 64-sample context, the segmenter's
counters and < 32 ms of pending audio), so any process can serve any call and the audio
itself stays with the caller, in an ``UtteranceBuffer`` (``handlers.utterance``). One network call serves a
whole batch of sessions (:meth:`VoiceActivityDetector.detect_batch`): silero's network
takes a batch dimension, its rows independent. Settings use the OpenAI Realtime
``server_vad`` names.
"""

from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from typing import Protocol

import numpy as np
import torch
from pydantic import BaseModel, Field
from silero_vad import VADIterator, load_silero_vad

from handlers.audio import SPEECH_RATE

CHUNK_SAMPLES = 512
"""silero-vad's window at 16 kHz (32 ms)."""
CONTEXT_SAMPLES = 64
"""The tail of the previous window silero's network sees before each window at 16 kHz."""
_STATE_SHAPE = (2, 128)
"""silero's recurrent state per batch row."""


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
    """One session's detector state, built from its :class:`TurnDetection`; plain numbers
    and numpy only, so it pickles small when it travels to a VAD deployment and back."""

    turn_detection: InitVar[TurnDetection]
    threshold: float = field(init=False)
    min_silence_samples: int = field(init=False)
    min_speech_samples: int = field(init=False)
    model_state: np.ndarray = field(default_factory=lambda: np.zeros(_STATE_SHAPE, dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT_SAMPLES, dtype=np.float32))
    triggered: bool = False
    temp_end: int = 0
    samples_seen: int = 0
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    speech_start: int | None = None

    def __post_init__(self, turn_detection: TurnDetection) -> None:
        self.threshold = turn_detection.threshold
        self.min_silence_samples = ms_to_samples(turn_detection.silence_duration_ms)
        self.min_speech_samples = ms_to_samples(turn_detection.min_speech_duration_ms)

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


class SpeechNetwork(Protocol):
    """Speech probability of a batch of windows: ``windows`` is ``(batch, CONTEXT_SAMPLES +
    CHUNK_SAMPLES)``, ``state`` ``(2, batch, 128)``; returns ``(batch,)`` probabilities and
    the next state."""

    def __call__(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class SileroNetwork:
    """silero-vad's ONNX network, called on a batch (one thread: the caller batches)."""

    def __init__(self) -> None:
        self._session = load_silero_vad(onnx=True).session
        self._rate = np.array(SPEECH_RATE, dtype=np.int64)

    def __call__(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        probabilities, next_state = self._session.run(None, {"input": windows, "state": state, "sr": self._rate})
        return probabilities[:, 0], next_state


class _GivenProbability:
    """Stands in for the network inside silero's ``VADIterator``, so that its segmenter (the
    start/pause/stop rules) runs on probabilities the batch computed beforehand."""

    def __init__(self) -> None:
        self.probability = np.float32(0.0)
        """A numpy scalar: the segmenter asks it for ``.item()``, as it would a tensor."""

    def __call__(self, window: torch.Tensor, sampling_rate: int) -> np.float32:
        return self.probability

    def reset_states(self) -> None:
        """``VADIterator`` resets its model on construction; there is nothing to reset."""


_WINDOW = torch.zeros(CHUNK_SAMPLES)
"""What the segmenter is handed per window: it reads only the length."""


class VoiceActivityDetector:
    """A speech network plus silero's segmenter; :meth:`detect_batch` advances many
    sessions' :class:`VADState` with one network call per 32 ms window."""

    def __init__(self, network: SpeechNetwork | None = None) -> None:
        self._network = network or SileroNetwork()
        self._probability = _GivenProbability()
        # One segmenter, loaded with a session's counters for each run: built once, not per call.
        self._segmenter = VADIterator(self._probability, sampling_rate=SPEECH_RATE, speech_pad_ms=0)

    def detect(self, state: VADState, samples: np.ndarray) -> list[VADEvent]:
        """Feed 16 kHz float32 audio of any length; update ``state``; return boundaries."""
        return self.detect_batch([(state, samples)])[0]

    def detect_batch(self, calls: Sequence[tuple[VADState, np.ndarray]]) -> list[list[VADEvent]]:
        """:meth:`detect` for many sessions at once (each state at most once)."""
        audios = [
            np.concatenate([state.context, state.pending, samples.astype(np.float32, copy=False)])
            for state, samples in calls
        ]
        windows = [(len(audio) - CONTEXT_SAMPLES) // CHUNK_SAMPLES for audio in audios]
        probabilities = self._probabilities([state for state, _ in calls], audios, windows)
        events: list[list[VADEvent]] = []
        for (state, _), audio, count, session_probabilities in zip(calls, audios, windows, probabilities, strict=True):
            events.append(self._segment(state, session_probabilities))
            whole = CONTEXT_SAMPLES + count * CHUNK_SAMPLES
            state.context = audio[whole - CONTEXT_SAMPLES : whole].copy()
            state.pending = audio[whole:].copy()
        return events

    def _probabilities(self, states: list[VADState], audios: list[np.ndarray], windows: list[int]) -> list[np.ndarray]:
        """Every session's speech probability per window: one network call per window
        index, over the sessions that have that many windows."""
        recurrent = np.stack([state.model_state for state in states], axis=1)
        probabilities = [np.zeros(count, dtype=np.float32) for count in windows]
        for index in range(max(windows, default=0)):
            rows = [row for row, count in enumerate(windows) if count > index]
            start = index * CHUNK_SAMPLES
            batch = np.stack([audios[row][start : start + CONTEXT_SAMPLES + CHUNK_SAMPLES] for row in rows])
            batch_probabilities, recurrent[:, rows] = self._network(batch, np.ascontiguousarray(recurrent[:, rows]))
            for row, probability in zip(rows, batch_probabilities, strict=True):
                probabilities[row][index] = probability
        for row, state in enumerate(states):
            state.model_state = recurrent[:, row].copy()
        return probabilities

    def _segment(self, state: VADState, probabilities: np.ndarray) -> list[VADEvent]:
        """silero's segmenter over one session's window probabilities."""
        segmenter = self._segmenter
        segmenter.threshold, segmenter.min_silence_samples = state.threshold, state.min_silence_samples
        segmenter.triggered, segmenter.temp_end = state.triggered, state.temp_end
        segmenter.current_sample = state.samples_seen
        events: list[VADEvent] = []
        for probability in probabilities:
            was_paused = bool(segmenter.temp_end)
            self._probability.probability = probability
            boundary = segmenter(_WINDOW)
            state.samples_seen += CHUNK_SAMPLES
            if boundary and "start" in boundary and state.speech_start is None:
                state.speech_start = max(0, boundary["start"])
                events.append(SpeechStarted(state.speech_start))
            elif boundary and "end" in boundary and state.speech_start is not None:
                events.append(self._stop(state, boundary["end"]))
            elif state.speech_start is not None and was_paused != bool(segmenter.temp_end):
                events.append(SpeechPaused(_silero_end(segmenter)) if segmenter.temp_end else SpeechResumed())
        state.triggered, state.temp_end = segmenter.triggered, segmenter.temp_end
        return events

    def flush(self, state: VADState) -> list[VADEvent]:
        """End of input: close an utterance still in progress."""
        if state.speech_start is None:
            return []
        state.triggered = False
        state.temp_end = 0
        return [self._stop(state, state.samples_seen)]

    @staticmethod
    def _stop(state: VADState, end_sample: int) -> SpeechStopped:
        assert state.speech_start is not None
        start, state.speech_start = state.speech_start, None
        return SpeechStopped(start, end_sample, end_sample - start < state.min_speech_samples)


def _silero_end(segmenter: VADIterator) -> int:
    """Where silero will end the utterance if this pause lasts: ``VADIterator.__call__``
    ends it one window before the silence was first seen (speech padding is 0 here)."""
    return int(segmenter.temp_end + segmenter.speech_pad_samples - CHUNK_SAMPLES)
