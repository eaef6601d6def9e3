"""Noise for the benchmarks: what a caller's microphone hears besides the caller, at a given SNR.

Stationary noises (``pink``, ``brown``, mains ``hum`` at 50 or 60 Hz with its harmonics), a
``Babble`` of several Piper-spoken sentences overlapped, and sounds a caller makes that are
not words: ``cough`` (a noise burst that decays), ``laugh`` (voiced "ha" bursts: Piper's, or
``synthetic_laugh``'s glottal pulses) and ``knock``. ``mix`` adds noise to speech so that the
speech's power over its voiced part stands ``snr_db`` above the noise's (``voiced_power``).

All of it is synthetic, 16 kHz float32. No package on PyPI from an organisation or a known
project ships real street or café recordings inside it with a stated licence (the data sets
that do, DEMAND, MUSAN, ESC-50, are downloaded from their own sites, which the benchmarks'
machines cannot reach), so babble is Piper talking to itself.

There is one Piper voice here (the bundled one), so its "voices" (:data:`VOICES`) are that
voice at other paces (Piper's ``length_scale``) and pitches: the speech resampled and played
at the old rate, its pace then put back by a matching ``length_scale``. Formants move with
the pitch (as a tape sped up), so a shifted voice is a smaller or larger speaker more than
another person.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from handlers.audio import SPEECH_RATE, resample
from handlers.tts import TextToSpeech

FRAME = SPEECH_RATE // 50
"""20 ms: the frames over which speech is told voiced."""
VOICED_BELOW_PEAK_DB = 30.0
"""A frame is voiced when its power is within this much of the loudest frame's."""


@dataclass(frozen=True)
class Voice:
    """One of Piper's voice made another: ``pace`` is Piper's ``length_scale`` as heard (> 1
    slower), ``pitch`` a factor on every frequency, ``noise_scale`` Piper's own variation."""

    pace: float = 1.0
    pitch: float = 1.0
    noise_scale: float = 0.667


VOICES = (
    Voice(1.0, 1.0, 0.667),
    Voice(0.85, 1.15, 0.5),
    Voice(1.25, 0.88, 0.8),
    Voice(1.0, 1.3, 0.667),
    Voice(1.1, 0.8, 0.333),
    Voice(0.75, 1.05, 1.0),
)
"""Six "speakers" of the one voice: plain, quicker and higher, slower and lower, a high
voice, a deep one, a hurried one."""
BABBLE_SENTENCES = (
    "The train was late again this morning, so we took the bus.",
    "I told her the meeting had moved to Thursday afternoon.",
    "Could you pass me the sugar and a clean spoon, please?",
    "They painted the kitchen a pale shade of green last week.",
    "My brother is flying back from Lisbon on Sunday night.",
    "The coffee here is good but the music is far too loud.",
    "We should book the table before the weekend gets busy.",
    "He never answers his phone when he is at the gym.",
    "The children spent the whole afternoon at the beach.",
    "Did you see the match last night? It went to penalties.",
    "She bought a second hand bike and rides it to work.",
    "The landlord finally fixed the heating in the flat.",
)
"""What the people around the caller say: long, unrelated to any question the agent hears."""


def speak(tts: TextToSpeech, text: str, voice: Voice = Voice()) -> np.ndarray:
    """``text`` in ``voice``, 16 kHz float32."""
    from piper import SynthesisConfig

    config = SynthesisConfig(length_scale=voice.pace * voice.pitch, noise_scale=voice.noise_scale)
    return pitch_shift(tts.whole(text, SPEECH_RATE, config), voice.pitch)


def pitch_shift(audio: np.ndarray, factor: float) -> np.ndarray:
    """``audio`` played ``factor`` times as fast: every frequency times ``factor``, the length
    over it (resampled to ``rate / factor`` and read at ``rate``)."""
    if factor == 1.0:
        return audio.astype(np.float32, copy=False)
    return resample(audio, SPEECH_RATE, round(SPEECH_RATE / factor))


LOWEST_HZ = 20.0
"""Nothing below this (a microphone's own high-pass): 1/f noise would put half its power in
the octaves under 20 Hz, which count in its power but are not heard."""


def _shaped(rng: np.random.Generator, size: int, exponent: float) -> np.ndarray:
    """White noise whose power falls as ``1 / f ** exponent`` from ``LOWEST_HZ``, unit power."""
    spectrum = np.fft.rfft(rng.standard_normal(size))
    f = np.fft.rfftfreq(size, 1 / SPEECH_RATE)
    spectrum[f < LOWEST_HZ] = 0.0
    spectrum[f >= LOWEST_HZ] /= f[f >= LOWEST_HZ] ** (exponent / 2)
    shaped = np.fft.irfft(spectrum, size)
    return (shaped / np.sqrt(np.mean(shaped**2))).astype(np.float32)


def pink(rng: np.random.Generator, size: int) -> np.ndarray:
    """1/f noise (equal power per octave): a fan, a room's hush, distant traffic."""
    return _shaped(rng, size, 1.0)


def brown(rng: np.random.Generator, size: int) -> np.ndarray:
    """1/f² noise: rumble, a car's cabin, wind on the microphone."""
    return _shaped(rng, size, 2.0)


def hum(rng: np.random.Generator, size: int, mains_hz: int = 50, harmonics: int = 6) -> np.ndarray:
    """Mains hum: ``mains_hz`` and its harmonics, odd ones strongest (a transformer's
    buzz), random phases, unit power."""
    t = np.arange(size) / SPEECH_RATE
    buzz = np.zeros(size)
    for n in range(1, harmonics + 1):
        buzz += (1.0 if n % 2 else 0.4) / n * np.sin(2 * np.pi * n * mains_hz * t + rng.uniform(0, 2 * np.pi))
    return (buzz / np.sqrt(np.mean(buzz**2))).astype(np.float32)


STATIONARY = {"pink": pink, "brown": brown, "hum": hum}


def voiced(audio: np.ndarray) -> np.ndarray:
    """Whether each 20 ms frame is voiced: within ``VOICED_BELOW_PEAK_DB`` of the loudest."""
    frames = audio[: audio.size // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
    power = (frames**2).mean(1)
    return np.asarray(power > power.max(initial=0.0) * 10 ** (-VOICED_BELOW_PEAK_DB / 10))


def voiced_power(audio: np.ndarray) -> float:
    """Mean power over the voiced frames (the level SNR is quoted against)."""
    frames = audio[: audio.size // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
    loud = voiced(audio)
    return float((frames[loud] ** 2).mean()) if loud.any() else 0.0


def fit(noise: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` samples of ``noise``: from a random place in it, tiled when it is shorter."""
    if noise.size < size:
        noise = np.tile(noise, size // noise.size + 1)
    start = int(rng.integers(0, noise.size - size + 1))
    return noise[start : start + size]


def scaled_to(noise: np.ndarray, speech_power: float, snr_db: float) -> np.ndarray:
    """``noise`` at ``snr_db`` below ``speech_power`` (its power over the whole of it)."""
    power = float(np.mean(noise.astype(np.float64) ** 2))
    return (noise * np.sqrt(speech_power / (power * 10 ** (snr_db / 10)))).astype(np.float32) if power else noise


def mix(
    speech: np.ndarray, noise: np.ndarray, snr_db: float, rng: np.random.Generator, speech_power: float | None = None
) -> np.ndarray:
    """``speech`` with ``noise`` (a piece of it as long, from a random place) under it at
    ``snr_db``: the speech's ``voiced_power`` (or ``speech_power``, for audio whose own voiced
    part is no speech) over the noise's mean power."""
    level = voiced_power(speech) if speech_power is None else speech_power
    return (speech + scaled_to(fit(noise, speech.size, rng), level, snr_db)).astype(np.float32)


class Babble:
    """Several people talking at once: ``talkers`` streams of ``BABBLE_SENTENCES`` (each
    talker a voice of ``VOICES``, its sentences shuffled, 0.1-0.6 s between them) added at
    equal power, ``seconds`` long."""

    def __init__(self, tts: TextToSpeech, rng: np.random.Generator, talkers: int = 5, seconds: float = 30.0) -> None:
        size = int(seconds * SPEECH_RATE)
        self.audio = np.zeros(size, np.float32)
        for talker in range(talkers):
            voice = VOICES[talker % len(VOICES)]
            stream = np.concatenate(list(_talk(tts, voice, rng, size)))[:size]
            self.audio += stream / np.sqrt(voiced_power(stream))
        self.audio /= np.sqrt(float(np.mean(self.audio**2)))


def _talk(tts: TextToSpeech, voice: Voice, rng: np.random.Generator, size: int) -> Iterator[np.ndarray]:
    said = 0
    while said < size:
        for index in rng.permutation(len(BABBLE_SENTENCES)):
            for piece in (
                np.zeros(int(rng.uniform(0.1, 0.6) * SPEECH_RATE), np.float32),
                speak(tts, BABBLE_SENTENCES[index], voice),
            ):
                said += piece.size
                yield piece
            if said >= size:
                return


def _decaying(rng: np.random.Generator, seconds: float, decay_s: float) -> np.ndarray:
    size = int(seconds * SPEECH_RATE)
    attack = np.minimum(1.0, np.arange(size) / (0.01 * SPEECH_RATE))
    return attack * np.exp(-np.arange(size) / (decay_s * SPEECH_RATE))


def cough(rng: np.random.Generator, level: float = 0.3, coughs: int = 1) -> np.ndarray:
    """``coughs`` noise bursts that decay (0.2-0.45 s each, a breath between), coloured
    between white and pink, peaking near ``level``."""
    parts = []
    for _ in range(coughs):
        seconds = rng.uniform(0.2, 0.45)
        burst = _shaped(rng, int(seconds * SPEECH_RATE), rng.uniform(0.0, 1.0))
        parts += [
            burst * _decaying(rng, seconds, rng.uniform(0.05, 0.15)),
            np.zeros(int(rng.uniform(0.1, 0.25) * SPEECH_RATE)),
        ]
    audio = np.concatenate(parts)
    return (audio * level / np.abs(audio).max()).astype(np.float32)


def _formants(source: np.ndarray, formants: tuple[tuple[float, float], ...]) -> np.ndarray:
    """``source`` through resonances at each (centre, bandwidth) Hz, in the spectrum."""
    spectrum = np.fft.rfft(source)
    f = np.fft.rfftfreq(source.size, 1 / SPEECH_RATE)
    response = sum(1 / (1 + ((f - centre) / (width / 2)) ** 2) for centre, width in formants)
    return np.fft.irfft(spectrum * response, source.size)


def synthetic_laugh(rng: np.random.Generator, level: float = 0.3, bursts: int = 4) -> np.ndarray:
    """``bursts`` voiced "ha"s: a glottal pulse train (150-300 Hz, falling) with breath, through
    two formant-like resonances, 90-150 ms each with 60-120 ms between."""
    f0 = rng.uniform(150, 300)
    parts = []
    for index in range(bursts):
        seconds = rng.uniform(0.09, 0.15)
        size = int(seconds * SPEECH_RATE)
        pitch = f0 * (1 - 0.05 * index) * (1 + 0.05 * np.sin(np.linspace(0, np.pi, size)))
        phase = np.cumsum(pitch / SPEECH_RATE)
        pulses = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
        source = pulses + 0.05 * rng.standard_normal(size)
        source = _formants(source, ((rng.uniform(650, 850), 150.0), (rng.uniform(1100, 1400), 200.0)))
        envelope = np.sin(np.linspace(0, np.pi, size)) ** 0.5
        parts += [source * envelope, np.zeros(int(rng.uniform(0.06, 0.12) * SPEECH_RATE))]
    audio = np.concatenate(parts)
    return (audio * level / np.abs(audio).max()).astype(np.float32)


LAUGHS = ("Ha ha ha.", "Ha ha.", "Hahaha!", "Heh heh heh.")
"""What Piper is asked to laugh: it reads them as voiced "ha" syllables."""


def laugh(tts: TextToSpeech, text: str = LAUGHS[0], voice: Voice = Voice()) -> np.ndarray:
    """A laugh in Piper's voice (one of :data:`LAUGHS`)."""
    return speak(tts, text, voice)


def knock(rng: np.random.Generator, level: float = 0.4, knocks: int = 3) -> np.ndarray:
    """A knock on a door or a table: ``knocks`` 30 ms low thuds, 150-250 ms apart."""
    parts = []
    for _ in range(knocks):
        thud = _shaped(rng, int(0.03 * SPEECH_RATE), 1.5) * _decaying(rng, 0.03, 0.008)
        parts += [thud, np.zeros(int(rng.uniform(0.15, 0.25) * SPEECH_RATE))]
    audio = np.concatenate(parts)
    return (audio * level / np.abs(audio).max()).astype(np.float32)


def burst(noise: np.ndarray, seconds: float, level: float, rng: np.random.Generator) -> np.ndarray:
    """A piece of ``noise`` that fades in and out over ``seconds``, at RMS ``level``: a
    passing car, a fan switched on, a hum as a cable moves."""
    piece = fit(noise, int(seconds * SPEECH_RATE), rng).astype(np.float64)
    fade = np.minimum(1.0, np.minimum(np.arange(piece.size), np.arange(piece.size)[::-1]) / (0.05 * SPEECH_RATE))
    piece *= fade
    return (piece * level / np.sqrt(np.mean(piece**2))).astype(np.float32)


def snr_db(speech: np.ndarray, noise: np.ndarray) -> float:
    """The SNR as :func:`mix` means it, of ``speech`` and the ``noise`` added to it."""
    return float(10 * np.log10(voiced_power(speech) / np.mean(noise.astype(np.float64) ** 2)))


def stationary(kind: str, rng: np.random.Generator, seconds: float) -> np.ndarray:
    """``seconds`` of one of :data:`STATIONARY`, unit power."""
    return STATIONARY[kind](rng, int(seconds * SPEECH_RATE))
