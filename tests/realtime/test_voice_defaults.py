"""The defaults a voice session starts with, on fake stages: the server's instructions are
shown and used until a client's own replace them, and an answer cut at its token cap says
so and speaks only whole sentences, while sessions beside it (one interrupted) are whole."""

from fakes import FakeStages, Gate, Harness

from deployments.config import IngressConfig
from handlers.instructions import VOICE_INSTRUCTIONS
from handlers.tools import TokenCapReached


def system_prompt(stages: FakeStages) -> str | None:
    messages = stages.llm_requests[-1].messages
    return messages[0]["content"] if messages[0]["role"] == "system" else None


async def test_the_voice_instructions_are_shown_used_and_replaced_by_a_clients_own() -> None:
    async with Harness(instructions=IngressConfig().instructions) as h:  # the server's default
        created = await h.socket.wait_type("session.created")
        assert created["session"]["instructions"] == VOICE_INSTRUCTIONS
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        assert system_prompt(h.stages) == VOICE_INSTRUCTIONS

        h.socket.client_sends(type="session.update", session={"type": "realtime", "instructions": "Speak as a pirate."})
        updated = await h.socket.wait_type("session.updated")
        assert updated["session"]["instructions"] == "Speak as a pirate."
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done", count=2)
        assert system_prompt(h.stages) == "Speak as a pirate.", "replaced whole, not added to"


async def test_an_answer_cut_at_its_cap_is_incomplete_and_speaks_only_whole_sentences() -> None:
    stages = FakeStages()
    stages.answer = ["Rome is the capital.", " It is old and", TokenCapReached()]
    async with Harness(stages, low_lead_ms=None) as h:  # no piece goes before its sentence ends
        h.socket.client_sends(type="response.create")
        done = (await h.socket.wait_type("response.done"))["response"]
        assert done["status"] == "incomplete"
        assert done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        assert done["output"][0]["status"] == "incomplete"
        assert done["output"][0]["content"][0]["transcript"] == "Rome is the capital."
        spoken = "".join(e["delta"] for e in h.socket.of_type("response.output_audio_transcript.delta"))
        assert spoken == "Rome is the capital.", "the unfinished sentence is not spoken"


async def test_a_cut_answer_beside_others_one_interrupted_leaves_them_whole() -> None:
    """Three sessions share the stages: one is cut at its cap, one interrupted, one whole."""
    stages = FakeStages()
    whole = [f"Part {i} of the answer. " for i in range(4)]
    stages.answer = whole
    stages.session_answers["cut"] = ["Part one is here.", " And part two", TokenCapReached()]
    async with (
        Harness(stages, "cut", low_lead_ms=None) as cut,
        Harness(stages, "stopped") as stopped,
        Harness(stages, "whole") as rest,
    ):
        gate = stages.session_tts_gates["stopped"] = Gate()
        gate.close(after=1)
        for h in (cut, stopped, rest):
            h.socket.client_sends(type="response.create")
        await stopped.socket.wait_type("response.output_audio.delta")
        stopped.socket.client_sends(type="response.cancel")
        results = [(await h.socket.wait_type("response.done"))["response"] for h in (cut, stopped, rest)]
        assert [r["status"] for r in results] == ["incomplete", "cancelled", "completed"]
        assert results[0]["output"][0]["content"][0]["transcript"] == "Part one is here."
        assert results[2]["output"][0]["content"][0]["transcript"] == " ".join(p.strip() for p in whole)


async def test_the_sentence_bound_goes_with_answers_whose_client_set_no_cap() -> None:
    async with Harness(answer_tokens=24) as h:
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        request = h.stages.llm_requests[-1]
        assert (request.answer_tokens, request.max_tokens) == (24, None)

        h.socket.client_sends(type="session.update", session={"type": "realtime", "max_output_tokens": 7})
        await h.socket.wait_type("session.updated")
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done", count=2)
        request = h.stages.llm_requests[-1]
        assert (request.answer_tokens, request.max_tokens) == (None, 7), "a client's cap is its answer's, as given"
