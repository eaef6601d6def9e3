import numpy as np
import pytest

from handlers.audio import b64_audio_decode, b64_pcm16_encode, float_to_pcm16, pcm16_to_float, resample
from handlers.text import SpeechChunker

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def test_first_chunk_is_cut_at_a_clause() -> None:
    chunker = SpeechChunker(first_chunk_max_words=5)
    out = []
    for delta in ["Well", ", the", " capital of France", ", as you", " know, is Paris. It", " is big."]:
        out.extend(chunker.feed(delta))
    out.extend(chunker.flush())
    assert out == ["Well, the capital of France,", "as you know, is Paris.", "It is big."]


def test_first_chunk_without_punctuation_is_cut_after_a_few_words() -> None:
    chunker = SpeechChunker(first_chunk_max_words=5)
    out = []
    for delta in ["The", " capital", " of", " France", " is", " Paris", ". It", " is", " big", " and", " old."]:
        out.extend(chunker.feed(delta))
    out.extend(chunker.flush())
    assert out == ["The capital of France is", "Paris.", "It is big and old."]


@pytest.mark.parametrize("max_words", [3, 5, 20])
def test_chunker_cuts_the_same_whatever_the_delta_sizes(max_words: int) -> None:
    """The earliest cut of the three rules wins, so batched deltas start speaking as soon
    as token-by-token ones (review D9)."""
    text = "The capital of France is a lovely old city called Paris. It is big, and it is old. "
    whole = SpeechChunker(first_chunk_max_words=max_words)
    by_word = SpeechChunker(first_chunk_max_words=max_words)
    at_once = [*whole.feed(text), *whole.flush()]
    word_by_word = [piece for word in text.split(" ") for piece in by_word.feed(word + " ")]
    assert at_once == [*word_by_word, *by_word.flush()]
    assert len(at_once[0].split()) == min(max_words, 11)


def test_chunker_flushes_unterminated_text_and_skips_empty() -> None:
    chunker = SpeechChunker()
    assert list(chunker.feed("no end here")) == []  # three words: under the early cut
    assert list(chunker.flush()) == ["no end here"]
    assert list(chunker.flush()) == []


def test_chunker_splits_runaway_text() -> None:
    chunker = SpeechChunker(first_chunk_max_words=100, max_chars=20)
    out = list(chunker.feed("word " * 20))
    assert out and all(len(c) <= 20 for c in out)


def test_pcm16_round_trip_and_base64() -> None:
    samples = np.array([0.0, 0.5, -0.5, 1.5, -1.5], dtype=np.float32)
    pcm = float_to_pcm16(samples)
    back = pcm16_to_float(b64_audio_decode(b64_pcm16_encode(pcm)))
    assert np.allclose(back, [0.0, 0.5, -0.5, 32767 / 32768, -1.0], atol=1e-4)


@pytest.mark.parametrize("bad", ["not base64!", "AAA"])
def test_bad_audio_payload_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError):
        b64_audio_decode(bad)


def test_resample_keeps_duration_and_pitch() -> None:
    t = np.arange(24_000) / 24_000
    tone = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    out = resample(tone, 24_000, 16_000)
    assert len(out) == 16_000
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(np.argmax(spectrum) - 440) <= 1
