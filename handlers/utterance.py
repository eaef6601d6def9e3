"""Cutting utterances out of a session's audio: the buffer that keeps what speech needs.

The detector (``handlers.vad``) only says where speech starts and stops; the audio stays with
the caller, in an :class:`UtteranceBuffer`, which keeps a little before each start (the
``prefix_padding_ms`` of the Realtime protocol) and forgets what no utterance will need.
:class:`VADSession` puts detector, state and buffer together in one process (demo, tests).
"""

import numpy as np

from handlers.audio import SPEECH_RATE
from handlers.vad import (
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    VADEvent,
    VADState,
    VoiceActivityDetector,
    ms_to_samples,
)


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
        turn_detection = turn_detection or TurnDetection()
        self.detector = detector
        self.state = VADState(turn_detection)
        self.buffer = UtteranceBuffer(turn_detection.prefix_padding_ms)

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
