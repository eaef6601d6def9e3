"""A turn of no words is not a question, and an empty conversation is normal."""

import pytest
from fakes import Harness, append_audio, speech

from deployments.realtime.conversation import OPENING


@pytest.mark.parametrize("heard", ["", "(coughing)", "Ha ha ha.", "Hmm.", "[laughter] Mm-hmm."])
async def test_a_turn_of_no_words_gets_no_response_and_the_next_turn_is_answered(heard: str) -> None:
    """Noise, a cough or a laugh with no answer playing (or a mislabelled sample rate) starts
    no response: STT writes those as nothing, a sound in brackets, or a hum."""
    async with Harness() as h:
        h.stages.transcript = heard
        append_audio(h.socket, speech(1))
        done = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        assert done["transcript"] == heard
        await h.socket.wait_type("conversation.item.done")
        h.stages.transcript = "Question two."
        append_audio(h.socket, speech(2))
        answered = await h.socket.wait_type("response.done")
        assert answered["response"]["status"] == "completed"
        assert h.socket.types().count("response.created") == 1, "the quiet turn had no response"
        assert not h.socket.of_type("error")
        assert h.stages.llm_requests[-1].messages[-1] == {"role": "user", "content": "Question two."}
        assert all(request.messages[-1]["content"] for request in h.stages.llm_requests)
        assert heard not in str(h.stages.llm_requests[-1].messages) or not heard, "a sound is no message"


@pytest.mark.parametrize("heard", ["Yes.", "42."])
async def test_a_short_answer_is_a_turn(heard: str) -> None:
    """A "Yes." or a number answers the agent's question: unlike a hum, it is answered."""
    async with Harness() as h:
        h.stages.transcript = heard
        append_audio(h.socket, speech(1))
        answered = await h.socket.wait_type("response.done")
        assert answered["response"]["status"] == "completed"
        assert h.stages.llm_requests[-1].messages[-1] == {"role": "user", "content": heard}


async def test_an_empty_conversation_is_not_prefilled_and_a_response_to_it_greets() -> None:
    async with Harness() as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.done")
        assert h.stages.prefills == [], "nothing to compute ahead on a first turn without instructions"
    async with Harness() as h:
        h.socket.client_sends(type="response.create")  # an agent that speaks first
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        assert h.stages.llm_requests[-1].messages == [OPENING]
