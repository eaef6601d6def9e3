"""The benchmarks' noise: mixed at the SNR asked, with the spectra and levels its names promise."""

import numpy as np
import pytest

from handlers.audio import SPEECH_RATE
from loadtest.client import noise

pytestmark = pytest.mark.fast


def speech_like(rng: np.random.Generator) -> np.ndarray:
    """A tone that comes and goes, with silence around it: only part of it is voiced."""
    t = np.arange(SPEECH_RATE) / SPEECH_RATE
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 2 * t) > 0)
    return np.concatenate([np.zeros(SPEECH_RATE // 2), tone, np.zeros(SPEECH_RATE // 2)]).astype(np.float32)


@pytest.mark.parametrize("kind", sorted(noise.STATIONARY))
@pytest.mark.parametrize("snr_db", [20.0, 10.0, 5.0, 0.0])
def test_mix_adds_the_noise_at_the_snr_asked_over_the_voiced_part(kind: str, snr_db: float) -> None:
    rng = np.random.default_rng(3)
    speech = speech_like(rng)
    mixed = noise.mix(speech, noise.stationary(kind, rng, 5.0), snr_db, rng)
    assert mixed.shape == speech.shape and mixed.dtype == np.float32
    assert noise.snr_db(speech, mixed - speech) == pytest.approx(snr_db, abs=0.01)
    # the voiced part is half the tone's second: SNR over the whole clip would be ~6 dB lower
    whole = 10 * np.log10(np.mean(speech.astype(np.float64) ** 2) / np.mean((mixed - speech).astype(np.float64) ** 2))
    assert whole < snr_db - 5


def test_mix_against_a_given_level_ignores_the_sounds_own() -> None:
    rng = np.random.default_rng(4)
    cough = noise.cough(rng, 0.5)
    mixed = noise.mix(cough, noise.pink(rng, SPEECH_RATE), 10.0, rng, speech_power=0.01)
    assert 10 * np.log10(0.01 / np.mean((mixed - cough).astype(np.float64) ** 2)) == pytest.approx(10.0, abs=0.01)


def band_power(audio: np.ndarray, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    f = np.fft.rfftfreq(audio.size, 1 / SPEECH_RATE)
    return float(spectrum[(f >= low) & (f < high)].sum())


def test_pink_has_equal_power_per_octave_and_brown_falls_with_it() -> None:
    rng = np.random.default_rng(5)
    pink, brown = noise.pink(rng, 10 * SPEECH_RATE), noise.brown(rng, 10 * SPEECH_RATE)
    assert band_power(pink, 250, 500) / band_power(pink, 2000, 4000) == pytest.approx(1.0, rel=0.2)
    assert band_power(brown, 250, 500) / band_power(brown, 2000, 4000) == pytest.approx(8.0, rel=0.2)
    for shaped in (pink, brown):  # none of the power is where nobody hears it
        assert band_power(shaped, 0, noise.LOWEST_HZ) == pytest.approx(0.0, abs=1e-6 * band_power(shaped, 0, 8000))


@pytest.mark.parametrize("mains_hz", [50, 60])
def test_hum_is_the_mains_and_its_harmonics(mains_hz: int) -> None:
    hum = noise.hum(np.random.default_rng(6), SPEECH_RATE, mains_hz)
    assert np.mean(hum.astype(np.float64) ** 2) == pytest.approx(1.0, rel=1e-3)
    spectrum = np.abs(np.fft.rfft(hum)) ** 2  # one second: bins are 1 Hz apart
    peaks = set(np.argsort(spectrum)[-6:].tolist())
    assert peaks == {mains_hz * n for n in range(1, 7)}


def test_a_pitch_shift_moves_every_frequency_and_shortens_the_sound() -> None:
    t = np.arange(SPEECH_RATE) / SPEECH_RATE
    tone = np.sin(2 * np.pi * 200 * t).astype(np.float32)
    higher = noise.pitch_shift(tone, 1.25)
    assert higher.size == pytest.approx(SPEECH_RATE / 1.25, abs=2)
    peak = np.argmax(np.abs(np.fft.rfft(higher))) * SPEECH_RATE / higher.size
    assert peak == pytest.approx(250, abs=2)


def test_the_non_speech_sounds_peak_at_their_level_and_end_quiet() -> None:
    rng = np.random.default_rng(7)
    for sound in (noise.cough(rng, 0.4, coughs=2), noise.knock(rng, 0.4), noise.synthetic_laugh(rng, 0.4)):
        assert np.abs(sound).max() == pytest.approx(0.4, rel=1e-3)
        assert np.abs(sound[-SPEECH_RATE // 20 :]).max() < 0.05
    burst = noise.burst(noise.brown(rng, SPEECH_RATE), 0.5, 0.1, rng)
    assert burst.size == SPEECH_RATE // 2 and np.sqrt(np.mean(burst.astype(np.float64) ** 2)) == pytest.approx(0.1)


def test_a_short_noise_is_tiled_to_the_length_asked() -> None:
    rng = np.random.default_rng(8)
    assert noise.fit(np.arange(10, dtype=np.float32), 25, rng).size == 25


def test_voiced_frames_are_those_near_the_loudest() -> None:
    audio = np.concatenate([np.full(320, 0.5), np.full(320, 0.5 * 10 ** (-40 / 20)), np.full(320, 0.1)])
    assert noise.voiced(audio.astype(np.float32)).tolist() == [True, False, True]
