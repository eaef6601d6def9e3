"""End-of-turn detection with Smart Turn v3.2 (pipecat-ai/smart-turn, BSD 2-Clause, Daily).

An 8 MB audio classifier (a Whisper-tiny encoder with a linear head): given the end of an
utterance it says how likely the speaker has finished their turn, from prosody (it hears
no words). ``semantic_vad`` asks it at each pause: a complete turn ends at once, an
incomplete one waits for more speech.

Its input, as its reference code computes it: the last 8 s of 16 kHz audio, zeros on the
left when shorter, as Whisper's normalised log-mel features (``transformers``'
``WhisperFeatureExtractor`` with an 8 s chunk: 80 mels x 800 frames). ``model`` is a local
ONNX file or ``<hub repo>/<file>`` (``pipecat-ai/smart-turn-v3/smart-turn-v3.2-gpu.onnx``);
the default is the CPU build shipped inside the ``pipecat-ai`` wheel.
"""

from importlib import metadata

import numpy as np
from pydantic import BaseModel, Field

from handlers.audio import SPEECH_RATE

WINDOW_S = 8
"""The model hears at most the utterance's last 8 s."""


class TurnEndConfig(BaseModel):
    model: str | None = None
    """Local ONNX path or ``<hub repo>/<file>``; ``None``: the CPU build in ``pipecat-ai``."""
    device: str = "cpu"
    cpu_threads: int = Field(1, ge=1)


def bundled_model_path() -> str:
    """The file in the installed ``pipecat-ai`` distribution (found, not imported: we use
    nothing else of the package)."""
    return str(
        metadata.distribution("pipecat-ai").locate_file("pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx")
    )


def _model_path(model: str | None) -> str:
    if model is None:
        return bundled_model_path()
    if model.endswith(".onnx") and model.count("/") >= 2 and not model.startswith(("/", ".")):
        from huggingface_hub import hf_hub_download

        repo, _, filename = model.rpartition("/")
        return str(hf_hub_download(repo, filename))
    return model


class SmartTurn:
    """Scores utterances, one network run each (a batch of 8 ran 7x slower per row here)."""

    def __init__(self, config: TurnEndConfig | None = None) -> None:
        import onnxruntime
        from transformers import WhisperFeatureExtractor

        self.config = config or TurnEndConfig()
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = self.config.cpu_threads
        providers = ["CUDAExecutionProvider"] if self.config.device == "cuda" else ["CPUExecutionProvider"]
        self._session = onnxruntime.InferenceSession(
            _model_path(self.config.model), sess_options=options, providers=providers
        )
        self._features = WhisperFeatureExtractor(chunk_length=WINDOW_S)

    def probability_complete(self, utterance: np.ndarray) -> float:
        """The probability that ``utterance`` (16 kHz float32) ends its speaker's turn."""
        window = WINDOW_S * SPEECH_RATE
        padded = np.pad(utterance[-window:], (max(0, window - len(utterance)), 0)).astype(np.float32)
        features = self._features(
            padded, sampling_rate=SPEECH_RATE, return_tensors="np", do_normalize=True
        ).input_features.astype(np.float32)
        (probability,) = self._session.run(None, {"input_features": features})
        return float(np.asarray(probability).reshape(-1)[0])
