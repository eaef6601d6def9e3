"""Every client item kind maps to an item whose wire form is the SDK's and whose chat
message is fixed; the conversation's modules load no Ray."""

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from openai.types.realtime import ConversationItemCreateEvent

from deployments.realtime.input_events import client_audio, is_user_audio
from deployments.realtime.items import (
    AssistantMessage,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    UserAudio,
    from_client,
)
from deployments.realtime.protocol import ProtocolError
from deployments.realtime.transports.wire_audio import PCM16
from handlers.audio import SPEECH_RATE, b64_pcm16_encode

CASES: list[tuple[dict[str, Any], type, dict[str, Any]]] = [
    (
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]},
        InputText,
        {"role": "user", "content": "Hi."},
    ),
    (
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
        InputText,
        {"role": "system", "content": "Be brief."},
    ),
    (
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        AssistantMessage,
        {"role": "assistant", "content": "Hello."},
    ),
    (
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a": 1}'},
        FunctionCall,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
    ),
    (
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        FunctionCallOutput,
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ),
]


def client_item(fields: dict[str, Any]) -> Any:
    return ConversationItemCreateEvent.model_validate({"type": "conversation.item.create", "item": fields}).item


@pytest.mark.parametrize(("fields", "kind", "chat"), CASES, ids=[c[1].__name__ + str(i) for i, c in enumerate(CASES)])
def test_every_client_item_kind_maps_to_an_item(fields: dict[str, Any], kind: type, chat: dict[str, Any]) -> None:
    given = client_item({"id": "item_1", **fields})
    item = from_client(given, 100, "item")
    assert type(item) is kind
    assert item.chat_message() == chat
    expected = given.model_copy(update={"object": "realtime.item", "status": "completed"})
    if kind is InputText and fields["role"] == "system":
        expected = given.model_copy(update={"object": "realtime.item"})
    assert item.wire().model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert item.prompted


async def test_user_audio_is_decoded_and_shown_with_its_transcript_once_heard() -> None:
    pcm = b64_pcm16_encode(bytes(2 * 24_000 // 2))  # 0.5 s at 24 kHz
    given = client_item({"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": pcm}]})
    assert is_user_audio(given)
    assert len(client_audio(given, PCM16, 60, "item")) == SPEECH_RATE // 2
    item = UserAudio("item_a")
    assert item.wire().content[0].transcript is None and not item.prompted
    item.heard("Hello.")
    assert item.wire().content[0].transcript == "Hello." and item.chat_message() == {
        "role": "user",
        "content": "Hello.",
    }
    await asyncio.wait_for(item.transcribed, 1)


def test_items_over_the_limit_and_unknown_kinds_are_refused_by_name() -> None:
    long = client_item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 101}]})
    with pytest.raises(ProtocolError) as refused:
        from_client(long, 100, "item")
    assert refused.value.param == "item.content" and refused.value.code == "invalid_value"
    mixed = client_item({"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": ""}] * 2})
    with pytest.raises(ProtocolError) as refused:
        from_client(mixed, 100, "item")
    assert refused.value.code == "unsupported_value"


def test_a_function_call_being_written_is_incomplete_and_never_prompted() -> None:
    call = FunctionCall("item_c", "call_1", "f", '{"a"', complete=False)
    assert not call.prompted and call.wire("completed").status == "incomplete"
    assert call.wire("in_progress").status == "in_progress"


def test_the_conversation_modules_load_no_ray() -> None:
    code = (
        "import sys, deployments.realtime.items, deployments.realtime.conversation; "
        "loaded = [m for m in ('ray', 'vllm') if m in sys.modules]; assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
