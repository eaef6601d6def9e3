"""What the interruption rule makes of backchannels and real interruptions, as STT hears them.

``s2s-bench backchannel-words`` has Piper say each phrase of ``BACKCHANNELS``
and ``INTERRUPTIONS`` at three paces and three noise scales (Piper's own variation), each
clean and band-limited to a phone line with hiss. Each rendering goes through silero at
microphone pace, and its words are looked at when the interruption gate looks at them: once
the speech has lasted the first-look duration (``--first-look-ms``, the gate's
``min_duration_ms``), again every ``RECHECK_MS`` (``--recheck-ms``) while they are only
backchannels, and at its end; each look transcribes the utterance so far with
``cluster/local.yaml``'s STT settings as the gate asks (``over_answer``: after the hums
prompt, ``--over-answer-prompt``) and applies ``holds_a_real_word``. A look at a prefix
hears other words than one at the whole: "Mm hmm." cut short is "in them".

It prints one JSON object: per first-look duration and phrase, how many renderings were
taken for an interruption, and for real interruptions where the deciding look was (ms of
speech from the first voiced frame; one STT call more decides). Only the words are measured
here (no Ray): ``make bench-turns`` runs them through the served pipeline.
"""

import argparse
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from deployments.realtime.spoken_words import holds_a_real_word
from deployments.realtime.turn_taking.interruptions import RECHECK_MS
from handlers.audio import SPEECH_RATE, resample
from handlers.stt import HUMS, SpeechToText, STTConfig
from handlers.tts import TextToSpeech
from handlers.utterance import VADSession
from handlers.vad import SpeechStarted, SpeechStopped, VoiceActivityDetector, ms_to_samples, samples_to_ms
from loadtest import options
from loadtest.stats import percentiles

BACKCHANNELS = ["Mm-hmm.", "Mm hmm.", "Mmm hmm.", "Mhm.", "Hmm.", "Uh-huh.", "Yeah.", "Right.", "Okay.", "I see."]
INTERRUPTIONS = [
    *("Stop.", "Wait.", "No.", "What?", "Hold on.", "Wait, stop.", "Stop, please.", "Excuse me."),
    *("Hey, no, no.", "Sorry?", "But why?", "Tell me about cats."),
]
PACES = (0.8, 1.0, 1.3)
NOISE_SCALES = (0.333, 0.667, 1.0)
PHONE_RATE = 8000
FRAME = SPEECH_RATE // 50
"""20 ms: the VAD takes the audio as a microphone sends it."""
VOICED_RMS = 0.01


def renderings(tts: TextToSpeech, text: str, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``text`` as 16 kHz audio, once per pace and noise scale, clean and as over a phone."""
    from piper import SynthesisConfig

    for pace in PACES:
        for noise in NOISE_SCALES:
            config = SynthesisConfig(length_scale=pace, noise_scale=noise)
            speech = tts.whole(text, SPEECH_RATE, config)
            yield speech
            phone = resample(resample(speech, SPEECH_RATE, PHONE_RATE), PHONE_RATE, SPEECH_RATE)
            phone = np.pad(phone, (0, max(0, speech.size - phone.size)))[: speech.size]
            yield (0.5 * phone + rng.normal(0, 0.002, speech.size)).astype(np.float32)


@dataclass
class Looks:
    """The gate's looks at one rendering's words: whether one found a real word, and where."""

    real: bool
    decided_at_ms: int | None
    """Audio heard from the onset (the sound's first voiced frame) when the deciding look was
    taken: negative when a sound before the onset (noise) was taken."""
    heard: list[str]
    pending: bool = False
    """A candidate was still undecided when the audio ended (its speech never stopped): an
    answer would have stayed paused."""


LEAD_S, TAIL_S = 0.5, 1.0
"""Silence before a rendering (the VAD's start) and after it (for its end to be heard)."""


def onset(speech: np.ndarray) -> int:
    """The first 10 ms frame of ``speech`` louder than ``VOICED_RMS``."""
    frames = speech[: speech.size // 160 * 160].reshape(-1, 160)
    return int(np.argmax(np.sqrt((frames**2).mean(1)) > VOICED_RMS)) * 160


def padded(speech: np.ndarray) -> tuple[np.ndarray, int]:
    """``speech`` between ``LEAD_S`` and ``TAIL_S`` of silence, and the sample of its onset there."""
    lead = int(LEAD_S * SPEECH_RATE)
    silence = np.zeros(int(TAIL_S * SPEECH_RATE), np.float32)
    return np.concatenate([np.zeros(lead, np.float32), speech, silence]), lead + onset(speech)


class Gate:
    """The gate's look schedule on real VAD events and real transcripts."""

    def __init__(self, stt: SpeechToText, detector: VoiceActivityDetector, recheck_ms: int) -> None:
        self._stt = stt
        self._detector = detector
        self._recheck_ms = recheck_ms
        self.stt_ms: list[float] = []

    def _words(self, audio: np.ndarray, heard: list[str]) -> bool:
        started = time.perf_counter()
        heard.append(self._stt.transcribe(audio, over_answer=True))
        self.stt_ms.append((time.perf_counter() - started) * 1000)
        return holds_a_real_word(heard[-1])

    def look(self, audio: np.ndarray, onset_sample: int, first_look_ms: int) -> Looks:
        """``audio`` fed to the VAD as a microphone sends it, while an answer plays throughout:
        each candidate's words looked at as the gate looks, until one is taken for an
        interruption (a dismissed candidate leaves the next one to be judged afresh)."""
        session = VADSession(self._detector)
        heard: list[str] = []
        look_at: int | None = None
        for at in range(0, audio.size, FRAME):
            fed = at + FRAME
            for event, utterance in session.feed(audio[at:fed]):
                if isinstance(event, SpeechStarted) and look_at is None:
                    look_at = event.start_sample + ms_to_samples(first_look_ms)
                elif isinstance(event, SpeechStopped) and look_at is not None:
                    long_enough = event.end_sample - event.start_sample >= ms_to_samples(first_look_ms)
                    if utterance is not None and long_enough and self._words(utterance, heard):
                        return Looks(True, samples_to_ms(fed - onset_sample), heard)
                    look_at = None
            if look_at is not None and fed >= look_at:
                if self._words(session.buffer.peek(), heard):
                    return Looks(True, samples_to_ms(fed - onset_sample), heard)
                look_at = fed + ms_to_samples(self._recheck_ms)
        return Looks(False, None, heard, pending=look_at is not None)


@dataclass
class Phrase:
    kind: str
    renderings: int = 0
    interrupts: int = 0
    """Renderings the gate took for an interruption."""
    decided_at_ms: list[float] = field(default_factory=list)
    heard: set[str] = field(default_factory=set)


def local_stt(over_answer_prompt: str = HUMS) -> SpeechToText:
    """STT as ``cluster/local.yaml`` sets it up (greedy, 2 threads, a 3 s window)."""
    return SpeechToText(
        STTConfig(beam_size=1, cpu_threads=2, context_padding_s=3.0, over_answer_prompt=over_answer_prompt)
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, seed=1)
    parser.add_argument("--first-look-ms", type=int, nargs="+", default=[150, 300])
    parser.add_argument("--recheck-ms", type=int, default=RECHECK_MS, help="what if the gate looked again this often")
    parser.add_argument("--over-answer-prompt", default=HUMS, help="Whisper's previous text for a look ('': none)")
    parser.add_argument("--phrases", type=options.positive_int, help="only the first this many of each kind")


def main(args: argparse.Namespace) -> None:
    tts = TextToSpeech()
    gate = Gate(local_stt(args.over_answer_prompt), VoiceActivityDetector(), args.recheck_ms)
    rng = np.random.default_rng(args.seed)
    said_here = list(phrases(args.phrases))
    report = {ms: {said: Phrase(kind) for kind, said in said_here} for ms in args.first_look_ms}
    for kind, said in said_here:
        for speech in renderings(tts, said, rng):
            for ms in args.first_look_ms:
                looks, phrase = gate.look(*padded(speech), ms), report[ms][said]
                phrase.renderings += 1
                phrase.interrupts += looks.real
                phrase.heard.update(looks.heard)
                if looks.decided_at_ms is not None:
                    phrase.decided_at_ms.append(looks.decided_at_ms)
        print(kind, repr(said), {ms: report[ms][said].interrupts for ms in args.first_look_ms}, flush=True)
    result: dict[str, object] = {"stt_ms": percentiles(gate.stt_ms)}
    for ms, by_phrase in report.items():
        backchannels = [p for p in by_phrase.values() if p.kind == "backchannel"]
        interruptions = [p for p in by_phrase.values() if p.kind == "interruption"]
        result[f"first_look_{ms}ms"] = {
            "backchannels_taken": sum(p.interrupts for p in backchannels),
            "backchannels_said": sum(p.renderings for p in backchannels),
            "interruptions_missed": sum(p.renderings - p.interrupts for p in interruptions),
            "interruptions_said": sum(p.renderings for p in interruptions),
            "interruption_decided_at_ms": percentiles([at for p in interruptions for at in p.decided_at_ms]),
            "phrases": {
                said: {**asdict(p), "heard": sorted(p.heard), "decided_at_ms": percentiles(p.decided_at_ms)}
                for said, p in by_phrase.items()
            },
        }
    print(json.dumps(result))


def phrases(limit: int | None = None) -> Iterator[tuple[str, str]]:
    yield from (("backchannel", said) for said in BACKCHANNELS[:limit])
    yield from (("interruption", said) for said in INTERRUPTIONS[:limit])
