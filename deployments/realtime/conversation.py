"""The conversation as the server keeps it: the ordered items a prompt is made of.

:class:`Conversation` holds the list and its operations (add after an item, find, delete,
truncate, forget the oldest, fit a prompt into the LLM's context) and does no I/O: the
session and the responder tell it what happened. The item kinds themselves are in
:mod:`deployments.realtime.items`.
"""

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Sequence

from deployments.realtime.failures import StageFailure
from deployments.realtime.items import AssistantMessage, Item, UserAudio
from deployments.realtime.protocol import ProtocolError
from handlers.llm import ChatMessage


class NothingToAnswer(Exception):
    """The user's turn transcribed to no words or only sounds (noise, a cough, a laugh,
    silence): not a question.
    The turn stays in the conversation as an empty utterance, and no response follows it."""


OPENING: ChatMessage = {"role": "system", "content": "The conversation starts now: greet the user briefly."}
"""The prompt of a response to an empty conversation without instructions (an agent that
speaks first): chat templates render no empty conversation."""

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

    def find(self, item_id: str) -> Item | None:
        return next((item for item in self._items if item.id == item_id), None)

    def delete(self, item_id: str) -> bool:
        """Remove the item ``item_id``; ``False`` if there is none."""
        item = self.find(item_id)
        if item is not None:
            self._items.remove(item)
        return item is not None

    def truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> int:
        """The listener heard the spoken answer ``item_id`` up to ``audio_end_ms``: its text
        keeps what was heard. Returns the point it was cut at, clamped to the audio sent (a
        client counts what it received, rounded as it likes: past the end means all of it
        was heard, never an error)."""
        item = self.find(item_id)
        if not isinstance(item, AssistantMessage):
            raise ProtocolError("invalid_value", f"no assistant message {item_id[:64]!r}", "item_id")
        if content_index != 0:
            raise ProtocolError("invalid_value", "content_index must be 0 (an item has one part)", "content_index")
        if not item.spoken_aloud:
            raise ProtocolError("invalid_value", f"item {item.id!r} is a text answer: it has no audio", "item_id")
        if audio_end_ms < 0:
            raise ProtocolError("invalid_value", "audio_end_ms must not be negative", "audio_end_ms")
        cut_ms = min(audio_end_ms, math.floor(item.audio_ms))
        item.heard_until(cut_ms)
        return cut_ms

    async def fit(
        self,
        messages: list[ChatMessage],
        budget_tokens: int | None,
        excess: Callable[[list[ChatMessage]], Awaitable[int]],
    ) -> list[ChatMessage]:
        """``messages`` (this conversation's prompt) within ``budget_tokens``: when they may
        not fit, ``excess`` (the LLM, with its tokenizer) says how many of the oldest must go,
        and those items leave the conversation for good, so later turns start from the same
        place and keep the LLM's prefix cache."""
        if budget_tokens is None or _most_tokens(messages) <= budget_tokens:
            return messages
        dropped = await excess(messages)
        if not dropped:
            return messages
        system = messages[:1] if messages[0]["role"] == "system" else []
        self._forget_oldest(dropped)
        return system + messages[len(system) + dropped :]

    def _forget_oldest(self, messages: int) -> None:
        """Drop the oldest items that made the first ``messages`` prompt messages (the items
        without a message before and among them go too)."""
        while messages > 0 and self._items:
            messages -= self._items.pop(0).prompted


async def prompt(items: Sequence[Item], instructions: str | None, then: ChatMessage | None = None) -> list[ChatMessage]:
    """``items`` as LLM messages (and ``then`` after them), once every user utterance among
    them is transcribed.

    When the newest item is an utterance that could not be transcribed there is nothing to
    answer: a ``StageFailure``, never an answer to the turn before it.
    """
    pending = [i.transcribed for i in items if isinstance(i, UserAudio) and not i.transcribed.done()]
    if pending:
        await asyncio.wait(pending)  # not gather: an answer's cancel would cancel the items' futures
    if items and isinstance(items[-1], UserAudio) and items[-1].transcription_failed:
        raise StageFailure("transcription_failed", "the question's audio could not be transcribed")
    messages: list[ChatMessage] = [{"role": "system", "content": instructions}] if instructions else []
    messages += [item.chat_message() for item in items if item.prompted]
    messages += [then] if then is not None else []
    return messages or [OPENING]


async def turn_prompt(items: Sequence[Item], instructions: str | None) -> list[ChatMessage]:
    """The prompt that answers the user's turn, the newest item: :func:`prompt`, unless the
    turn holds no words (:class:`NothingToAnswer`)."""
    messages = await prompt(items, instructions)
    if items and isinstance(items[-1], UserAudio) and not items[-1].prompted:
        raise NothingToAnswer(items[-1].id)
    return messages


def _most_tokens(messages: list[ChatMessage]) -> int:
    """More tokens than ``messages`` can take in any byte-level tokenizer (each byte at most a
    token, plus the chat template's markup), so below the budget no count is needed."""
    return 64 + sum(16 + len(json.dumps(m).encode()) for m in messages)
