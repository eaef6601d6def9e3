"""Function calling on the real CPU model (SmolLM2-135M on vLLM): forced calls come out as
valid calls, a function's result in the conversation is answered in words, and vLLM's
``hermes`` parser splits a streamed ``auto`` answer into text and calls however the text is cut.

What the model says (which city it names, what it makes of a result) varies between runs and
machines, so only what the structured output guarantees is asserted of it."""

import json
import random

import pytest

from handlers.llm import ChatMessage, LanguageModel
from handlers.tools import (
    FunctionCallArguments,
    FunctionCallStarted,
    FunctionSpec,
    InvalidFunctionCall,
    LLMOutput,
    TokenCapReached,
    ToolCallDecoder,
    ToolUse,
)

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

WEATHER = FunctionSpec(
    name="get_weather",
    description="The current weather in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = FunctionSpec(
    name="get_time",
    description="The current time in a time zone",
    parameters={"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]},
)
QUESTION: list[ChatMessage] = [
    {"role": "system", "content": "You are a helpful voice assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def calls_of(outputs: list[LLMOutput]) -> list[tuple[str, str]]:
    """(name, arguments) of each call in ``outputs``."""
    calls: list[list[str]] = []
    for output in outputs:
        if isinstance(output, FunctionCallStarted):
            assert output.index == len(calls) and output.call_id.startswith("call_")
            calls.append([output.name, ""])
        elif isinstance(output, FunctionCallArguments):
            calls[output.index][1] += output.delta
    return [(name, arguments) for name, arguments in calls]


async def test_a_named_function_is_called_with_arguments_that_fit_its_schema(llm: LanguageModel) -> None:
    tools = ToolUse(functions=[WEATHER, TIME], choice=WEATHER)
    outputs = [output async for output in llm.stream(QUESTION, tools=tools)]
    assert not [o for o in outputs if isinstance(o, str)], "a forced call says nothing"
    [(name, arguments)] = calls_of(outputs)
    assert name == "get_weather"
    assert isinstance(json.loads(arguments)["city"], str)
    assert llm.unfinished_requests() == 0


async def test_required_calls_one_of_the_functions_given(llm: LanguageModel) -> None:
    tools = ToolUse(functions=[WEATHER, TIME], choice="required")
    calls = calls_of([output async for output in llm.stream(QUESTION, tools=tools)])
    assert calls, "required: at least one call"
    for name, arguments in calls:
        assert name in ("get_weather", "get_time")
        assert isinstance(json.loads(arguments), dict)


async def test_the_answer_after_a_call_is_words_from_the_conversation_with_its_result(llm: LanguageModel) -> None:
    """As the server asks for it under ``tool_choice: "none"`` (no tools): the calls and the
    result render into the prompt, and words come back."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages: list[ChatMessage] = [
        *QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"weather": "sunny, 21 degrees"}'},
    ]
    outputs = [output async for output in llm.stream(messages)]
    text = [o for o in outputs if not isinstance(o, TokenCapReached)]  # a long answer reaches the cap
    assert text and all(isinstance(o, str) for o in text), outputs
    assert "".join(text).strip(), "an empty answer"
    assert llm.unfinished_requests() == 0


@pytest.mark.parametrize("seed", range(5))
def test_auto_splits_text_and_calls_however_the_stream_is_cut(llm: LanguageModel, seed: int) -> None:
    text = 'Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    decoder = ToolCallDecoder(llm.engine.get_tokenizer(), ToolUse(functions=[WEATHER]))
    rng, outputs, at = random.Random(seed), [], 0
    while at < len(text):
        step = rng.randint(1, 7)
        outputs += decoder.feed(text[at : at + step], [], finished=at + step >= len(text))
        at += step
    assert "".join(o for o in outputs if isinstance(o, str)) == "Let me look. "
    [(name, arguments)] = calls_of(outputs)
    assert (name, json.loads(arguments)) == ("get_weather", {"city": "Paris"})


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',
    ],
    ids=["a function it was not given", "arguments cut short"],
)
def test_a_call_that_cannot_be_passed_on_is_refused(llm: LanguageModel, text: str) -> None:
    decoder = ToolCallDecoder(llm.engine.get_tokenizer(), ToolUse(functions=[WEATHER]))
    with pytest.raises(InvalidFunctionCall):
        decoder.feed(text, [], finished=True)
