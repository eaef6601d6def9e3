"""What the load test's sessions say, and how an answer is traced back to the question.

Two sets, picked by the model the server names in ``session.created``:

- ``spoken``: questions about capitals, spoken by Piper once and cached on disk; an answer or
  transcript names a question by its country or city;
- ``tones``: for the synthetic engines (``cluster/loadtest.yaml``), question N is a tone that
  the synthetic STT reads back, and the scripted answer says ``Answer N``; voiced (for the
  real silero VAD, ``synthetic.vad: silero``), a sentence spoken by Piper under each tone:
  silero hears the speech, the STT still reads the tone, which outweighs it in the spectrum.

Each set has its backchannel too, a hum said over an answer: Piper's "Mm hmm." (spelled so:
tiny.en hears Piper's "Mm-hmm." as words), or the synthetic STT's backchannel tone; and each
question paused: said with ``PAUSE_S`` of silence mid-sentence (``PromptSet.paused``), as a
person who stops to think of a word (a server must wait for the rest, not cut the speaker off).
"""

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from handlers.assets import cache_dir
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, pcm16_to_float, resample
from handlers.synthetic import BACKCHANNEL_TEXT, answer_number, backchannel_tone, question_text, question_tone

CAPITALS = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Italy", "Rome"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("Egypt", "Cairo"),
    ("Russia", "Moscow"),
    ("Canada", "Ottawa"),
]
TONE_QUESTIONS = 100
TONE_SECONDS = 1.2
VOICE_UNDER_TONES = "Here is my question for you."
VOICE_LEVEL = 0.5
BACKCHANNEL = "Mm hmm."
BACKCHANNEL_SECONDS = 0.6
PAUSE_S = 0.8
"""A pause mid-question, in the 600-900 ms that cut people off (LiveKit Agents #3373)."""
SPOKEN_BEFORE_PAUSE = "What is the capital of"
LAST_WORD_S = 0.25
"""A paused question goes on for at least this long after its pause."""


@dataclass(frozen=True)
class Prompt:
    number: int
    text: str
    pcm16: bytes
    """24 kHz mono PCM16, as a client sends it."""
    resumes_at_s: float | None = None
    """A paused question's: where its speech goes on after the pause."""

    @property
    def seconds(self) -> float:
        return len(self.pcm16) / (2 * REALTIME_RATE)


class PromptSet:
    """The questions of one kind, and which of them a text names."""

    def __init__(
        self,
        name: str,
        prompts: list[Prompt],
        marks: list[tuple[str, ...]],
        backchannel: Prompt | None = None,
        paused: list[Prompt] | None = None,
    ) -> None:
        self.name = name
        self.backchannel = backchannel
        """What a session says over an answer to show it listens: it must not interrupt."""
        self.paused = paused or []
        """Each question (same number and text) with a pause mid-sentence."""
        self.history_free = name == "tones"
        """Whether an answer is the same whatever came before it in the conversation."""
        self.answers_alike = name == "tones"
        """Whether every answer has the same length (the scripted ones do)."""
        self.prompts = prompts
        self._marks = marks

    def named_in(self, text: str) -> set[int]:
        """Numbers of the questions ``text`` names (an answer or a transcript)."""
        if self.name == "tones":
            number = answer_number(text)
            return set() if number is None else {number}
        words = set(re.findall(r"[a-z]+", text.lower()))
        return {i for i, marks in enumerate(self._marks) if words & set(marks)}


def spoken(texts: dict[str, str]) -> dict[str, bytes]:
    """Each text spoken by Piper, by name (24 kHz PCM16, synthesised once into the cache)."""
    folder = cache_dir() / "loadtest-prompts"
    folder.mkdir(parents=True, exist_ok=True)
    speaker = None
    for name, text in texts.items():
        path = folder / f"{name}.pcm"
        if not path.exists():
            if speaker is None:
                from handlers.tts import TextToSpeech

                speaker = TextToSpeech()
            _write_atomically(path, b"".join(chunk.pcm16 for chunk in speaker.synthesize(text)))
    return {name: (folder / f"{name}.pcm").read_bytes() for name in texts}


def spoken_prompts() -> PromptSet:
    """Capital questions spoken by Piper."""
    texts = {country.lower(): f"{SPOKEN_BEFORE_PAUSE} {country}?" for country, _ in CAPITALS}
    audio = spoken({**texts, "backchannel": BACKCHANNEL, "before-pause": SPOKEN_BEFORE_PAUSE})
    prompts = [Prompt(number, texts[name], audio[name]) for number, name in enumerate(texts)]
    paused = [Prompt(p.number, p.text, *with_pause(p.pcm16, len(audio["before-pause"]) // 2)) for p in prompts]
    backchannel = Prompt(-1, BACKCHANNEL, audio["backchannel"])
    marks: list[tuple[str, ...]] = [(country.lower(), city.lower()) for country, city in CAPITALS]
    return PromptSet("spoken", prompts, marks, backchannel, paused)


def tone_prompts(voiced: bool = False) -> PromptSet:
    voices = spoken({"voice-under-tones": VOICE_UNDER_TONES, "backchannel": BACKCHANNEL}) if voiced else {}
    voice = pcm16_to_float(voices["voice-under-tones"]) if voiced else None
    prompts = []
    for n in range(TONE_QUESTIONS):
        seconds = TONE_SECONDS if voice is None else len(voice) / REALTIME_RATE
        prompts.append(Prompt(n, question_text(n), _under(question_tone(n, seconds), voice)))
    hum = pcm16_to_float(voices["backchannel"]) if voiced else None
    seconds = BACKCHANNEL_SECONDS if hum is None else len(hum) / REALTIME_RATE
    backchannel = Prompt(-1, BACKCHANNEL_TEXT, _under(backchannel_tone(seconds), hum))
    paused = [Prompt(p.number, p.text, *with_pause(p.pcm16, len(p.pcm16) // 4)) for p in prompts]  # mid-tone
    return PromptSet("tones", prompts, [], backchannel, paused)


def with_pause(speech: bytes, near_sample: int) -> tuple[bytes, float]:
    """``speech`` (24 kHz PCM16) with ``PAUSE_S`` of silence put in at its quietest 20 ms
    within 20 % of ``near_sample`` (where the words before the pause, said alone, end: so
    between two words), and at least ``LAST_WORD_S`` before its last sound: said alone, the
    first words last longer than within the sentence, and the quietest point was once after
    the last word ("Italy"), which left no second half. Also the second the speech goes on."""
    samples = pcm16_to_float(speech)
    loudness = np.convolve(np.abs(samples), np.ones(480) / 480, mode="same")
    last_sound = int(np.flatnonzero(loudness > 0.1 * loudness.max())[-1])
    high = min(len(samples), int(1.2 * near_sample) + 1, last_sound - int(LAST_WORD_S * REALTIME_RATE))
    low = min(int(0.8 * near_sample), high - 1)
    cut = 2 * (low + int(np.argmin(loudness[low:high])))
    pause = bytes(2 * int(PAUSE_S * REALTIME_RATE))
    return speech[:cut] + pause + speech[cut:], (cut + len(pause)) / (2 * REALTIME_RATE)


def _under(tone: np.ndarray, voice: np.ndarray | None) -> bytes:
    """The tone as a client sends it (24 kHz PCM16), with the voice under it if any."""
    sent = resample(tone, SPEECH_RATE, REALTIME_RATE)
    if voice is not None:
        sent[: len(voice)] += VOICE_LEVEL * voice[: len(sent)]
    return float_to_pcm16(sent)


def prompts_for(model: str, voiced_tones: bool = False) -> PromptSet:
    return tone_prompts(voiced_tones) if model == "synthetic" else spoken_prompts()


def _write_atomically(path: Path, data: bytes) -> None:
    staging = path.with_suffix(".partial")
    staging.write_bytes(data)
    staging.rename(path)
