"""What the interruption rule makes of backchannels and real interruptions, as STT hears them.

``python -m loadtest.bench_backchannel_words`` has Piper say each phrase of ``BACKCHANNELS``
and ``INTERRUPTIONS`` at three paces and three noise scales (Piper's own variation), each
clean and band-limited to a phone line with hiss, transcribes every rendering with the STT
settings of ``cluster/local.yaml`` and applies ``holds_a_real_word``. It prints one JSON
object: per phrase, how many renderings were taken for an interruption and what STT heard.
Only the words are measured here (no Ray, no VAD): ``make bench-turns`` runs them through
the served pipeline.
"""

import argparse
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np

from deployments.realtime.interruptions import holds_a_real_word
from handlers.audio import SPEECH_RATE, resample
from handlers.stt import SpeechToText, STTConfig
from handlers.tts import TextToSpeech

BACKCHANNELS = ["Mm-hmm.", "Mm hmm.", "Mmm hmm.", "Mhm.", "Hmm.", "Uh-huh.", "Yeah.", "Right.", "Okay.", "I see."]
INTERRUPTIONS = [
    *("Stop.", "Wait.", "No.", "What?", "Hold on.", "Wait, stop.", "Stop, please.", "Excuse me."),
    *("Hey, no, no.", "Sorry?", "But why?", "Tell me about cats."),
]
PACES = (0.8, 1.0, 1.3)
NOISE_SCALES = (0.333, 0.667, 1.0)
PHONE_RATE = 8000


def renderings(tts: TextToSpeech, text: str, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """``text`` as 16 kHz audio, once per pace and noise scale, clean and as over a phone."""
    from piper import SynthesisConfig

    for pace in PACES:
        for noise in NOISE_SCALES:
            config = SynthesisConfig(length_scale=pace, noise_scale=noise)
            chunks = list(tts._voice.synthesize(text, config))
            speech = resample(np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate, SPEECH_RATE)
            yield speech
            phone = resample(resample(speech, SPEECH_RATE, PHONE_RATE), PHONE_RATE, SPEECH_RATE)
            phone = np.pad(phone, (0, max(0, speech.size - phone.size)))[: speech.size]
            yield (0.5 * phone + rng.normal(0, 0.002, speech.size)).astype(np.float32)


@dataclass
class Phrase:
    kind: str
    renderings: int
    interrupts: int
    """Renderings the rule took for an interruption."""
    heard: list[str]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tts = TextToSpeech()
    stt = SpeechToText(STTConfig(beam_size=1, cpu_threads=2, context_padding_s=3.0))
    rng = np.random.default_rng(args.seed)
    report: dict[str, Phrase] = {}
    for kind, phrases in (("backchannel", BACKCHANNELS), ("interruption", INTERRUPTIONS)):
        for said in phrases:
            heard = [stt.transcribe(audio) for audio in renderings(tts, said, rng)]
            report[said] = Phrase(kind, len(heard), sum(map(holds_a_real_word, heard)), sorted(set(heard)))
            print(f"{kind} {said!r}: {report[said].interrupts}/{len(heard)} interrupt", flush=True)
    totals = {
        kind: {
            field: sum(getattr(p, field) for p in report.values() if p.kind == kind)
            for field in ("renderings", "interrupts")
        }
        for kind in ("backchannel", "interruption")
    }
    print(json.dumps({"totals": totals, "phrases": {said: asdict(p) for said, p in report.items()}}))


if __name__ == "__main__":
    main()
