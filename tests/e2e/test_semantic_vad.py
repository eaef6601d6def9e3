"""``semantic_vad`` with the real models: Smart Turn holds a turn paused mid-sentence.

The sentence is spoken whole by Piper and cut at a word boundary, with a pause put in: said
alone, a fragment ends like a statement, and Smart Turn hears prosody, not words
(``../shared/notes/measured-facts.md``). ``server_vad`` cuts the same audio in two at its
500 ms silence timer: the contrast is what ``semantic_vad`` is for."""

import pytest
from realtime_client import assert_heard, normalise

from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from loadtest.client.prompts import PAUSE_S, with_pause

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

SENTENCE = "I would like to know the capital of France."
FIRST_WORDS = "I would like to know"
TRAILING_S = 3.0
"""Silence after the sentence: more than the longest wait of a turn held as incomplete (2 s at
``eagerness`` auto), which the server counts in audio, so that the turn ends either way."""


def paused_mid_sentence(speak) -> tuple[bytes, float]:  # type: ignore[no-untyped-def]
    """The sentence with a pause (``loadtest.client.prompts.with_pause``) where its first words end
    (their length when said alone), after as long a silence, as a client sends it; and the
    millisecond of that audio where the speech goes on after the pause."""
    whole = float_to_pcm16(resample(speak(SENTENCE, silence_s=0.0), SPEECH_RATE, REALTIME_RATE))
    first_samples = len(speak(FIRST_WORDS, silence_s=0.0)) * REALTIME_RATE // SPEECH_RATE
    paused, resumes_s = with_pause(whole, first_samples)
    return silence(PAUSE_S) + paused + silence(TRAILING_S), 1000 * (PAUSE_S + resumes_s)


def silence(seconds: float) -> bytes:
    return bytes(2 * int(seconds * REALTIME_RATE))


@pytest.mark.parametrize(("turn_detection", "items"), [("semantic_vad", 1), ("server_vad", 2)])
async def test_a_pause_mid_sentence_ends_the_turn_only_under_server_vad(connect, speak, turn_detection, items) -> None:
    audio, resumes_ms = paused_mid_sentence(speak)
    async with connect() as client:
        session = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": turn_detection}}}}
        await client.connection.session.update(session=session)
        await client.until(lambda e: e.type == "session.updated")
        await client.send_audio(audio, realtime=True)
        for _ in range(items):
            heard = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
    assert len(client.of_type("input_audio_buffer.committed")) == items
    assert len(client.of_type("input_audio_buffer.speech_started")) == items
    first_turn_ends_ms = client.of_type("input_audio_buffer.speech_stopped")[0].audio_end_ms
    if items == 1:
        assert first_turn_ends_ms > resumes_ms, "the one turn ended before the speech went on"
        assert_heard_whole(heard.transcript)
    else:
        assert first_turn_ends_ms < resumes_ms, "server_vad's first turn took in the second half"


def assert_heard_whole(transcript: str) -> None:
    """Both halves are in the one transcript: the first words heard, and at least one word of
    the rest. Not a word error over the sentence: tiny.en sometimes mishears the words after
    the pause ("the cap that will look France", 0.44), and the first half alone scores as
    much (0.44), so no bound tells the two apart."""
    words = normalise(transcript).split()
    first_count = len(FIRST_WORDS.split())
    assert_heard(FIRST_WORDS, " ".join(words[:first_count]))
    rest = set(normalise(SENTENCE).split()[first_count:])
    assert rest & set(words[first_count:]), (SENTENCE, transcript)
