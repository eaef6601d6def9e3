"""What the pipeline hears of a caller: the audio denoised when the session asks, then the VAD.

The denoiser runs where the VAD runs and in the same batch (one call per tick for every
session of an ingress replica), so noise reduction adds no hop per frame: the VAD decides on
the denoised audio, and the same audio goes back to the session for STT.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from handlers.denoise import Denoiser, DenoiserState
from handlers.vad import VADEvent, VADState, VoiceActivityDetector


@dataclass
class Hearing:
    """One session's listening state: its VAD's (``None``: the client commits by hand) and
    its denoiser's (``None``: no ``noise_reduction``); picklable, so it travels with a call."""

    vad: VADState | None
    noise: DenoiserState | None = None


Heard = tuple[Hearing, np.ndarray | None, list[VADEvent]]
"""The session's states advanced, its audio denoised (``None``: not asked for, the audio as
sent), and the VAD's boundaries."""


class Listener:
    def __init__(self, detector: VoiceActivityDetector, denoiser: Denoiser) -> None:
        self._detector = detector
        self._denoiser = denoiser

    def listen_batch(self, calls: Sequence[tuple[Hearing, np.ndarray]]) -> list[Heard]:
        """Advance every session's states over its new audio (each state at most once)."""
        denoised = iter(self._denoiser.denoise_batch([(h.noise, audio) for h, audio in calls if h.noise is not None]))
        heard = [(hearing, audio, next(denoised) if hearing.noise is not None else None) for hearing, audio in calls]
        detecting = [(h.vad, audio if cleaned is None else cleaned) for h, audio, cleaned in heard if h.vad is not None]
        detected = iter(self._detector.detect_batch(detecting) if detecting else [])
        return [(hearing, cleaned, next(detected) if hearing.vad is not None else []) for hearing, _, cleaned in heard]
