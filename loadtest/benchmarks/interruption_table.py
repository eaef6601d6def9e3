"""Which sounds over an answer the interruption gate takes for an interruption, by audio path and noise.

``s2s-bench interruption-table`` builds a set of overlaps, each a sound the caller makes while
an answer plays: backchannels (``backchannel_words.BACKCHANNELS`` and "Yes.") in six voices
(``noise.VOICES``: Piper's one voice at other paces and pitches), coughs, laughs (Piper's
"Ha ha ha." and synthetic voiced bursts), noise alone (pink, brown and hum bursts, knocks: no
speech), short real interruptions ("Stop.", "Wait."...) and long ones (a new question). Each
overlap, between 0.5 s before and 1 s after, goes through one audio path (``websocket``: PCM16
at 16 kHz; ``webrtc``: 48 kHz through aiortc's Opus encoder and decoder, to 24 kHz as the
server's track reader takes it, then 16 kHz; ``phone``: 8 kHz μ-law as Twilio sends it, through
``handlers.g711``, back to 16 kHz as ``AudioInput`` resamples it) with background noise under it
(babble or a stationary noise at ``--snr-db``, the speech's voiced power over the noise's) and,
denoiser on, through ``handlers.denoise`` (DTLN) before the VAD and STT, as the server does. The
server's denoiser runs over the whole call, its LSTMs settled (~250 ms) long before anyone
speaks, so each clip is denoised from a ``settled_state``: one that has first heard
``SETTLE_S`` of the same condition's background (the same noise track at the same level, just
before the clip's own piece of it, through the same path; silence when clean), that output
dropped. The clip itself is the same with the denoiser off and on (its noise drawn from its
overlap and condition, not the denoiser), so off and on compare the same audio.

Then the gate decides as ``backchannel_words.Gate`` does: silero at microphone pace, the
first look at ``--first-look-ms`` of speech, a look again every ``RECHECK_MS``, and
``holds_a_real_word`` on each look's transcript. Positives are the real interruptions; an
overlap is taken (a) when a look found a real word within 500 ms of its onset (its first voiced
frame; LiveKit quotes 86 % precision and 100 % recall at 500 ms) and (b) at all. Noise alone
taken is a false barge-in; a candidate still undecided when the audio ends (its speech never
stopped: noise the VAD calls speech) would have kept the answer paused ("pending").

``wer`` (``wer_table``): the spoken questions' word error rate in each noise, raw and denoised;
``--no-wer`` skips it, ``--wer-only`` runs it alone.

``faster_stop``: could the audio alone, in the first ``--early-ms`` after the VAD's onset,
tell real interruptions from the rest? Features (voiced ms, silero's mean probability, RMS dB,
spectral flatness, silero's probability over the window's last 96 ms) of every overlap in every
condition; one threshold or two (AND) chosen on half the overlaps (every other one of each kind;
each overlap in all its conditions on the same side) for the most recall at no less precision
than the gate's on that half, then measured on the other half beside the gate.

Progress lines, then one JSON object on the last line. ``--quick``: one voice, a few overlaps
of each kind, one SNR, for a smoke run.
"""

import argparse
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from deployments.realtime.turn_taking.interruptions import RECHECK_MS
from handlers import g711
from handlers.audio import REALTIME_RATE, SPEECH_RATE, StreamResampler, float_to_pcm16, pcm16_to_float, resample
from handlers.denoise import Denoiser
from handlers.stt import SpeechToText
from handlers.tts import TextToSpeech
from handlers.vad import CHUNK_SAMPLES, SileroNetwork, TurnDetection, VADState, VoiceActivityDetector
from loadtest import options
from loadtest.benchmarks import wer_table
from loadtest.benchmarks.backchannel_words import BACKCHANNELS, INTERRUPTIONS, Gate, Looks, local_stt, padded
from loadtest.benchmarks.backgrounds import SETTLE_S, Backgrounds, settled_state, with_background
from loadtest.benchmarks.threshold_rules import best_rule
from loadtest.client import noise
from loadtest.client.noise import VOICES, Voice
from loadtest.stats import percentile

KINDS = ("backchannel", "cough", "laugh", "noise", "short", "long")
REAL = ("short", "long")
"""The kinds that are interruptions: the positives."""
SPOKEN = ("backchannel", *REAL)
"""The kinds that are words (a laugh's level is its own, not the speech's)."""
SHORT = tuple(said for said in INTERRUPTIONS if len(said.split()) <= 2)
LONG = (
    "Tell me about cats.",
    "What is the capital of Spain?",
    "Can you say that again more slowly?",
    "Actually, how far away is the moon?",
    "No, I meant the weather for tomorrow.",
    "Hang on, what time is it in Tokyo?",
)
"""A new question over the answer."""
WITHIN_MS = 500
"""LiveKit's figure for its turn detector: 86 % precision, 100 % recall within 500 ms."""
PATHS = ("websocket", "webrtc", "phone")
PHONE_RATE = 8000
WEBRTC_RATE = 48000


@dataclass(frozen=True)
class Overlap:
    kind: str
    label: str
    audio: np.ndarray
    """The sound alone, 16 kHz float32."""

    @property
    def real(self) -> bool:
        return self.kind in REAL


@dataclass(frozen=True)
class Sizes:
    voices: int
    """Voices per backchannel and long interruption (short ones: one less, laughs: half)."""
    synthetic: int
    """Synthetic laughs, and noise bursts of each sort (coughs: twice as many)."""
    phrases: int | None
    """Phrases of each kind (``None``: all)."""


FULL, QUICK = Sizes(5, 10, None), Sizes(1, 1, 1)


def overlaps(tts: TextToSpeech, rng: np.random.Generator, sizes: Sizes) -> list[Overlap]:
    """The scenario set: every kind of ``KINDS``, non-speech sounds scaled to the speech's level."""
    spoken = [
        *(
            ("backchannel", said, v)
            for said in (*BACKCHANNELS, "Yes.")[: sizes.phrases]
            for v in VOICES[: sizes.voices]
        ),
        *(("short", said, v) for said in SHORT[: sizes.phrases] for v in VOICES[: max(1, sizes.voices - 1)]),
        *(("long", said, v) for said in LONG[: sizes.phrases] for v in VOICES[: sizes.voices]),
        *(("laugh", said, v) for said in noise.LAUGHS[: sizes.phrases] for v in VOICES[: max(1, sizes.voices // 2)]),
    ]
    made = [Overlap(kind, f"{said} {voice_name(v)}", noise.speak(tts, said, v)) for kind, said, v in spoken]
    level = float(np.sqrt(np.median([noise.voiced_power(o.audio) for o in made if o.kind != "laugh"])))
    for index in range(sizes.synthetic):
        coughs = 1 + index % 3
        made.append(Overlap("cough", f"cough x{coughs}", noise.cough(rng, level * rng.uniform(1.5, 4), coughs)))
        made.append(Overlap("cough", f"cough x{coughs} quiet", noise.cough(rng, level * rng.uniform(0.5, 1.5), coughs)))
        made.append(
            Overlap("laugh", "synthetic laugh", noise.synthetic_laugh(rng, level * rng.uniform(1, 3), 3 + index % 3))
        )
        made.append(Overlap("noise", "knock", noise.knock(rng, level * rng.uniform(1, 4), 2 + index % 3)))
        for kind in noise.STATIONARY:
            seconds = rng.uniform(0.4, 1.5)
            sound = noise.burst(noise.stationary(kind, rng, 2.0), seconds, level * rng.uniform(0.3, 1.0), rng)
            made.append(Overlap("noise", f"{kind} burst {seconds:.1f} s", sound))
    return made


def voice_name(voice: Voice) -> str:
    return f"(pace {voice.pace}, pitch {voice.pitch})"


@dataclass(frozen=True)
class Condition:
    path: str = "websocket"
    background: str | None = None
    snr_db: float | None = None
    denoise: bool = False

    @property
    def name(self) -> str:
        heard = "clean" if self.background is None else f"{self.background}_{self.snr_db:g}db"
        return f"{self.path}/{heard}/denoiser_{'on' if self.denoise else 'off'}"


def conditions(snrs: list[float], stationary: str) -> list[Condition]:
    """Each path clean; on the WebSocket path, each noise at each SNR; each of those with the
    denoiser off and on."""
    return [
        *(Condition(path) for path in PATHS),
        Condition(denoise=True),
        *(
            Condition("websocket", background, snr, denoise)
            for background in ("babble", stationary)
            for snr in snrs
            for denoise in (False, True)
        ),
    ]


def through(path: str, audio: np.ndarray) -> np.ndarray:
    """16 kHz float32 audio as the server's VAD gets it over ``path`` (as many samples)."""
    if path == "websocket":
        heard = pcm16_to_float(float_to_pcm16(audio))
    elif path == "phone":
        line = g711.decode(
            g711.encode(np.frombuffer(float_to_pcm16(resample(audio, SPEECH_RATE, PHONE_RATE)), "<i2"), "ulaw"), "ulaw"
        )
        heard = StreamResampler(PHONE_RATE, SPEECH_RATE, quality="LQ").process(
            line.astype(np.float32) / 32768, last=True
        )
    elif path == "webrtc":
        heard = opus_round_trip(audio)
    else:
        raise ValueError(path)
    return np.pad(heard, (0, max(0, audio.size - heard.size)))[: audio.size].astype(np.float32)


def opus_round_trip(audio: np.ndarray) -> np.ndarray:
    """Through aiortc's Opus encoder (48 kHz, as a browser's microphone track is sent) and
    decoder, then to 24 kHz mono as the server's track reader resamples it, and 16 kHz."""
    import av
    from aiortc.codecs.opus import SAMPLES_PER_FRAME, OpusDecoder, OpusEncoder
    from aiortc.jitterbuffer import JitterFrame

    pcm = np.frombuffer(float_to_pcm16(resample(audio, SPEECH_RATE, WEBRTC_RATE)), "<i2")
    pcm = np.pad(pcm, (0, -pcm.size % SAMPLES_PER_FRAME))
    encoder, decoder = OpusEncoder(), OpusDecoder()
    to_track_rate = av.AudioResampler(format="s16", layout="mono", rate=REALTIME_RATE)
    out: list[np.ndarray] = []
    for start in range(0, pcm.size, SAMPLES_PER_FRAME):
        frame = av.AudioFrame.from_ndarray(pcm[None, start : start + SAMPLES_PER_FRAME], format="s16", layout="mono")
        frame.sample_rate, frame.pts = WEBRTC_RATE, start
        payloads, timestamp = encoder.encode(frame)
        for payload in payloads:
            for decoded in decoder.decode(JitterFrame(data=payload, timestamp=timestamp)):
                out += [
                    converted.to_ndarray().reshape(-1)
                    for converted in to_track_rate.resample(cast(av.AudioFrame, decoded))
                ]
    track = np.concatenate(out).astype(np.float32) / 32768 if out else np.zeros(0, np.float32)
    return StreamResampler(REALTIME_RATE, SPEECH_RATE).process(track, last=True)


@dataclass
class Heard:
    """One overlap in one condition: the gate's looks and the early features."""

    overlap: int
    looks: Looks
    features: dict[str, float] | None
    """``None``: the VAD heard no onset near the sound's."""
    early_at_ms: int | None
    """When an early rule would decide, from the sound's onset."""


class Listener:
    """The server's side: the denoiser, silero and the gate."""

    def __init__(self, stt: SpeechToText, first_look_ms: int, recheck_ms: int, early_ms: int) -> None:
        self.probabilities = ProbabilityLog()
        self.detector = VoiceActivityDetector(self.probabilities)
        self.denoiser = Denoiser()
        self.gate = Gate(stt, self.detector, recheck_ms)
        self.first_look_ms, self.early_ms = first_look_ms, early_ms

    def hear(self, index: int, clip: np.ndarray, onset: int, lead: np.ndarray, denoise: bool) -> Heard:
        """``clip`` as the server hears it; denoiser on, after ``lead`` (the background before it)."""
        if denoise:
            clip = self.denoiser.denoise(settled_state(self.denoiser, lead), clip)
        features, decided_at = self.early(clip, onset)
        return Heard(index, self.gate.look(clip, onset, self.first_look_ms), features, decided_at)

    def early(self, clip: np.ndarray, onset: int) -> tuple[dict[str, float] | None, int | None]:
        """The features of ``early_ms`` from the VAD's first window over its threshold near the onset."""
        self.probabilities.seen.clear()
        self.detector.detect(VADState(TurnDetection()), clip)
        p = np.array(self.probabilities.seen)
        threshold = TurnDetection().threshold
        first = next(
            (
                i
                for i, value in enumerate(p)
                if value >= threshold and (i + 1) * CHUNK_SAMPLES >= onset - SPEECH_RATE // 5
            ),
            None,
        )
        if first is None:
            return None, None
        start = first * CHUNK_SAMPLES
        windows = max(1, self.early_ms * SPEECH_RATE // 1000 // CHUNK_SAMPLES)
        within = p[first : first + windows]
        audio = clip[start : start + windows * CHUNK_SAMPLES]
        frames = audio[: audio.size // CHUNK_SAMPLES * CHUNK_SAMPLES].reshape(-1, CHUNK_SAMPLES)
        power = np.abs(np.fft.rfft(frames * np.hanning(CHUNK_SAMPLES), axis=1)) ** 2 + 1e-12
        flatness = np.exp(np.log(power).mean(1)) / power.mean(1)
        features = {
            "voiced_ms": float((within >= threshold).sum() * CHUNK_SAMPLES * 1000 / SPEECH_RATE),
            "mean_probability": float(within.mean()),
            "tail_probability": float(within[-3:].mean()),
            "rms_db": float(10 * np.log10(np.mean(audio.astype(np.float64) ** 2) + 1e-12)),
            "flatness": float(flatness.mean()),
        }
        return features, (start + windows * CHUNK_SAMPLES - onset) * 1000 // SPEECH_RATE


class ProbabilityLog:
    """Silero's network, keeping the probability of each window it is asked for."""

    def __init__(self) -> None:
        self._network = SileroNetwork()
        self.seen: list[float] = []

    def __call__(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        probabilities, state = self._network(windows, state)
        self.seen.extend(float(p) for p in probabilities)
        return probabilities, state


def clip_rng(seed: int, index: int, condition: Condition) -> np.random.Generator:
    """The noise draw of overlap ``index`` in ``condition``: the same with the denoiser off and on."""
    heard = f"{condition.path}/{condition.background}/{condition.snr_db}"
    return np.random.default_rng([seed, index, zlib.crc32(heard.encode())])


def clip_for(
    overlap: Overlap, condition: Condition, backgrounds: Backgrounds, rng: np.random.Generator
) -> tuple[np.ndarray, int, np.ndarray]:
    """The overlap padded, with its background at its SNR (against its own voiced power, or the
    set's speech level for a sound that is no speech), through its path; its onset; and the
    ``SETTLE_S`` of background before it, through the same path (the denoiser's lead)."""
    clip, onset = padded(overlap.audio)
    level = noise.voiced_power(overlap.audio) if overlap.kind in SPOKEN else backgrounds.speech_power
    track = None if condition.background is None else backgrounds.tracks[condition.background]
    clip, lead = with_background(clip, track, condition.snr_db, level, rng)
    return through(condition.path, clip), onset, through(condition.path, lead)


def ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def scores(heard: list[Heard], overlaps_: list[Overlap], decided: Callable[[Heard], bool]) -> dict[str, Any]:
    """Precision and recall of "this overlap is an interruption" where ``decided`` says it was taken."""
    taken = [h for h in heard if decided(h)]
    true = sum(overlaps_[h.overlap].real for h in taken)
    positives = sum(overlaps_[h.overlap].real for h in heard)
    return {
        "precision": ratio(true, len(taken)),
        "recall": ratio(true, positives),
        "true_positives": true,
        "false_positives": len(taken) - true,
    }


def pr(score: dict[str, Any]) -> str:
    return f"{score['precision']}/{score['recall']}"


def within(ms: int) -> Callable[[Heard], bool]:
    return lambda h: h.looks.real and h.looks.decided_at_ms is not None and h.looks.decided_at_ms <= ms


def table_row(heard: list[Heard], overlaps_: list[Overlap]) -> dict[str, Any]:
    by_kind = {kind: [h for h in heard if overlaps_[h.overlap].kind == kind] for kind in KINDS}
    decided_at = [
        h.looks.decided_at_ms for h in heard if overlaps_[h.overlap].real and h.looks.decided_at_ms is not None
    ]
    return {
        "overlaps": len(heard),
        "positives": sum(overlaps_[h.overlap].real for h in heard),
        f"within_{WITHIN_MS}ms": scores(heard, overlaps_, within(WITHIN_MS)),
        "final": scores(heard, overlaps_, lambda h: h.looks.real),
        "decided_at_ms": {"p50": percentile(decided_at, 50), "p95": percentile(decided_at, 95)},
        "false_barge_in_noise_alone": ratio(sum(h.looks.real for h in by_kind["noise"]), len(by_kind["noise"])),
        "taken": {kind: f"{sum(h.looks.real for h in hs)}/{len(hs)}" for kind, hs in by_kind.items()},
        "taken_before_onset": sum(h.looks.decided_at_ms is not None and h.looks.decided_at_ms < 0 for h in heard),
        "pending_at_end": sum(h.looks.pending for h in heard),
        "stt_looks": sum(len(h.looks.heard) for h in heard),
    }


def faster_stop(heard: list[Heard], overlaps_: list[Overlap], early_ms: int) -> dict[str, Any]:
    """The early rule chosen on the even half of each kind's overlaps, scored on the odd half
    beside the gate at ``early_ms`` and at its final decision."""
    seen: dict[str, int] = {}
    half = {}
    for index, overlap in enumerate(overlaps_):
        half[index] = seen.get(overlap.kind, 0) % 2
        seen[overlap.kind] = seen.get(overlap.kind, 0) + 1
    train = [h for h in heard if half[h.overlap] == 0]
    test = [h for h in heard if half[h.overlap] == 1]
    gate_train = scores(train, overlaps_, lambda h: h.looks.real)["precision"] or 0.0
    rule = best_rule([(h.features, overlaps_[h.overlap].real) for h in train], gate_train)
    at = [h.early_at_ms for h in test if rule(h.features) and h.early_at_ms is not None]
    rule_test = scores(test, overlaps_, lambda h: rule(h.features))
    gate_final = scores(test, overlaps_, lambda h: h.looks.real)
    return {
        "rule": rule.describe(),
        "chosen_for_precision_at_least": gate_train,
        "train": scores(train, overlaps_, lambda h: rule(h.features)),
        "test": {**rule_test, "decided_at_ms": {"p50": percentile(at, 50), "p95": percentile(at, 95)}},
        f"gate_test_within_{early_ms}ms": scores(test, overlaps_, within(early_ms)),
        "gate_test_final": gate_final,
        "safe_to_ship": (rule_test["precision"] or 0) >= (gate_final["precision"] or 0),
        "no_onset": sum(h.features is None for h in heard),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, seed=1)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke size: one voice, a few overlaps, one SNR, 4 s of babble of 3"
    )
    parser.add_argument("--snr-db", type=float, nargs="+", help="background noise SNRs (default 20 10 5; quick: 10)")
    parser.add_argument("--stationary", choices=sorted(noise.STATIONARY), default="pink", help="the stationary noise")
    parser.add_argument("--first-look-ms", type=int, default=150, help="the gate's min_duration_ms")
    parser.add_argument("--recheck-ms", type=int, default=RECHECK_MS)
    parser.add_argument("--early-ms", type=int, default=250, help="audio the faster-stop rule hears from the onset")
    parser.add_argument("--babble-talkers", type=options.positive_int, default=5)
    wer_table.add_arguments(parser)


def main(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    snrs = args.snr_db or ([10.0] if args.quick else [20.0, 10.0, 5.0])
    rng = np.random.default_rng(args.seed)
    tts, stt = TextToSpeech(), local_stt()
    made = overlaps(tts, rng, sizes)
    print(f"{len(made)} overlaps: " + ", ".join(f"{k} {sum(o.kind == k for o in made)}" for k in KINDS), flush=True)
    speech_power = float(np.median([noise.voiced_power(o.audio) for o in made if o.kind in SPOKEN]))
    talkers, seconds = (min(3, args.babble_talkers), 4.0) if args.quick else (args.babble_talkers, 30.0)
    backgrounds = Backgrounds(tts, rng, talkers, seconds, args.stationary, speech_power)
    listener = Listener(stt, args.first_look_ms, args.recheck_ms, args.early_ms)
    print(f"made in {time.perf_counter() - started:.0f} s", flush=True)
    rows: dict[str, dict[str, Any]] = {}
    everything: list[Heard] = []
    clean: list[Heard] = []
    for condition in [] if args.wer_only else conditions(snrs, args.stationary):
        heard = [
            listener.hear(i, *clip_for(o, condition, backgrounds, clip_rng(args.seed, i, condition)), condition.denoise)
            for i, o in enumerate(made)
        ]
        everything += heard
        clean += heard if condition.background is None else []
        rows[condition.name] = row = table_row(heard, made)
        print(
            f"{condition.name}: within {WITHIN_MS} ms P/R {pr(row[f'within_{WITHIN_MS}ms'])}, "
            f"final {pr(row['final'])}, decided p50/p95 {row['decided_at_ms']}, "
            f"taken {row['taken']}, pending {row['pending_at_end']} ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    report: dict[str, Any] = {
        "overlaps": {kind: sum(o.kind == kind for o in made) for kind in KINDS},
        "seed": args.seed,
        "snr_db": snrs,
        "stationary": args.stationary,
        "first_look_ms": args.first_look_ms,
        "recheck_ms": args.recheck_ms,
        "denoiser_lead_s": SETTLE_S,
        "conditions": rows,
        "faster_stop": {}
        if args.wer_only
        else {
            "all_conditions": faster_stop(everything, made, args.early_ms),
            "no_background": faster_stop(clean, made, args.early_ms),
        },
    }
    for pool, stop in report["faster_stop"].items():
        print(
            f"faster stop, {pool}: {stop['rule']}: test P/R {pr(stop['test'])}, gate within {args.early_ms} ms "
            f"{pr(stop[f'gate_test_within_{args.early_ms}ms'])}, final {pr(stop['gate_test_final'])}",
            flush=True,
        )
    if not args.no_wer:
        report["wer"] = wer_table.report(args, stt, listener.denoiser, tts, backgrounds.tracks, snrs, rng)
    report["stt_look_ms"] = {"p50": percentile(listener.gate.stt_ms, 50), "p95": percentile(listener.gate.stt_ms, 95)}
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report))
