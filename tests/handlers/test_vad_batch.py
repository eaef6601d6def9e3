"""Batched voice activity detection: many sessions' audio in one network call per window
must give each session exactly what silero's own streaming iterator gives it alone."""

import pickle

import numpy as np
import pytest
from silero_vad import VADIterator, load_silero_vad

from handlers.audio import SPEECH_RATE
from handlers.vad import (
    CHUNK_SAMPLES,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    VADState,
    VoiceActivityDetector,
)

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

PROMPTS = ("What is the capital of France?", "Good morning to you.", "Tell me, please, a short story about a cat.")


def silero_alone(audio: np.ndarray, silence_ms: int) -> list[tuple[str, int]]:
    """Boundaries from silero's own network and iterator, window by window, one session."""
    import torch

    iterator = VADIterator(load_silero_vad(onnx=True), sampling_rate=SPEECH_RATE, min_silence_duration_ms=silence_ms)
    iterator.speech_pad_samples = 0
    found = []
    for offset in range(0, len(audio) - CHUNK_SAMPLES + 1, CHUNK_SAMPLES):
        boundary = iterator(torch.from_numpy(audio[offset : offset + CHUNK_SAMPLES]))
        found += [(kind, sample) for kind, sample in (boundary or {}).items()]
    return found


def boundaries(events: list) -> list[tuple[str, int]]:
    return [
        ("start", e.start_sample) if isinstance(e, SpeechStarted) else ("end", e.end_sample)
        for e in events
        if isinstance(e, SpeechStarted | SpeechStopped)
    ]


@pytest.fixture(scope="module")
def utterances(speak) -> list[np.ndarray]:
    return [speak(prompt, silence_s=1.0 + 0.3 * i) for i, prompt in enumerate(PROMPTS)]


def test_batched_sessions_each_get_what_silero_gives_them_alone(
    vad: VoiceActivityDetector, utterances: list[np.ndarray]
) -> None:
    """Sessions of different lengths and settings, fed unequal chunks (so the batch of each
    window index holds a changing subset of them), in one batch per call."""
    settings = [TurnDetection(silence_duration_ms=ms) for ms in (500, 300, 700)]
    states = [VADState(turn) for turn in settings]
    chunk_sizes = [1600, 1536, 2048]
    found: list[list] = [[] for _ in utterances]
    for step in range(max(len(u) // size + 1 for u, size in zip(utterances, chunk_sizes, strict=True))):
        calls = [
            (states[i], audio[step * size : (step + 1) * size])
            for i, (audio, size) in enumerate(zip(utterances, chunk_sizes, strict=True))
        ]
        for i, events in enumerate(vad.detect_batch(calls)):
            found[i] += events
    for audio, turn, events in zip(utterances, settings, found, strict=True):
        assert boundaries(events) == silero_alone(audio, turn.silence_duration_ms)
        assert boundaries(events)  # each utterance was heard


def test_one_session_alone_and_in_a_batch_agree(vad: VoiceActivityDetector, utterances: list[np.ndarray]) -> None:
    alone = VADState(TurnDetection())
    expected = vad.detect(alone, utterances[0])
    batched = [VADState(TurnDetection()) for _ in utterances]
    got = vad.detect_batch(list(zip(batched, utterances, strict=True)))[0]
    assert got == expected
    assert np.allclose(batched[0].model_state, alone.model_state, atol=1e-5)


def test_state_is_compact_numpy_and_numbers(vad: VoiceActivityDetector, utterances: list[np.ndarray]) -> None:
    """What travels to a VAD deployment with each call: no pydantic model, ~2 KB."""
    state = VADState(TurnDetection())
    vad.detect(state, utterances[0][: SPEECH_RATE + 100])
    wire = pickle.dumps(state)
    assert b"pydantic" not in wire and len(wire) < 4096
    assert pickle.loads(wire).samples_seen == state.samples_seen
