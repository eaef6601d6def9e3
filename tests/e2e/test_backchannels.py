"""Interruptions that are real, with the real models (``deployments.realtime.turn_taking.interruptions``):
a backchannel spoken over an answer is no turn, and the question after it is one, from its
own onset. Turns are taken in order, so the question's ``speech_started`` proves the
backchannel before it was decided. The session asks for its answer's audio paced (the
server's default, which the test app turns off), so a candidate pauses it."""

import base64

import pytest
from realtime_client import LONG_QUESTION, Client, assert_heard

from handlers.audio import REALTIME_RATE
from loadtest.client import listener

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

FOLLOW_UP = "What is the capital of France?"
LEAD_MS = 200
LATENCY_MS = 150
"""What the client's own reading may add to the lead (a loaded 2-core machine)."""


def seconds(pcm: bytes) -> float:
    return len(pcm) / (2 * REALTIME_RATE)


def most_ahead_ms(client: Client, response_id: str) -> float:
    """How far the answer's audio was ever ahead of a client playing it as it came."""
    return listener.most_ahead_ms(
        [
            (at, seconds(base64.b64decode(event.delta)))
            for event, at in zip(client.events, client.received_at, strict=True)
            if event.type == "response.output_audio.delta" and event.response_id == response_id
        ]
    )


async def test_a_backchannel_over_the_answer_is_no_turn_and_the_next_question_is(connect, pcm24k) -> None:
    question = pcm24k(LONG_QUESTION)
    backchannel = pcm24k("Yeah, right.", silence_s=0.5)
    follow_up = pcm24k(FOLLOW_UP)
    async with connect() as client:
        paced = {"type": "server_vad", "interruption": {"audio_lead_ms": LEAD_MS}}
        await client.connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": paced}}}
        )
        updated = await client.until(lambda e: e.type == "session.updated")
        assert updated.session.audio.input.turn_detection.interruption["audio_lead_ms"] == LEAD_MS
        await client.send_audio(question)
        await client.until(lambda e: e.type == "response.output_audio.delta")
        await client.send_audio(backchannel + follow_up, realtime=True)
        second = await client.until(lambda e: e.type == "input_audio_buffer.speech_started")
        while second.audio_start_ms < 1000 * seconds(question):  # the first turn's own
            second = await client.until(lambda e: e.type == "input_audio_buffer.speech_started")
        heard = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
        while heard.item_id != second.item_id:
            heard = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")

    follow_up_onset_s = seconds(question + backchannel) + 1.0  # pcm24k pads speech with 1 s
    assert abs(second.audio_start_ms / 1000 - follow_up_onset_s) < 0.4, "the follow-up's onset, not the yeah's"
    assert_heard(FOLLOW_UP, heard.transcript)
    assert len(client.of_type("input_audio_buffer.committed")) == 2, "no item for the backchannel"
    answer = client.of_type("response.done")[0].response
    assert answer.status == "cancelled", "the follow-up interrupted the answer"
    assert most_ahead_ms(client, answer.id) <= LEAD_MS + LATENCY_MS, "paced: at most its lead ahead"
