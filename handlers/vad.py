"""Voice activity detection with silero-vad, one small state per session.

The ONNX model is loaded once per process and shared; each session gets a shallow copy
of silero's wrapper with its own recurrent state, so sessions never bleed into each other
and opening one costs no model load. Settings use the OpenAI Realtime ``server_vad`` names.
"""

import copy
from collections import deque
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field
from silero_vad import VADIterator, load_silero_vad

from handlers.audio import SPEECH_RATE

CHUNK_SAMPLES = 512
"""silero-vad's window at 16 kHz (32 ms)."""


class TurnDetection(BaseModel):
    """Turn-detection settings, named as the Realtime protocol's ``server_vad`` names them."""

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=5_000)
    silence_duration_ms: int = Field(500, ge=0, le=10_000)
    min_speech_duration_ms: int = Field(250, ge=0, le=10_000)
    """Shorter utterances (coughs, clicks) end without audio so nothing transcribes them."""


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    audio_end_ms: int
    utterance: np.ndarray | None
    """16 kHz float32 speech including prefix padding; ``None`` when too short."""


VADEvent = SpeechStarted | SpeechStopped


class VoiceActivityDetector:
    """Holds the shared silero model and opens per-session detectors."""

    def __init__(self) -> None:
        self._model = load_silero_vad(onnx=True)

    def session(self, turn_detection: TurnDetection | None = None) -> "VADSession":
        model = copy.copy(self._model)
        model.reset_states()
        return VADSession(model, turn_detection or TurnDetection())


class VADSession:
    """Segments one session's 16 kHz audio stream into utterances."""

    def __init__(self, model: object, turn_detection: TurnDetection) -> None:
        self.turn_detection = turn_detection
        self._iterator = VADIterator(
            model,
            threshold=turn_detection.threshold,
            sampling_rate=SPEECH_RATE,
            min_silence_duration_ms=turn_detection.silence_duration_ms,
            speech_pad_ms=0,
        )
        self._pending = np.zeros(0, dtype=np.float32)
        self._samples_seen = 0
        prefix = turn_detection.prefix_padding_ms * SPEECH_RATE // 1000
        self._history: deque[np.ndarray] = deque(maxlen=prefix // CHUNK_SAMPLES + 2)
        self._speech: list[np.ndarray] | None = None
        self._speech_origin = 0
        self._speech_start = 0
        self._detected_at = 0

    @property
    def in_speech(self) -> bool:
        return self._speech is not None

    def feed(self, samples: np.ndarray) -> list[VADEvent]:
        """Add 16 kHz float32 audio of any length; return the events it completes."""
        self._pending = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        events: list[VADEvent] = []
        whole = len(self._pending) // CHUNK_SAMPLES * CHUNK_SAMPLES
        for offset in range(0, whole, CHUNK_SAMPLES):
            events.extend(self._process_chunk(self._pending[offset : offset + CHUNK_SAMPLES]))
        self._pending = self._pending[whole:]
        return events

    def flush(self) -> list[VADEvent]:
        """End of input: close an utterance still in progress."""
        if self._speech is None:
            return []
        return [self._stop(self._samples_seen)]

    def reset(self) -> None:
        """Forget all audio (``input_audio_buffer.clear``) but keep the settings."""
        self._iterator.reset_states()
        self._pending = np.zeros(0, dtype=np.float32)
        self._history.clear()
        self._speech = None

    def _process_chunk(self, chunk: np.ndarray) -> list[VADEvent]:
        chunk_start = self._samples_seen
        self._samples_seen += len(chunk)
        if self._speech is not None:
            self._speech.append(chunk)
        else:
            self._history.append(chunk)
        boundary = self._iterator(chunk)
        if not boundary:
            return []
        if "start" in boundary and self._speech is None:
            return [self._start(max(0, boundary["start"]), chunk_start)]
        if "end" in boundary and self._speech is not None:
            return [self._stop(boundary["end"])]
        return []

    def _start(self, start_sample: int, chunk_start: int) -> SpeechStarted:
        prefix = self.turn_detection.prefix_padding_ms * SPEECH_RATE // 1000
        history = list(self._history)
        self._speech_origin = chunk_start + CHUNK_SAMPLES - sum(len(c) for c in history)
        self._speech = history
        self._history.clear()
        self._speech_start = max(self._speech_origin, start_sample - prefix)
        self._detected_at = start_sample
        return SpeechStarted(audio_start_ms=start_sample * 1000 // SPEECH_RATE)

    def _stop(self, end_sample: int) -> SpeechStopped:
        assert self._speech is not None
        audio = np.concatenate(self._speech)
        utterance = audio[self._speech_start - self._speech_origin : end_sample - self._speech_origin]
        self._speech = None
        min_samples = self.turn_detection.min_speech_duration_ms * SPEECH_RATE // 1000
        too_short = end_sample - self._detected_at < min_samples
        return SpeechStopped(
            audio_end_ms=end_sample * 1000 // SPEECH_RATE,
            utterance=None if too_short else utterance,
        )
