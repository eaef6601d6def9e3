"""What a benchmark's caller hears under its speech: the background tracks, and a clip mixed
over one of them with the stretch of background just before it, on which the server's
denoiser settles first, as it has by the time a caller speaks over a call's background.
The interruption table and the WER table both hear their clips this way."""

import numpy as np

from handlers.audio import SPEECH_RATE
from handlers.denoise import Denoiser, DenoiserState
from handlers.tts import TextToSpeech
from loadtest.client import noise

SETTLE_S = 1.0
"""Background the denoiser hears before each clip (DTLN's LSTMs settle in ~250 ms)."""


def settled_state(denoiser: Denoiser, background_lead: np.ndarray) -> DenoiserState:
    """A denoiser state that has heard ``background_lead`` (its output dropped), as the server's
    has by the time a caller speaks over the call's background."""
    state = DenoiserState("near_field")
    denoiser.denoise(state, background_lead)
    return state


def with_background(
    audio: np.ndarray,
    track: np.ndarray | None,
    snr_db: float | None,
    level: float,
    rng: np.random.Generator,
    lead_s: float = SETTLE_S,
) -> tuple[np.ndarray, np.ndarray]:
    """``audio`` with a piece of ``track`` under it at ``snr_db`` below ``level`` (as
    ``noise.mix``: the piece's own power), and the ``lead_s`` of the track just before that
    piece, at the same gain: the background the caller's microphone sent before. No track:
    ``audio`` and silence."""
    lead = int(lead_s * SPEECH_RATE)
    if track is None:
        return audio, np.zeros(lead, np.float32)
    assert snr_db is not None
    piece = noise.fit(track, lead + audio.size, rng).astype(np.float64)
    power = float(np.mean(piece[lead:] ** 2))
    gain = np.sqrt(level / (power * 10 ** (snr_db / 10))) if power else 0.0
    return (audio + gain * piece[lead:]).astype(np.float32), (gain * piece[:lead]).astype(np.float32)


class Backgrounds:
    """The noises heard under the caller (``babble`` and ``stationary``, unit power), and the
    speech level that a sound with no speech of its own is mixed against."""

    def __init__(
        self,
        tts: TextToSpeech,
        rng: np.random.Generator,
        talkers: int,
        seconds: float,
        stationary: str,
        speech_power: float,
    ) -> None:
        self.tracks = {
            "babble": noise.Babble(tts, rng, talkers, seconds).audio,
            stationary: noise.stationary(stationary, rng, 20.0),
        }
        self.speech_power = speech_power
