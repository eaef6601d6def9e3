"""The conversation as the server keeps it: items for the LLM prompt, their wire form.

Only text is kept per item (plus, for assistant audio, which text each stretch of audio
spoke), so history stays small and ``conversation.item.truncate`` can cut the text at the
point the listener stopped hearing. :class:`Conversation` does no I/O: the session and the
responder tell it what happened.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.realtime.realtime_conversation_item_assistant_message import (
    Content as AssistantContent,
)
from openai.types.realtime.realtime_conversation_item_assistant_message import (
    RealtimeConversationItemAssistantMessage,
)
from openai.types.realtime.realtime_conversation_item_function_call import RealtimeConversationItemFunctionCall
from openai.types.realtime.realtime_conversation_item_function_call_output import (
    RealtimeConversationItemFunctionCallOutput,
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

from deployments.realtime.stages import StageFailure
from handlers.llm import ChatMessage


@dataclass
class Item:
    """A conversation item as the LLM prompt sees it: a message, a function call (``text``:
    its arguments) or a function's result (``text``: the output)."""

    id: str
    role: Literal["user", "assistant", "system"]
    text: str = ""
    type: Literal["message", "function_call", "function_call_output"] = "message"
    call_id: str = ""
    name: str = ""
    """The function called (``function_call``)."""
    complete: bool = True
    """False while the model is still writing the call: a cut call never reaches a prompt."""
    transcribed: asyncio.Future[None] | None = None
    """Set once STT has filled ``text`` (user audio items only)."""
    transcription_failed: bool = False
    spoken: list[tuple[float, str]] = field(default_factory=list)
    """Assistant audio: (end of the piece in ms of output audio, its text), for truncation."""
    audio_ms: float = 0.0
    """Assistant audio sent so far (ms); a piece cut by a cancel ends inside ``spoken``."""
    spoken_aloud: bool = True
    """Assistant items: an audio answer (``output_audio``), else a text one (``output_text``)."""

    @property
    def prompted(self) -> bool:
        """Whether the item is a message of the LLM's prompt (text, a whole call, a result)."""
        return self.complete and bool(self.text or self.type == "function_call_output")

    def speak(self, text: str, audio_ms: float, continues_piece: bool) -> None:
        """A piece's audio (or more of it) is about to be sent: its text joins the item."""
        if continues_piece and self.spoken:
            end, piece = self.spoken[-1]
            self.spoken[-1] = (end + audio_ms, piece)
            return
        start = self.spoken[-1][0] if self.spoken else 0.0
        self.spoken.append((start + audio_ms, text))
        self.text += text

    def heard_until(self, audio_end_ms: float) -> None:
        """Keep only what was heard up to ``audio_end_ms`` (truncate; a cancel mid-piece)."""
        self.text, self.spoken = truncate_spoken(self.spoken, audio_end_ms)
        self.audio_ms = min(self.audio_ms, audio_end_ms)


def wire_item(item: Item, status: str = "completed") -> Any:
    item_status = {"in_progress": "in_progress", "completed": "completed"}.get(status, "incomplete")
    if item.type == "function_call":
        return RealtimeConversationItemFunctionCall(
            id=item.id,
            type="function_call",
            object="realtime.item",
            status=item_status if status != "completed" or item.complete else "incomplete",
            call_id=item.call_id,
            name=item.name,
            arguments=item.text,
        )
    if item.type == "function_call_output":
        return RealtimeConversationItemFunctionCallOutput(
            id=item.id,
            type="function_call_output",
            object="realtime.item",
            status="completed",
            call_id=item.call_id,
            output=item.text,
        )
    if item.role == "assistant":
        return RealtimeConversationItemAssistantMessage(
            id=item.id,
            type="message",
            role="assistant",
            object="realtime.item",
            status=item_status,
            content=[
                AssistantContent(type="output_audio", transcript=item.text)
                if item.spoken_aloud
                else AssistantContent(type="output_text", text=item.text)
            ],
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


def truncate_spoken(spoken: list[tuple[float, str]], audio_end_ms: float) -> tuple[str, list[tuple[float, str]]]:
    """Keep the text the listener heard: whole pieces before ``audio_end_ms`` and the
    heard share of the words of the piece it falls in."""
    kept: list[tuple[float, str]] = []
    start = 0.0
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


ROOT = "root"
"""``previous_item_id`` that puts an item first."""


class Conversation:
    """The items a prompt is made of, oldest first, at most ``max_items`` of them."""

    def __init__(self, max_items: int) -> None:
        self._max_items = max_items
        self._items: list[Item] = []

    @property
    def items(self) -> Sequence[Item]:
        return tuple(self._items)

    @property
    def last_id(self) -> str | None:
        return self._items[-1].id if self._items else None

    def add(self, item: Item, after: str | None = None) -> str | None:
        """Add ``item`` at the end, or right after the item ``after`` names (``root``: first);
        return the id of the item it follows (``previous_item_id``). An unknown ``after`` is
        a ``KeyError`` and adds nothing."""
        if after is None:
            index = len(self._items)
        elif after == ROOT:
            index = 0
        else:
            index = next((i + 1 for i, kept in enumerate(self._items) if kept.id == after), -1)
            if index < 0:
                raise KeyError(after)
        previous = self._items[index - 1].id if index > 0 else None
        self._items.insert(index, item)
        del self._items[: max(0, len(self._items) - self._max_items)]
        return previous

    def delete(self, item_id: str) -> bool:
        """Remove the item ``item_id``; ``False`` if there is none."""
        item = self.find(item_id)
        if item is not None:
            self._items.remove(item)
        return item is not None

    def forget_oldest(self, messages: int) -> None:
        """Drop the oldest items that made the first ``messages`` prompt messages (items with
        text; the empty ones before and among them go too)."""
        while messages > 0 and self._items:
            messages -= self._items.pop(0).prompted

    def find(self, item_id: str) -> Item | None:
        return next((item for item in self._items if item.id == item_id), None)


async def prompt(items: Sequence[Item], instructions: str | None) -> list[ChatMessage]:
    """``items`` as LLM messages, once every user utterance among them is transcribed.

    When the newest item is an utterance that could not be transcribed there is nothing to
    answer: a ``StageFailure``, never an answer to the turn before it.
    """
    pending = [i.transcribed for i in items if i.transcribed is not None and not i.transcribed.done()]
    if pending:
        await asyncio.gather(*pending)
    if items and items[-1].transcription_failed:
        raise StageFailure("transcription_failed", "the question's audio could not be transcribed")
    messages: list[ChatMessage] = [{"role": "system", "content": instructions}] if instructions else []
    messages += [chat_message(item) for item in items if item.prompted]
    return messages


def chat_message(item: Item) -> ChatMessage:
    """One item as an OpenAI chat message (what chat templates render)."""
    if item.type == "function_call":
        call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.text}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    if item.type == "function_call_output":
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.text}
    return {"role": item.role, "content": item.text}
