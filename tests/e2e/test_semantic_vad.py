"""``semantic_vad`` with the real models: Smart Turn holds a turn paused mid-sentence.

The sentence is spoken whole by Piper and cut at a word boundary, with a pause put in: said
alone, a fragment ends like a statement, and Smart Turn hears prosody, not words
(``../shared/notes/measured-facts.md``). ``server_vad`` cuts the same audio in two at its
500 ms silence timer: the contrast is what ``semantic_vad`` is for."""

import numpy as np
import pytest
from realtime_client import assert_heard

from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample

SENTENCE = "I would like to know the capital of France."
FIRST_WORDS = "I would like to know"
PAUSE_S = 0.8
TRAILING_S = 3.0
"""Silence after the sentence: more than the longest wait of a turn held as incomplete (2 s at
``eagerness`` auto), which the server counts in audio, so that the turn ends either way."""


def paused_mid_sentence(speak) -> bytes:  # type: ignore[no-untyped-def]
    """The sentence with ``PAUSE_S`` of silence at the quietest point near where its first
    words end (their length when said alone), as a client sends it."""
    whole, first = speak(SENTENCE, silence_s=0.0), speak(FIRST_WORDS, silence_s=0.0)
    loudness = np.convolve(np.abs(whole), np.ones(320) / 320, mode="same")
    low, high = int(0.8 * len(first)), int(1.2 * len(first))
    cut = low + int(np.argmin(loudness[low:high]))
    silence = np.zeros(int(PAUSE_S * SPEECH_RATE), np.float32)
    trailing = np.zeros(int(TRAILING_S * SPEECH_RATE), np.float32)
    audio = np.concatenate([silence, whole[:cut], silence, whole[cut:], trailing])
    return float_to_pcm16(resample(audio, SPEECH_RATE, REALTIME_RATE))


@pytest.mark.parametrize(("turn_detection", "items"), [("semantic_vad", 1), ("server_vad", 2)])
async def test_a_pause_mid_sentence_ends_the_turn_only_under_server_vad(connect, speak, turn_detection, items) -> None:
    audio = paused_mid_sentence(speak)
    async with connect() as client:
        session = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": turn_detection}}}}
        await client.connection.session.update(session=session)
        await client.until(lambda e: e.type == "session.updated")
        await client.send_audio(audio, realtime=True)
        for _ in range(items):
            heard = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
    assert len(client.of_type("input_audio_buffer.committed")) == items
    assert len(client.of_type("input_audio_buffer.speech_started")) == items
    if items == 1:
        assert_heard(SENTENCE, heard.transcript)
