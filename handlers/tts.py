"""Text-to-speech with Piper, streamed sentence by sentence.

Piper yields one audio chunk per sentence; between chunks the handler checks
``is_stale()`` so a barge-in stops synthesis at the next sentence boundary instead of
finishing the paragraph. Audio comes out as PCM16 at the configured output rate
(24 kHz, the Realtime protocol's rate, by default), resampled with soxr.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from handlers.audio import REALTIME_RATE, float_to_pcm16, resample

if TYPE_CHECKING:
    from piper import SynthesisConfig


class TTSConfig(BaseModel):
    voice: str | None = None
    """Path to a Piper ``.onnx`` voice (its ``.onnx.json`` beside it); ``None``: bundled joe."""
    output_rate: int = REALTIME_RATE
    length_scale: float | None = None
    """Speaking pace: > 1 slower, < 1 faster; ``None`` keeps the voice's own."""
    use_cuda: bool = False


@dataclass(frozen=True)
class SpeechAudio:
    pcm16: bytes
    sample_rate: int


class TextToSpeech:
    def __init__(self, config: TTSConfig | None = None) -> None:
        from piper import PiperVoice

        self.config = config or TTSConfig()
        voice = self.config.voice
        if voice is None:
            from handlers.assets import piper_voice_path

            voice = piper_voice_path()
        self._voice = PiperVoice.load(voice, use_cuda=self.config.use_cuda)

    def synthesize(self, text: str, is_stale: Callable[[], bool] = lambda: False) -> Iterator[SpeechAudio]:
        """Yield one PCM16 chunk per sentence of ``text``; nothing for empty text."""
        from piper import SynthesisConfig

        if not text.strip():
            return
        chunks = iter(self._voice.synthesize(text, SynthesisConfig(length_scale=self.config.length_scale)))
        # Checked before asking Piper for the next sentence (saves its compute) and after
        # (the flip may land while it synthesises).
        while not is_stale():
            chunk = next(chunks, None)
            if chunk is None or is_stale():
                return
            samples = resample(chunk.audio_float_array, chunk.sample_rate, self.config.output_rate)
            yield SpeechAudio(float_to_pcm16(samples), self.config.output_rate)

    def whole(self, text: str, rate: int, style: "SynthesisConfig") -> np.ndarray:
        """All of ``text`` as float32 audio at ``rate``, with Piper's pace and variation set by
        ``style``: for benches and tests that choose them (serving streams ``synthesize``)."""
        chunks = list(self._voice.synthesize(text, style))
        return resample(np.concatenate([c.audio_float_array for c in chunks]), chunks[0].sample_rate, rate)
