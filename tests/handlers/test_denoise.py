"""DTLN as the ingress runs it: the batch dimension freed without changing a row's result,
sessions in one batch each as alone whatever their chunking, a state that travels, and
noise taken out."""

import pickle

import numpy as np
import onnxruntime
import pytest

from handlers.denoise import HOP, MAX_ROWS, Denoiser, DenoiserState, batchable, bundled_model_dir

pytestmark = pytest.mark.fast
"""DTLN is 4 MB of ONNX that loads in well under a second: no Ray, none of the big models."""


@pytest.fixture(scope="module")
def denoiser() -> Denoiser:
    return Denoiser()


def noise(seconds: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(16_000 * seconds)) * 0.05).astype(np.float32)


@pytest.mark.parametrize("network", ["model_1.onnx", "model_2.onnx"])
def test_the_freed_batch_gives_each_row_what_the_export_gives_it_alone(network: str) -> None:
    path = bundled_model_dir() / network
    exported = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    freed = onnxruntime.InferenceSession(batchable(path), providers=["CPUExecutionProvider"])
    frames, states = (tensor.name for tensor in exported.get_inputs())
    width = exported.get_inputs()[0].shape[2]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 1, width)).astype(np.float32)
    state = (rng.standard_normal((5, 2, 128, 2)) * 0.1).astype(np.float32)
    together = freed.run(None, {frames: x, states: state})
    for row in range(5):
        alone = exported.run(None, {frames: x[row : row + 1], states: state[row : row + 1]})
        for got, expected in zip(together, alone, strict=True):
            np.testing.assert_allclose(got[row : row + 1], expected, atol=1e-5)


def test_sessions_in_one_batch_are_each_denoised_as_alone_whatever_their_chunks(denoiser: Denoiser) -> None:
    """More sessions than one run takes, each sending chunks of its own size: every one gets
    exactly what a denoiser of its own makes of its audio, and as many samples as it sent."""
    sessions = MAX_ROWS + 3
    audios = [noise(1.0, seed) for seed in range(sessions)]
    chunked = [np.array_split(audio, len(audio) // (160 + 97 * row)) for row, audio in enumerate(audios)]
    states = [DenoiserState("near_field") for _ in range(sessions)]
    heard: list[list[np.ndarray]] = [[] for _ in range(sessions)]
    for index in range(max(map(len, chunked))):
        rows = [row for row in range(sessions) if index < len(chunked[row])]  # sessions end apart
        results = denoiser.denoise_batch([(states[row], chunked[row][index]) for row in rows])
        for row, result in zip(rows, results, strict=True):
            assert len(result) == len(chunked[row][index])
            heard[row].append(result)
    for row, audio in enumerate(audios):
        alone = denoiser.denoise(DenoiserState("near_field"), audio)
        np.testing.assert_allclose(np.concatenate(heard[row]), alone, atol=1e-5)


def test_a_state_that_travels_mid_stream_goes_on_where_it_was(denoiser: Denoiser) -> None:
    """The VAD deployment gets a session's state pickled and answers with a copy."""
    audio = noise(1.0, seed=7)
    straight = denoiser.denoise(DenoiserState("far_field"), audio)
    state = DenoiserState("far_field")
    first = denoiser.denoise(state, audio[:5_000])
    travelled = pickle.loads(pickle.dumps(state))
    np.testing.assert_allclose(np.concatenate([first, denoiser.denoise(travelled, audio[5_000:])]), straight, atol=1e-6)


def test_noise_is_taken_out_after_the_delay(denoiser: Denoiser) -> None:
    audio = noise(2.0, seed=3)
    out = denoiser.denoise(DenoiserState("near_field"), audio)
    assert not out[: HOP - 1].any(), "primed with silence: every call returns as many samples as it was given"
    after = out[SPEECH_SETTLED:]
    assert np.mean(after**2) < 0.3 * np.mean(audio[SPEECH_SETTLED:] ** 2), "over 5 dB less noise (half is the input)"


SPEECH_SETTLED = 4_000
"""Samples (250 ms) the networks' states take to settle on a new stream."""
