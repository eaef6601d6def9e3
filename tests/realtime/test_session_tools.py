"""Function calling on fake stages: the tools reach the LLM, a call is an output item of
its own with its argument events, the client's result goes into the next prompt, and a call
cut by a cancel never reaches a prompt -- with other sessions' answers whole beside it."""

import json
from typing import Any

from fakes import FakeStages, Gate, Harness

from handlers.tools import FunctionCallArguments, FunctionCallStarted, FunctionSpec

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = [
    FunctionCallStarted(0, "call_abc", "get_weather"),
    FunctionCallArguments(0, '{"city":'),
    FunctionCallArguments(0, ' "Paris"}'),
]


async def with_tools(h: Harness, **settings: Any) -> None:
    h.socket.client_sends(type="session.update", session={"type": "realtime", "tools": [WEATHER], **settings})
    updated = (await h.socket.wait_type("session.updated"))["session"]
    assert updated["tools"] == [WEATHER]


async def test_a_function_call_round_trip() -> None:
    async with Harness() as h:
        await with_tools(h, tool_choice={"type": "function", "name": "get_weather"})
        h.stages.answer = CALL
        h.socket.client_sends(type="conversation.item.create", item=text("What is the weather in Paris?"))
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")

        request = h.stages.llm_requests[-1]
        assert request.tools is not None and request.tools.choice == FunctionSpec.model_validate(WEATHER)
        [call] = done["response"]["output"]
        assert call == {
            "id": call["id"],
            "type": "function_call",
            "object": "realtime.item",
            "status": "completed",
            "call_id": "call_abc",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        }
        response_events = [e["type"] for e in h.socket.sent if e.get("response_id") or e["type"].startswith("conv")]
        assert response_events[-7:] == [
            "conversation.item.added",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "conversation.item.done",
        ]
        args_done = h.socket.of_type("response.function_call_arguments.done")[0]
        assert (args_done["call_id"], args_done["name"], args_done["output_index"]) == ("call_abc", "get_weather", 0)
        assert h.stages.tts_streams == [], "a call is not spoken"

        h.stages.answer = ["It is sunny in Paris."]
        output = {"type": "function_call_output", "call_id": "call_abc", "output": '{"weather": "sunny"}'}
        h.socket.client_sends(type="conversation.item.create", item=output)
        h.socket.client_sends(type="response.create", response={"tool_choice": "auto"})
        done = await h.socket.wait_type("response.done", count=2)
        assert done["response"]["output"][0]["content"][0]["transcript"] == "It is sunny in Paris."
        messages = h.stages.llm_requests[-1].messages
        assert messages[-2:] == [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_abc", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_abc", "content": '{"weather": "sunny"}'},
        ]  # fmt: skip
        assert h.stages.llm_requests[-1].tools is not None
        assert h.stages.llm_requests[-1].tools.choice == "auto"
        assert h.socket.of_type("error") == []


async def test_words_before_a_call_are_spoken_as_their_own_item_first() -> None:
    async with Harness() as h:
        await with_tools(h)
        h.stages.answer = ["Let me look. ", *CALL]
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        message, call = done["response"]["output"]
        assert message["content"][0]["transcript"] == "Let me look."
        assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"city": "Paris"}
        added = [(e["item"]["type"], e["output_index"]) for e in h.socket.of_type("response.output_item.added")]
        assert added == [("message", 0), ("function_call", 1)]
        assert h.socket.of_type("response.output_audio.delta")[0]["output_index"] == 0


async def test_tool_choice_none_gives_the_llm_no_tools_and_a_session_without_tools_none_either() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        await with_tools(h, tool_choice="none")
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done", count=2)
        h.socket.client_sends(type="response.create", response={"tool_choice": "required"})
        await h.socket.wait_type("response.done", count=3)
        assert [r.tools for r in h.stages.llm_requests[:2]] == [None, None]
        assert h.stages.llm_requests[2].tools is not None and h.stages.llm_requests[2].tools.choice == "required"


async def test_a_call_cut_by_a_cancel_never_reaches_a_prompt_and_other_sessions_answer_whole() -> None:
    stages = FakeStages()
    stages.session_answers["b"] = CALL
    async with Harness(stages, "a") as a, Harness(stages, "b") as b, Harness(stages, "c") as c:
        await with_tools(b)
        b_llm = stages.session_llm_gates["b"] = Gate()
        b_llm.close(after=2)  # the call starts and gets its first arguments, then the LLM stalls
        for h in (a, b, c):
            h.socket.client_sends(type="response.create")
        await b.socket.wait_type("response.function_call_arguments.delta")
        b.socket.client_sends(type="response.cancel")
        results = [await h.socket.wait_type("response.done") for h in (a, b, c)]
        assert [r["response"]["status"] for r in results] == ["completed", "cancelled", "completed"]
        for result in (results[0], results[2]):
            assert result["response"]["output"][0]["content"][0]["transcript"] == "The answer is one. That is all."
        [cut] = results[1]["response"]["output"]
        assert (cut["status"], cut["arguments"]) == ("incomplete", '{"city":')
        assert b.socket.of_type("response.function_call_arguments.done") == []
        assert stages.live_streams() == []

        stages.session_answers["b"] = ["Sorry, where?"]
        b_llm.open()
        b.socket.client_sends(type="response.create")
        await b.socket.wait_type("response.done", count=2)
        assert not any("tool_calls" in m for m in stages.llm_requests[-1].messages)


async def test_function_items_from_the_client_are_kept_and_retrieved() -> None:
    async with Harness() as h:
        call = {"type": "function_call", "id": "item_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
        result = {"type": "function_call_output", "id": "item_out", "call_id": "c1", "output": "rain"}
        h.socket.client_sends(type="conversation.item.create", item=call)
        h.socket.client_sends(type="conversation.item.create", item=result)
        await h.socket.wait_type("conversation.item.done", count=2)
        h.socket.client_sends(type="conversation.item.retrieve", item_id="item_out")
        retrieved = (await h.socket.wait_type("conversation.item.retrieved"))["item"]
        assert (retrieved["type"], retrieved["call_id"], retrieved["output"]) == ("function_call_output", "c1", "rain")
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        assert [m["role"] for m in h.stages.llm_requests[-1].messages][-2:] == ["assistant", "tool"]


def text(words: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": words}]}
