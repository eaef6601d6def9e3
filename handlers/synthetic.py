"""Synthetic engines for load-testing the serving layer: never the default, never a model.

They stand in for the four models with the same interfaces, so that the real ingress, cancel
scopes and Serve plumbing can carry hundreds of sessions on a machine where the real models
would carry a handful (``cluster/loadtest.yaml``):

- a question is a pure tone whose frequency encodes its number (``question_tone``);
- the VAD is silero's own segmenter driven by signal energy instead of the network;
- the STT reads the tone's frequency back (``Question 17.``), and a hum below them all as a
  backchannel (``backchannel_tone``: ``Mm-hmm.``);
- the LLM streams a scripted answer that names the question (``Answer 17: ...``) at a set
  token rate;
- the TTS emits a tone as long as the text would take to say, and holds its replica for a set
  time per sentence (one sentence at a time, as a GPU would).
"""

import asyncio
import functools
import re
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterator
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from handlers.audio import SPEECH_RATE, float_to_pcm16
from handlers.llm import ChatMessage
from handlers.tools import FunctionCallArguments, FunctionCallStarted, FunctionSpec, LLMOutput, ToolUse, new_call_id
from handlers.tts import SpeechAudio
from handlers.vad import CHUNK_SAMPLES, VoiceActivityDetector

BASE_HZ = 400.0
STEP_HZ = 25.0
MAX_QUESTION = 120
"""Questions 0..MAX_QUESTION map to 400..3400 Hz, well inside 16 kHz audio."""
BACKCHANNEL_STEPS = -8
"""The hum ``BACKCHANNEL_STEPS`` steps below question 0 (200 Hz): no question's tone."""
BACKCHANNEL_TEXT = "Mm-hmm."
TONE_LEVEL = 0.3
ENERGY_THRESHOLD = 0.01
"""RMS of a 32 ms window above which the energy VAD hears speech."""
TONE_WINDOW = 8192
"""Samples read at a time (0.5 s at 16 kHz: 2 Hz bins, for steps of 25 Hz): one FFT per
half second of the utterance, so a synthetic engine costs next to nothing."""
MIN_TONE = SPEECH_RATE // 16
"""A shorter sound is no tone (16 Hz bins: a peak within half a step of its tone)."""
QUIET_GAP = SPEECH_RATE // 20
"""Quiet that parts two tones: each is read from its own start (a window across the
silence of a pause mixes two phases of the tone and misreads it)."""
_QUESTION = re.compile(r"Question (\d+)\.")


class SyntheticConfig(BaseModel):
    """Settings of the synthetic engines (``AppConfig.synthetic``)."""

    model_config = ConfigDict(extra="forbid")

    answer_words: int = Field(24, ge=1)
    """Words in each scripted answer (after ``Answer N:``), in sentences of eight."""
    tokens_per_s: float = Field(40.0, gt=0)
    """LLM decoding speed of one stream."""
    speech_s_per_word: float = Field(0.3, gt=0)
    """Length of the TTS tone per word of text."""
    tts_hold_s_per_sentence: float = Field(0.05, ge=0)
    """Time a TTS replica is busy per sentence; one sentence at a time per replica."""
    vad: Literal["energy", "silero"] = "energy"
    """``silero``: the real VAD on the synthetic questions, which must then carry speech
    (``s2s-loadtest --voiced-tones`` speaks a sentence under each tone); ``energy`` hears
    any tone."""
    llm_load_s: float = Field(0.0, ge=0)
    """Time the scripted LLM takes to load, as a real engine takes seconds to minutes (for
    testing start-up and readiness)."""


def question_tone(number: int, seconds: float, rate: int = SPEECH_RATE) -> np.ndarray:
    """The spoken form of question ``number``: a float32 tone the synthetic STT reads back."""
    if not 0 <= number <= MAX_QUESTION:
        raise ValueError(f"question numbers go from 0 to {MAX_QUESTION}, not {number}")
    return _tone(BASE_HZ + STEP_HZ * number, seconds, rate)


def backchannel_tone(seconds: float, rate: int = SPEECH_RATE) -> np.ndarray:
    """A backchannel's spoken form: a hum the synthetic STT hears as ``BACKCHANNEL_TEXT``."""
    return _tone(BASE_HZ + STEP_HZ * BACKCHANNEL_STEPS, seconds, rate)


def _tone(hz: float, seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (TONE_LEVEL * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def question_text(number: int) -> str:
    return f"Question {number}."


def answer_number(text: str) -> int | None:
    """The question a scripted answer (or transcript) names, if any."""
    match = re.search(r"(?:Answer|Question) (\d+)", text)
    return int(match.group(1)) if match else None


class EnergyNetwork:
    """The speech network's interface (probability per window) from signal energy."""

    def __call__(self, windows: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rms = np.sqrt(np.mean(np.square(windows[:, -CHUNK_SAMPLES:]), axis=1))
        return (rms > ENERGY_THRESHOLD).astype(np.float32), state


class EnergyVoiceDetector(VoiceActivityDetector):
    """The real segmenter (start, pause, resume, stop, too short) on an energy detector."""

    def __init__(self) -> None:
        super().__init__(EnergyNetwork())


class ToneTranscriber:
    """Reads question numbers back from their tones' frequencies."""

    def transcribe(self, audio: np.ndarray, over_answer: bool = False) -> str:
        """Every tone of ``audio`` in order, as a real STT hears every word: a hum and then
        a question in one utterance is "Mm-hmm. Question 7.", so the interruption gate
        hears the question, as it would hear words after a real "mm-hmm". ``over_answer``:
        as :meth:`handlers.stt.SpeechToText.transcribe` (a tone is no hum)."""
        loud = np.flatnonzero(np.abs(audio) > ENERGY_THRESHOLD)
        if loud.size == 0:
            return ""
        gaps = np.flatnonzero(np.diff(loud) > QUIET_GAP)
        heard: list[str] = []
        for start, end in zip(loud[np.r_[0, gaps + 1]], loud[np.r_[gaps, -1]], strict=True):
            for window in range(start, end + 2 - MIN_TONE, TONE_WINDOW):
                text = _tone_text(audio[window : min(window + TONE_WINDOW, end + 1)])
                if text and (not heard or heard[-1] != text):
                    heard.append(text)
        return " ".join(heard)


def _tone_text(window: np.ndarray) -> str:
    """What one window's strongest tone says ("" for none of ours: a silence, a pause)."""
    spectrum = np.abs(np.fft.rfft(window))
    peak_hz = float(np.argmax(spectrum)) * SPEECH_RATE / window.size
    number = round((peak_hz - BASE_HZ) / STEP_HZ)
    if number == BACKCHANNEL_STEPS:
        return BACKCHANNEL_TEXT
    return question_text(number) if 0 <= number <= MAX_QUESTION else ""


class EveryPauseEnds:
    """The end-of-turn model's stand-in, a call already answered: every pause ends the turn
    (``semantic_vad`` then ends turns at its short pause). It costs nothing, so it runs in
    the ingress, with no deployment of its own."""

    def __await__(self) -> Generator[Any, None, float]:
        return asyncio.sleep(0, 1.0).__await__()

    def cancel(self) -> None:
        """Nothing runs anywhere to stop."""


class ScriptedLanguageModel:
    """Streams ``Answer N: word word ...`` for the last ``Question N.`` at a set token rate."""

    def __init__(self, config: SyntheticConfig) -> None:
        self.config = config
        self._running = 0
        time.sleep(config.llm_load_s)  # loading, as a real engine does in its constructor

    async def stream(
        self,
        messages: list[ChatMessage],
        is_stale: Callable[[], bool] = lambda: False,
        request_id: str | None = None,
        max_tokens: int | None = None,
        tools: ToolUse | None = None,
        answer_tokens: int | None = None,
    ) -> AsyncGenerator[LLMOutput, None]:
        """The scripted answer (its length is the script's: ``answer_tokens`` bounds real
        models only); when ``tools`` force a call, a call with no arguments to the function
        named (or the first) instead, so tool round trips can be load-tested too."""
        if tools is not None and tools.choice != "auto":
            function = tools.choice if isinstance(tools.choice, FunctionSpec) else tools.functions[0]
            yield FunctionCallStarted(0, new_call_id(), function.name)
            yield FunctionCallArguments(0, "{}")
            return
        last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        match = _QUESTION.search(last)
        words = [f"Answer {match.group(1) if match else 'unknown'}:"]
        words += [
            "word." if (i + 1) % 8 == 0 or i + 1 == self.config.answer_words else "word"
            for i in range(self.config.answer_words)
        ]
        words = words[:max_tokens]
        self._running += 1
        try:
            for index, word in enumerate(words):
                await asyncio.sleep(1 / self.config.tokens_per_s)  # the decoding of one token
                if is_stale():
                    return
                yield word if index == 0 else " " + word
        finally:
            self._running -= 1

    async def prefill(self, messages: list[ChatMessage]) -> None:
        """Nothing to compute ahead: a script has no prompt cache."""

    async def message_ends(self, text: str) -> float:
        """Every message is whole: a script reads no words."""
        return 1.0

    def fit(self, messages: list[ChatMessage]) -> int:
        """Every prompt fits: a script has no context."""
        return 0

    def unfinished_requests(self) -> int:
        return self._running

    async def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


class ToneSpeaker:
    """A tone as long as the text takes to say; one sentence at a time per replica."""

    def __init__(self, config: SyntheticConfig, output_rate: int) -> None:
        self.config = config
        self.output_rate = output_rate
        self._device = threading.Lock()

    def synthesize(self, text: str, is_stale: Callable[[], bool] = lambda: False) -> Iterator[SpeechAudio]:
        for sentence in re.findall(r"[^.!?]+[.!?]*", text):
            if is_stale() or not sentence.strip():
                return
            with self._device:
                time.sleep(self.config.tts_hold_s_per_sentence)
            seconds = len(sentence.split()) * self.config.speech_s_per_word
            yield SpeechAudio(_answer_tone(int(seconds * self.output_rate), self.output_rate), self.output_rate)


@functools.lru_cache(maxsize=64)
def _answer_tone(samples: int, rate: int) -> bytes:
    """The TTS tone of this length, made once: answers repeat a few lengths."""
    t = np.arange(samples) / rate
    return float_to_pcm16((TONE_LEVEL * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32))
