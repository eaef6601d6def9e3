"""The conversation as the server keeps it: items for the LLM prompt, their wire form.

Only text is kept per item (plus, for assistant audio, which text each stretch of audio
spoke), so history stays small and ``conversation.item.truncate`` can cut the text at the
point the listener stopped hearing.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.realtime.realtime_conversation_item_assistant_message import (
    Content as AssistantContent,
)
from openai.types.realtime.realtime_conversation_item_assistant_message import (
    RealtimeConversationItemAssistantMessage,
)
from openai.types.realtime.realtime_conversation_item_system_message import (
    Content as SystemContent,
)
from openai.types.realtime.realtime_conversation_item_system_message import (
    RealtimeConversationItemSystemMessage,
)
from openai.types.realtime.realtime_conversation_item_user_message import Content as UserContent
from openai.types.realtime.realtime_conversation_item_user_message import (
    RealtimeConversationItemUserMessage,
)


@dataclass
class Item:
    """A conversation item as the LLM prompt sees it."""

    id: str
    role: Literal["user", "assistant", "system"]
    text: str = ""
    transcribed: asyncio.Future[None] | None = None
    """Set once STT has filled ``text`` (user audio items only)."""
    spoken: list[tuple[int, str]] = field(default_factory=list)
    """Assistant audio: (end of the piece in ms of output audio, its text), for truncation."""


def wire_item(item: Item, status: str = "completed") -> Any:
    item_status = {"in_progress": "in_progress", "completed": "completed"}.get(status, "incomplete")
    if item.role == "assistant":
        return RealtimeConversationItemAssistantMessage(
            id=item.id,
            type="message",
            role="assistant",
            object="realtime.item",
            status=item_status,
            content=[AssistantContent(type="output_audio", transcript=item.text)],
        )
    if item.role == "system":
        return RealtimeConversationItemSystemMessage(
            id=item.id,
            type="message",
            role="system",
            object="realtime.item",
            content=[SystemContent(type="input_text", text=item.text)],
        )
    content = (
        UserContent(type="input_audio", transcript=item.text if item.transcribed and item.transcribed.done() else None)
        if item.transcribed is not None
        else UserContent(type="input_text", text=item.text)
    )
    return RealtimeConversationItemUserMessage(
        id=item.id, type="message", role="user", object="realtime.item", status="completed", content=[content]
    )


def truncate_spoken(spoken: list[tuple[int, str]], audio_end_ms: int) -> tuple[str, list[tuple[int, str]]]:
    """Keep the text the listener heard: whole pieces before ``audio_end_ms`` and the
    heard share of the words of the piece it falls in."""
    kept: list[tuple[int, str]] = []
    start = 0
    for end, text in spoken:
        if end <= audio_end_ms:
            kept.append((end, text))
        else:
            words = text.split()
            heard = round(len(words) * (audio_end_ms - start) / max(1, end - start))
            if heard:
                kept.append((audio_end_ms, (" " if kept else "") + " ".join(words[:heard])))
            break
        start = end
    return "".join(text for _, text in kept), kept
