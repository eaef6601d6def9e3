"""The protocol parts agent frameworks lean on, end to end on the real stack (local Ray, CPU
models) through the stock ``openai`` SDK: the Agents SDK's default session settings, an
``input_audio`` item, item retrieve and delete, a text answer and an out-of-band one.

What the 135M model says varies between runs and machines, and tiny.en may mishear a word,
so the tests assert the protocol, not the answers' content: what the user said is checked by
word error rate, an answer by being non-empty, a forced call by fitting its schema."""

import base64
import json

import jiwer
import pytest
from realtime_client import FINISHED, is_done

from deployments.realtime.timeline import TIMINGS_KEY

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

HEARD_WER = 0.4
"""Word error of what tiny.en hears of a spoken question: a misheard word or two, never a
different question (1.0)."""


def normalise(text: str) -> str:
    return jiwer.RemovePunctuation()(text.lower()).strip()


async def test_framework_defaults_items_and_text_answers_on_the_real_models(connect, pcm24k) -> None:
    async with connect() as client:
        connection = client.connection
        await connection.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "audio": {
                    "input": {
                        "noise_reduction": {"type": "near_field"},
                        "turn_detection": {"type": "semantic_vad", "eagerness": "auto", "create_response": False},
                    },
                    "output": {"voice": "ash", "speed": 1.1},
                },
            }
        )
        updated = await client.until(lambda e: e.type == "session.updated")
        assert updated.session.audio.input.turn_detection.type == "semantic_vad"

        said = "What is the capital of France?"
        question = base64.b64encode(pcm24k(said, silence_s=0.2)).decode()
        item = {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": question}]}
        await connection.conversation.item.create(item=item)
        heard = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
        assert jiwer.wer(normalise(said), normalise(heard.transcript)) <= HEARD_WER, heard.transcript

        await connection.conversation.item.retrieve(item_id=heard.item_id)
        retrieved = await client.until(lambda e: e.type == "conversation.item.retrieved")
        assert retrieved.item.id == heard.item_id and retrieved.item.content[0].transcript == heard.transcript

        await connection.response.create()
        done = await client.until(is_done)
        assert done.response.status in FINISHED and done.response.output_modalities == ["text"]
        answer = "".join(e.delta for e in client.of_type("response.output_text.delta"))
        assert answer.strip() and done.response.output[0].content[0].text == answer, answer
        assert client.of_type("response.output_audio.delta") == []

        await connection.response.create(
            response={
                "conversation": "none",
                "output_modalities": ["text"],
                "metadata": {"purpose": "title"},
                "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}
                ],
            }
        )
        aside = await client.until(is_done)
        metadata = dict(aside.response.metadata)  # the client's, and the turn's timings beside it
        assert aside.response.status in FINISHED and metadata.pop(TIMINGS_KEY) and metadata == {"purpose": "title"}

        await connection.conversation.item.delete(item_id=heard.item_id)
        deleted = await client.until(lambda e: e.type == "conversation.item.deleted")
        assert deleted.item_id == heard.item_id
        await connection.conversation.item.retrieve(item_id=heard.item_id)
        error = await client.until(lambda e: e.type == "error")
        assert error.error.code == "item_not_found"
    assert [e.error.code for e in client.of_type("error")] == ["item_not_found"]


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


async def test_a_required_function_call_and_the_answer_from_its_result(connect) -> None:
    async with connect() as client:
        connection = client.connection
        question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}
        await connection.conversation.item.create(item=question)
        await connection.response.create(
            response={"output_modalities": ["text"], "tools": [WEATHER], "tool_choice": "required"}
        )
        done = await client.until(is_done)
        [call] = done.response.output
        assert (call.type, call.status, call.name) == ("function_call", "completed", "get_weather")
        assert isinstance(json.loads(call.arguments)["city"], str), call.arguments  # its schema, whichever city
        deltas = "".join(e.delta for e in client.of_type("response.function_call_arguments.delta"))
        [arguments_done] = client.of_type("response.function_call_arguments.done")
        assert deltas == arguments_done.arguments == call.arguments and arguments_done.call_id == call.call_id

        result = {"type": "function_call_output", "call_id": call.call_id, "output": '{"weather": "sunny, 21 C"}'}
        await connection.conversation.item.create(item=result)
        await connection.response.create(
            response={"output_modalities": ["text"], "tools": [WEATHER], "tool_choice": "none"}
        )
        answer = await client.until(is_done)
        [message] = answer.response.output  # words, not another call: the choice is "none"
        assert (answer.response.status, message.type) == ("completed", "message")
        assert message.content[0].text.strip(), "an empty answer from the result"
    assert client.of_type("error") == []


async def test_words_are_transcribed_while_the_user_speaks(connect, pcm24k) -> None:
    async with connect() as client:
        # Long enough for the STT of this 2-core machine, busy with the LLM's prefill of the
        # conversation too, to answer a partial before the turn ends.
        question = (
            "What is the weather like in Paris today, and should I take an umbrella when I go out this afternoon?"
        )
        await client.send_audio(pcm24k(question), realtime=True)
        completed = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
    types = [e.type for e in client.events]
    partials = types[: types.index("input_audio_buffer.speech_stopped")]
    assert "conversation.item.input_audio_transcription.delta" in partials, " ".join(types)
    deltas = [e.delta for e in client.of_type("conversation.item.input_audio_transcription.delta")]
    assert deltas[0].endswith(" "), deltas  # whole words only
    # The first words are words the user said (the final transcript is a new decode of the
    # whole utterance: a borderline word may come out otherwise in either).
    said = set(normalise(question).split())
    first_words = normalise(deltas[0]).split()
    assert first_words and sum(word in said for word in first_words) >= len(first_words) / 2, deltas
    assert jiwer.wer(normalise(question), normalise(completed.transcript)) <= HEARD_WER, completed.transcript
    assert client.of_type("error") == []
