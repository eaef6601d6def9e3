"""Function calling with vLLM's own tool support, for a stream of generated text.

How a call is recognised depends on what the client asked (``tool_choice``):

- ``auto``: the model decides; vLLM's tool-call parser for the model's format (``hermes``
  by default: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``) splits its output
  into text and calls as it streams;
- a named function: structured output holds the model to that function's parameter schema,
  so the whole output is the call's arguments;
- ``required``: structured output holds it to vLLM's schema of a list of calls to the given
  functions, read once the output is complete.

Both forced modes make even a small model emit a valid call when one is asked for. A call
whose arguments are not a JSON object is an :class:`InvalidFunctionCall`, never passed on.
"""

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

DEFAULT_TOOL_PARSER = "hermes"


class FunctionSpec(BaseModel):
    """A function the model may call (a Realtime ``tools`` entry of type ``function``)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolUse(BaseModel):
    """The functions one request may call, and how it must use them."""

    functions: list[FunctionSpec]
    choice: Literal["auto", "required"] | FunctionSpec = "auto"
    """``auto``: the model decides; ``required``: at least one call; a function: that call."""

    def chat_tools(self) -> list[dict[str, Any]]:
        """The functions as chat templates and vLLM's OpenAI protocol take them; ``strict``,
        so that vLLM's grammar holds a call's arguments to its schema, not only its name."""
        return [
            {"type": "function", "function": function.model_dump() | {"strict": True}} for function in self.functions
        ]


@dataclass(frozen=True)
class FunctionCallStarted:
    """The model began call ``index`` of its answer."""

    index: int
    call_id: str
    name: str


@dataclass(frozen=True)
class FunctionCallArguments:
    """More of call ``index``'s arguments (JSON text)."""

    index: int
    delta: str


@dataclass(frozen=True)
class TokenCapReached:
    """The answer reached its token cap: it is cut, not finished (the last of a stream)."""


LLMOutput = str | FunctionCallStarted | FunctionCallArguments | TokenCapReached
"""What a language model stream yields: text to say, pieces of function calls, or the news
that the answer was cut at its token cap."""


class InvalidFunctionCall(ValueError):
    """The model's call cannot be passed on: no JSON object for arguments, or no such function."""


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallDecoder:
    """Turns one request's generated text into :data:`LLMOutput` with vLLM's own parser (the
    one its OpenAI server composes for ``--tool-call-parser``), as :class:`ToolUse` asks."""

    def __init__(self, tokenizer: Any, tools: ToolUse, parser_name: str = DEFAULT_TOOL_PARSER) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.parser.parser_manager import ParserManager

        choice = tools.choice
        named = {"type": "function", "function": {"name": getattr(choice, "name", "")}}
        tool_choice: Any = choice if isinstance(choice, str) else named
        parser = ParserManager.get_parser(tool_parser_name=parser_name, enable_auto_tools=True)
        if parser is None:
            raise ValueError(f"vLLM has no tool parser {parser_name!r}")
        request = ChatCompletionRequest(messages=[], tools=tools.chat_tools(), tool_choice=tool_choice)
        self._parser = parser(tokenizer, request.tools)  # type: ignore[arg-type]
        self._request = self._parser.adjust_request(request)
        self._functions = {function.name for function in tools.functions}
        self._calls: list[list[str]] = []
        """Each call's name and arguments so far."""

    @property
    def structured_outputs(self) -> Any:
        """vLLM's ``StructuredOutputsParams`` that hold the model to a call's format and
        schema when a call is forced (``None`` for ``auto``)."""
        return self._request.structured_outputs

    @property
    def skip_special_tokens(self) -> bool:
        """Some models mark their call tags as special tokens: the parser must see them."""
        return bool(self._request.skip_special_tokens)

    def feed(
        self, delta: str, token_ids: Sequence[int], finished: bool, prompt_token_ids: Sequence[int] = ()
    ) -> list[LLMOutput]:
        """The model's next ``delta``; at the end (``finished``), every call is checked. The
        prompt's tokens tell a reasoning model's parser whether the answer starts in thought."""
        message = self._parser.parse_delta(
            delta, list(token_ids), self._request, list(prompt_token_ids), finished=finished
        )
        outputs: list[LLMOutput] = [message.content] if message is not None and message.content else []
        for call in message.tool_calls if message is not None else []:
            function = call.function
            if function is not None and function.name:
                self._calls.append([function.name, ""])
                outputs.append(FunctionCallStarted(len(self._calls) - 1, new_call_id(), function.name))
            if function is not None and function.arguments:
                self._calls[call.index][1] += function.arguments
                outputs.append(FunctionCallArguments(call.index, function.arguments))
        if finished:
            self._check()
        return outputs

    def _check(self) -> None:
        for name, arguments in self._calls:
            if name not in self._functions:
                raise InvalidFunctionCall(f"the model called {name!r}, which it was not given")
            try:
                if not isinstance(json.loads(arguments), dict):
                    raise ValueError("not an object")
            except ValueError as exc:
                raise InvalidFunctionCall(f"{name}'s arguments are not a JSON object: {arguments[:200]!r}") from exc
