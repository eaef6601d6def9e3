"""The spoken questions' word error rate per noise condition, raw and denoised.

Whether the denoiser that the interruption gate hears through costs the turns their words: the
benchmark's spoken questions (``spoken_turns.QUESTIONS`` and the load test's capitals) in three
voices, transcribed as a turn is, clean and in each noise at each SNR, raw and denoised (the same
noisy clip, the denoiser settled over ``SETTLE_S`` of the background before it, as a question in a
live call has): word error rate per condition (``answer_checks.normalise``). The target: denoised
at 10 dB, at most 1.5 times the clean WER.

It is its own measure, not the gate's, so it has its own module; ``s2s-bench interruption-table``
runs it over the same backgrounds (``--no-wer`` skips it, ``--wer-only`` runs it alone, ``--wet``
adds other shares of DTLN). The noise under a clip and the denoiser's settled state are here
because both tables hear a noisy call this way and the interruption table imports them.
"""

import argparse
from typing import Any

import jiwer
import numpy as np

from handlers.audio import SPEECH_RATE, float_to_pcm16, pcm16_to_float
from handlers.denoise import Denoiser, NoiseReductionConfig
from handlers.stt import SpeechToText
from handlers.tts import TextToSpeech
from loadtest.benchmarks.answer_checks import normalise
from loadtest.benchmarks.backgrounds import SETTLE_S, settled_state, with_background
from loadtest.client import noise
from loadtest.client.noise import VOICES
from loadtest.client.prompts import CAPITALS, SPOKEN_BEFORE_PAUSE
from loadtest.client.spoken_turns import QUESTIONS


def table(
    stt: SpeechToText,
    denoisers: dict[str, Denoiser],
    tts: TextToSpeech,
    tracks: dict[str, np.ndarray],
    snrs: list[float],
    voices: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """WER of the spoken questions per noise condition (clean, then each of ``tracks`` at each
    SNR), raw and through each of ``denoisers`` (by name: ``denoised`` is the server's default,
    ``denoised_wet_W`` another share of DTLN)."""
    texts = list(dict.fromkeys([*QUESTIONS, *(f"{SPOKEN_BEFORE_PAUSE} {country}?" for country, _ in CAPITALS)]))
    clips = [(text, noise.speak(tts, text, v)) for text in texts for v in VOICES[:voices]]
    pad = np.zeros(SPEECH_RATE // 5, np.float32)
    result: dict[str, Any] = {"clips": len(clips), "denoiser_lead_s": SETTLE_S}
    for background in (None, *tracks):
        for snr in [None] if background is None else snrs:
            name = "clean" if background is None else f"{background}_{snr:g}db"
            track = None if background is None else tracks[background]
            said, raw = [], []
            denoised: dict[str, list[str]] = {label: [] for label in denoisers}
            for text, speech in clips:
                audio, lead = with_background(
                    np.concatenate([pad, speech, pad]), track, snr, noise.voiced_power(speech), rng
                )
                audio, lead = (pcm16_to_float(float_to_pcm16(a)) for a in (audio, lead))
                said.append(normalise(text))
                raw.append(normalise(stt.transcribe(audio)))
                for label, denoiser in denoisers.items():
                    state = settled_state(denoiser, lead)
                    # the denoiser's output trails by 32 ms: what it still holds of the tail comes out after
                    out = denoiser.denoise(state, np.concatenate([audio, pad]))
                    denoised[label].append(normalise(stt.transcribe(out)))
            row = {"raw": round(float(jiwer.wer(said, raw)), 4)}
            row |= {label: round(float(jiwer.wer(said, heard)), 4) for label, heard in denoised.items()}
            result[name] = row
            print(f"  WER {name}: " + ", ".join(f"{label} {value:.3f}" for label, value in row.items()), flush=True)
    clean = result["clean"]["raw"]
    result["target_denoised_10db_at_most_1.5x_clean"] = {
        name: result[name]["denoised"] <= 1.5 * clean for name in result if name.endswith("_10db")
    }
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The WER's flags on ``s2s-bench interruption-table``."""
    parser.add_argument("--no-wer", action="store_true", help="skip the questions' WER")
    parser.add_argument("--wer-only", action="store_true", help="only the questions' WER (no overlaps)")
    parser.add_argument(
        "--wet",
        type=float,
        nargs="+",
        default=[],
        help="the WER also through DTLN at these shares of its output (vad.noise_reduction.wet; the default's is"
        f" {NoiseReductionConfig().wet:g})",
    )


def report(
    args: argparse.Namespace,
    stt: SpeechToText,
    denoiser: Denoiser,
    tts: TextToSpeech,
    tracks: dict[str, np.ndarray],
    snrs: list[float],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The report's ``wer``: through the server's ``denoiser`` and DTLN at each ``--wet`` share,
    in one voice at ``--quick`` and three otherwise."""
    denoisers = {"denoised": denoiser} | {
        f"denoised_wet_{wet:g}": Denoiser(NoiseReductionConfig(wet=wet)) for wet in args.wet
    }
    return table(stt, denoisers, tts, tracks, snrs, 1 if args.quick else 3, rng)
