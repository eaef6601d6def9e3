import numpy as np
import pytest

from handlers.audio import b64_audio_decode, b64_pcm16_encode, float_to_pcm16, pcm16_to_float, resample
from handlers.text import LOW_LEAD_MS, SentenceBound, SpeechChunker

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


def test_later_pieces_are_sentences_while_audio_is_ready_and_words_once_it_runs_low() -> None:
    chunker = SpeechChunker(first_chunk_max_words=2)
    assert list(chunker.feed("The moon is ")) == ["The moon"]
    plenty = LOW_LEAD_MS + 1
    assert list(chunker.feed("our only natural satellite and it ", plenty)) == []
    assert list(chunker.feed("shines ", LOW_LEAD_MS - 1)) == ["is our only natural satellite and it shines"]
    assert list(chunker.feed("at night, ", LOW_LEAD_MS - 1)) == [], "fewer words than a piece needs"
    assert list(chunker.feed("then sets. It is far", plenty)) == ["at night, then sets."]
    assert list(chunker.flush()) == ["It is far"]


def test_a_low_lead_cuts_at_a_clause_before_a_word() -> None:
    chunker = SpeechChunker(first_chunk_max_words=1)
    assert list(chunker.feed("Yes. ")) == ["Yes."]
    assert list(chunker.feed("It is red, green and blue ", 0.0)) == ["It is red,", "green and blue"]


def test_a_low_lead_cut_never_parts_a_number_from_its_unit() -> None:
    chunker = SpeechChunker(first_chunk_max_words=1)
    assert list(chunker.feed("Yes. ")) == ["Yes."]
    assert list(chunker.feed("It is about 5 ", 0.0)) == ["It is about"]
    assert list(chunker.feed("km away ", 0.0)) == ["5 km away"]


def test_a_chunker_without_a_low_lead_keeps_later_pieces_whole_sentences() -> None:
    chunker = SpeechChunker(first_chunk_max_words=1, low_lead_ms=None)
    assert list(chunker.feed("Yes. It is red, green and blue ", 0.0)) == ["Yes."]


def test_an_answer_cut_at_its_cap_flushes_only_whole_sentences() -> None:
    chunker = SpeechChunker(first_chunk_max_words=1)
    assert list(chunker.feed("Rome. It is the capital. And it has", LOW_LEAD_MS)) == ["Rome.", "It is the capital."]
    assert list(chunker.flush(cut_short=True)) == []
    assert list(chunker.feed("It is old.", LOW_LEAD_MS)) == [], "a sentence end waits for what follows it"
    assert list(chunker.flush(cut_short=True)) == ["It is old."]


def bounded(bound: SentenceBound, deltas: list[str], last: int | None = None) -> tuple[str, bool]:
    """What passes ``bound`` of one-token ``deltas`` (delta ``last`` ends the answer)."""
    said = ""
    for index, delta in enumerate(deltas):
        text, ends = bound.feed(delta, 1, index == last)
        said += text
        if ends:
            return said, True
    return said, False


def test_past_its_tokens_an_answer_ends_with_its_sentence() -> None:
    deltas = ["Rome", " is", " old", ".", " It", " is", " big", ".", " More", "."]
    assert bounded(SentenceBound(2), deltas) == ("Rome is old.", True)
    assert bounded(SentenceBound(5), deltas) == ("Rome is old. It is big.", True)
    assert bounded(SentenceBound(50), deltas) == ("".join(deltas), False)


def test_a_bound_takes_a_decimal_point_for_no_sentence_end_and_passes_the_models_own_end() -> None:
    assert bounded(SentenceBound(1), ["It", " is", " 3", ".", "5", " m", ".", " Yes"]) == ("It is 3.5 m.", True)
    assert bounded(SentenceBound(1), ["It", " is", " 3", "."], last=3) == ("It is 3.", True)


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
