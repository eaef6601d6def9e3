"""Word error and decode time of faster-whisper decode settings on the quality set's spoken questions.

``s2s-bench stt-decode [--limit N] [--variants a,b] [--phone] [--noise-snr-db X]`` has Piper
say every ``ask`` and ``before`` line of ``loadtest/data/quality_questions.yaml`` (each distinct
line with its previous turn once), brings it to 16 kHz float as the server does (``--phone``:
24 kHz -> 8 kHz μ-law -> 16 kHz, as a phone caller's audio reaches the STT; ``--noise-snr-db``:
white or pink noise at the caller's end first) and transcribes it in this process, no Ray,
with each of ``VARIANTS``, clip by clip so that whatever else the machine does weighs on every
variant alike. Piper samples its speech at random: ``--seed`` seeds it (onnxruntime's seed) and
the noise, so runs with one seed hear the same speech, clean, over the phone or in noise.

A variant changes either the handler (``window``: ``SpeechToText`` as ``cluster/local.yaml``
sets it up, STTConfig fields changed) or faster-whisper's own ``WhisperModel.transcribe``
(``full``: the handler's model and the keyword arguments it passes when it reads Whisper's full
30 s window, its reference and its runaway fallback, plus the variant's). ``transcribe`` always
pads to 30 s, so no ``full`` variant can be as quick as the handler's 3 s-padded window; its
word error is to be read against ``full_window``'s. ``condition_on_previous_text`` is left
out: one short clip is one window, with no previous window's text to condition on.

Word error (jiwer) is over all clips, both sides normalised alike: lower case, hyphens as spaces,
common English contractions expanded, numbers spelled out as words (``8`` -> ``eight``), then
punctuation removed (``quality.normalise``). Decode time is one ``transcribe`` call, its segments consumed, after one
warm-up call per variant. One readable line per variant, then one JSON object on the last line.
"""

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
import onnxruntime
import yaml

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import REALTIME_RATE, SPEECH_RATE, StreamResampler, float_to_pcm16, pcm16_to_float, resample
from handlers.stt import SpeechToText, STTConfig
from loadtest import options
from loadtest.benchmarks.answer_checks import normalise
from loadtest.benchmarks.quality import QUESTIONS
from loadtest.client.spoken_turns import Speaker
from loadtest.scenarios.launch import LOCAL_CONFIG
from loadtest.stats import percentile

WINDOW, FULL = "window", "full"
PREVIOUS_TURN: Any = object()
"""A keyword argument's value that stands for the clip's previous turn (``None`` for a first turn)."""
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "baseline": (WINDOW, {}),
    "no_language": (WINDOW, {"language": None}),  # the handler passes "en"; tiny.en has no language token
    "beam2": (WINDOW, {"beam_size": 2}),
    "beam5": (WINDOW, {"beam_size": 5}),
    "full_window": (FULL, {}),  # temperature: the library's fallback tuple (0.0, 0.2, ..., 1.0)
    "temperature_0": (FULL, {"temperature": 0.0}),
    "initial_prompt": (FULL, {"initial_prompt": PREVIOUS_TURN}),
    "timestamps": (FULL, {"without_timestamps": False}),
    "vad_filter": (FULL, {"vad_filter": True}),
}
"""Name -> (which path, what it changes there): STTConfig fields for ``window``,
``WhisperModel.transcribe`` keyword arguments over the handler's own for ``full``."""
P50_ALLOWANCE_MS = 30.0
"""The rule adopted: a setting is worth taking if it lowers the word error for at most this much
more decode time at p50 than the baseline."""
REPRODUCE_CLIPS = 3
"""Clips on which ``full_window`` is checked against the handler's own full-window transcription."""
SHOWN_ERRORS = 10
NOISES = ("pink", "white")


@dataclass(frozen=True)
class Clip:
    text: str
    previous: str | None
    """The turn said before it in the same session, if any."""


def load_clips(path: Path = QUESTIONS) -> list[Clip]:
    """Every ``before`` and ``ask`` line in the file's order, each distinct (text, previous turn) once:
    the same line said again decodes the same, and would only weigh more."""
    clips: dict[Clip, None] = {}
    for entry in yaml.safe_load(path.read_text()):
        before = entry.get("before", [])
        clips.update(dict.fromkeys(Clip(line, None) for line in before))
        clips[Clip(entry["ask"], " ".join(before) or None)] = None
    return list(clips)


def noise(rng: np.random.Generator, size: int, colour: str) -> np.ndarray:
    """Unit-free noise; pink by shaping white noise's spectrum by 1/sqrt(f)."""
    white = rng.standard_normal(size)
    if colour == "white":
        return white
    spectrum = np.fft.rfft(white)
    spectrum[0] = 0.0
    spectrum[1:] /= np.sqrt(np.arange(1, spectrum.size))
    return np.fft.irfft(spectrum, size)


def with_noise(speech: np.ndarray, snr_db: float, colour: str, rng: np.random.Generator) -> np.ndarray:
    """``speech`` plus noise at ``snr_db`` below its mean power over the whole clip (Piper's short
    silences at its ends included), as the caller's PCM16 carries it."""
    added = noise(rng, speech.size, colour)
    added *= np.sqrt(np.mean(speech**2) / (np.mean(added**2) * 10 ** (snr_db / 10)))
    return pcm16_to_float(float_to_pcm16(speech + added.astype(np.float32)))


def stt_input(pcm16: bytes, args: argparse.Namespace, rng: np.random.Generator) -> np.ndarray:
    """Piper's 24 kHz PCM16 as the STT gets it: 16 kHz float, through the server's streamed
    resampling (LQ from the phone's 8 kHz, as ``AudioInput.append`` picks)."""
    audio = pcm16_to_float(pcm16)
    if args.noise_snr_db is not None:
        audio = with_noise(audio, args.noise_snr_db, args.noise, rng)
    if not args.phone:
        return StreamResampler(REALTIME_RATE, SPEECH_RATE).process(audio, last=True)
    line = PCMU.samples(PCMU.wire_bytes(resample(audio, REALTIME_RATE, PCMU.rate)))
    return StreamResampler(PCMU.rate, SPEECH_RATE, quality="LQ").process(line, last=True)


Decode = Callable[[np.ndarray, Clip], str]


def decoders(names: list[str]) -> tuple[dict[str, Decode], SpeechToText]:
    """Each variant's decode, and the handler that reads Whisper's full window (whose model the
    ``full`` variants share)."""
    (voice,) = yaml.safe_load(LOCAL_CONFIG.read_text())["applications"]
    local = voice["args"]["stt"]["handler"]
    reference = SpeechToText(STTConfig(**{**local, "context_padding_s": None}))
    own = {
        "language": reference.config.language,
        "beam_size": reference.config.beam_size,
        "without_timestamps": True,
        "condition_on_previous_text": False,
        "vad_filter": False,
    }  # what SpeechToText._transcribe_full passes: main checks that full_window reproduces it

    def window(changes: dict[str, Any]) -> Decode:
        stt = SpeechToText(STTConfig(**{**local, **changes}))
        return lambda audio, clip: stt.transcribe(audio)

    def full(changes: dict[str, Any]) -> Decode:
        def decode(audio: np.ndarray, clip: Clip) -> str:
            kwargs = {key: clip.previous if value is PREVIOUS_TURN else value for key, value in changes.items()}
            segments, _info = reference._model.transcribe(audio, **{**own, **kwargs})
            return " ".join(text for segment in segments if (text := segment.text.strip()))

        return decode

    made = {WINDOW: window, FULL: full}
    return {name: made[VARIANTS[name][0]](VARIANTS[name][1]) for name in names}, reference


def variant_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if unknown := [name for name in names if name not in VARIANTS]:
        raise argparse.ArgumentTypeError(f"no variant {', '.join(unknown)}; there are {', '.join(VARIANTS)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, seed=0)
    parser.add_argument("--limit", type=options.positive_int, help="only the first N clips (a smoke run)")
    parser.add_argument(
        "--variants",
        type=variant_names,
        default=list(VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS)} (baseline is always run: the others are judged by it)",
    )
    parser.add_argument("--phone", action="store_true", help="through 8 kHz G.711 μ-law first, as a phone caller")
    parser.add_argument("--noise-snr-db", type=float, help="add noise at this signal-to-noise ratio (dB)")
    parser.add_argument("--noise", choices=NOISES, default="pink", help="the noise's colour (default pink)")


def summary(
    name: str, clips: list[Clip], texts: list[str], times_ms: list[float], baseline: dict[str, Any] | None
) -> dict[str, Any]:
    expected = [normalise(clip.text) for clip in clips]
    got = [normalise(text) for text in texts]
    errors = [
        (clip.text, text) for clip, text, norm, want in zip(clips, texts, got, expected, strict=True) if norm != want
    ]
    result: dict[str, Any] = {
        "path": VARIANTS[name][0],
        "changes": {
            key: "<previous turn>" if value is PREVIOUS_TURN else value for key, value in VARIANTS[name][1].items()
        },
        "wer": round(jiwer.wer(expected, got), 4),
        "misheard_clips": len(errors),
        "decode_ms_p50": percentile(times_ms, 50),
        "decode_ms_p95": percentile(times_ms, 95),
        "errors": [{"expected": want, "heard": text} for want, text in errors[:SHOWN_ERRORS]],
    }
    if baseline is not None:
        result["lower_wer_within_allowance"] = (
            result["wer"] < baseline["wer"] and result["decode_ms_p50"] <= baseline["decode_ms_p50"] + P50_ALLOWANCE_MS
        )
    return result


def main(args: argparse.Namespace) -> None:
    names = ["baseline", *(name for name in args.variants if name != "baseline")]
    clips = load_clips()[: args.limit]
    onnxruntime.set_seed(args.seed)  # before Piper's session is made: it draws from the seed's sequence
    speaker, rng = Speaker(), np.random.default_rng(args.seed)
    audio = [stt_input(speaker.speech(clip.text), args, rng) for clip in clips]
    decode, reference = decoders(names)
    texts: dict[str, list[str]] = {name: [] for name in names}
    times_ms: dict[str, list[float]] = {name: [] for name in names}
    for name in names:
        decode[name](audio[0], clips[0])  # warm-up: a fresh model's first calls pay its setup
    for index, (clip, samples) in enumerate(zip(clips, audio, strict=True)):
        for name in names:
            started = time.perf_counter()
            texts[name].append(decode[name](samples, clip))
            times_ms[name].append((time.perf_counter() - started) * 1000)
        if (index + 1) % 10 == 0:
            print(f"{index + 1}/{len(clips)} clips", file=sys.stderr, flush=True)
    report: dict[str, Any] = {
        "clips": len(clips),
        "audio": "phone (8 kHz G.711 mu-law)" if args.phone else "24 kHz PCM16",
        "noise": None if args.noise_snr_db is None else {"snr_db": args.noise_snr_db, "colour": args.noise},
        "seed": args.seed,
        "p50_allowance_ms": P50_ALLOWANCE_MS,
    }
    if "full_window" in names:
        checked = range(min(REPRODUCE_CLIPS, len(clips)))
        report["full_window_reproduces_handler"] = all(
            reference.transcribe(audio[i]) == texts["full_window"][i] for i in checked
        )
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        results[name] = summary(name, clips, texts[name], times_ms[name], results.get("baseline"))
        line = results[name]
        print(
            f"{name:15s} WER {line['wer']:.3f}  misheard {line['misheard_clips']:2d}/{len(clips)}  "
            f"decode p50 {line['decode_ms_p50']:7.1f} ms  p95 {line['decode_ms_p95']:7.1f} ms",
            flush=True,
        )
    report["variants"] = results
    report["lower_wer_within_allowance"] = [name for name in names if results[name].get("lower_wer_within_allowance")]
    print(json.dumps(report))
