"""A turn of no words is not a question, and an empty conversation is normal."""

from fakes import Harness, append_audio, speech

from deployments.realtime.conversation import OPENING


async def test_a_turn_that_transcribes_to_nothing_gets_no_response_and_the_next_turn_is_answered() -> None:
    async with Harness() as h:
        h.stages.transcript = ""  # a cough, noise, a mislabelled sample rate
        append_audio(h.socket, speech(1))
        done = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        assert done["transcript"] == ""
        await h.socket.wait_type("conversation.item.done")
        h.stages.transcript = "Question two."
        append_audio(h.socket, speech(2))
        answered = await h.socket.wait_type("response.done")
        assert answered["response"]["status"] == "completed"
        assert h.socket.types().count("response.created") == 1, "the quiet turn had no response"
        assert not h.socket.of_type("error")
        assert h.stages.llm_requests[-1].messages[-1] == {"role": "user", "content": "Question two."}
        assert all(request.messages[-1]["content"] for request in h.stages.llm_requests)


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
