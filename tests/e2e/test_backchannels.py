"""Interruptions that are real, with the real models (``deployments.realtime.interruptions``):
a backchannel spoken over an answer is no turn, and the question after it is one, from its
own onset. Turns are taken in order, so the question's ``speech_started`` proves the
backchannel before it was decided."""

from realtime_client import LONG_QUESTION, assert_heard

from handlers.audio import REALTIME_RATE

FOLLOW_UP = "What is the capital of France?"


def seconds(pcm: bytes) -> float:
    return len(pcm) / (2 * REALTIME_RATE)


async def test_a_backchannel_over_the_answer_is_no_turn_and_the_next_question_is(connect, pcm24k) -> None:
    question = pcm24k(LONG_QUESTION)
    backchannel = pcm24k("Yeah, right.", silence_s=0.5)
    follow_up = pcm24k(FOLLOW_UP)
    async with connect() as client:
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
