"""The conversation's item kinds: what each holds, its wire form and its chat message.

One class per kind (Pipecat decides frame semantics by type; so do we): input text (a user's
or a system message), user audio, an assistant message, a function call and its output.
Each knows its Realtime wire form (``wire``) and its LLM chat message (``chat_message``),
and :func:`from_client` builds them from a client's items, the one place where both
directions meet. Only text is kept per item (plus, for assistant audio, which text each
stretch of audio spoke), so history stays small and a truncate can cut the text where the
listener stopped hearing.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from openai.types.realtime import ConversationItem
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

from deployments.realtime.protocol import ProtocolError, new_id
from deployments.realtime.spoken_words import holds_speech
from handlers.llm import ChatMessage

ItemStatus = Literal["in_progress", "completed", "incomplete"]
MIN_AUDIO_MS = 100
"""The shortest audio a user audio item (or a commit) may hold."""


def item_status(response_status: str) -> ItemStatus:
    """An output item's status for its response's (cancelled and failed: ``incomplete``)."""
    return response_status if response_status in ("in_progress", "completed") else "incomplete"  # type: ignore[return-value]


@dataclass(eq=False)
class InputText:
    """A text message a client added: a user's, or a system message."""

    id: str
    text: str
    role: Literal["user", "system"] = "user"

    @property
    def prompted(self) -> bool:
        return bool(self.text)

    def wire(self, status: str = "completed") -> ConversationItem:
        if self.role == "system":
            return RealtimeConversationItemSystemMessage(
                id=self.id,
                type="message",
                role="system",
                object="realtime.item",
                content=[SystemContent(type="input_text", text=self.text)],
            )
        return _user_message(self.id, UserContent(type="input_text", text=self.text))

    def chat_message(self) -> ChatMessage:
        return {"role": self.role, "content": self.text}


@dataclass(eq=False)
class UserAudio:
    """A user's speech (committed, or an ``input_audio`` item): its text once transcribed."""

    id: str
    text: str = ""
    transcription_failed: bool = False
    transcribed: "asyncio.Future[None]" = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    """Set once STT has answered (``text`` filled, or ``transcription_failed``)."""

    @property
    def prompted(self) -> bool:
        """A turn of only sounds ("(coughing)", "Hmm.") is no message for the LLM."""
        return holds_speech(self.text)

    def heard(self, text: str) -> None:
        self.text = text
        self.transcribed.set_result(None)

    def not_heard(self) -> None:
        self.transcription_failed = True
        self.transcribed.set_result(None)

    def wire(self, status: str = "completed") -> ConversationItem:
        transcript = self.text if self.transcribed.done() else None
        return _user_message(self.id, UserContent(type="input_audio", transcript=transcript))

    def chat_message(self) -> ChatMessage:
        return {"role": "user", "content": self.text}


@dataclass(eq=False)
class AssistantMessage:
    """An answer, spoken (``output_audio``) or written (``output_text``).

    ``text`` is everything produced; what was *sent* is counted apart (``audio_ms``,
    ``sent_chars``), so a cancel keeps exactly the words the client got.
    """

    id: str
    spoken_aloud: bool
    text: str = ""
    spoken: list[tuple[float, str]] = field(default_factory=list)
    """Spoken answers: (end of the piece in ms of output audio, its text), for truncation."""
    audio_ms: float = 0.0
    """Audio sent to the client so far (ms); a piece cut by a cancel ends inside ``spoken``."""
    sent_chars: int = 0
    """Written answers: how much of ``text`` the client was sent."""

    @property
    def prompted(self) -> bool:
        return bool(self.text)

    @property
    def spoken_ms(self) -> float:
        """The answer's audio (all of it once complete; what was kept once cut)."""
        return self.spoken[-1][0] if self.spoken else 0.0

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

    def keep_sent(self) -> None:
        """A cancel: the answer is what the client was sent of it, no more."""
        if self.spoken_aloud:
            self.heard_until(self.audio_ms)
        else:
            self.text = self.text[: self.sent_chars]

    def wire(self, status: str = "completed") -> ConversationItem:
        content = (
            AssistantContent(type="output_audio", transcript=self.text)
            if self.spoken_aloud
            else AssistantContent(type="output_text", text=self.text)
        )
        return RealtimeConversationItemAssistantMessage(
            id=self.id,
            type="message",
            role="assistant",
            object="realtime.item",
            status=item_status(status),
            content=[content],
        )

    def chat_message(self) -> ChatMessage:
        return {"role": "assistant", "content": self.text}


@dataclass(eq=False)
class FunctionCall:
    """The model's call of a function; ``arguments`` grow while the model writes them."""

    id: str
    call_id: str
    name: str
    arguments: str = ""
    complete: bool = True
    """False while the model is still writing the call: a cut call never reaches a prompt."""
    sent_chars: int = 0
    """How much of ``arguments`` the client was sent (a cancel keeps that much)."""

    @property
    def prompted(self) -> bool:
        return self.complete and bool(self.arguments)

    def keep_sent(self) -> None:
        """A cancel: the call is what the client was sent of it, no more."""
        self.arguments = self.arguments[: self.sent_chars]

    def wire(self, status: str = "completed") -> ConversationItem:
        shown = item_status(status)
        return RealtimeConversationItemFunctionCall(
            id=self.id,
            type="function_call",
            object="realtime.item",
            status=shown if shown != "completed" or self.complete else "incomplete",
            call_id=self.call_id,
            name=self.name,
            arguments=self.arguments,
        )

    def chat_message(self) -> ChatMessage:
        call = {"id": self.call_id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}


@dataclass(eq=False)
class FunctionCallOutput:
    """A function's result, as the client gives it back."""

    id: str
    call_id: str
    output: str

    @property
    def prompted(self) -> bool:
        return True

    def wire(self, status: str = "completed") -> ConversationItem:
        return RealtimeConversationItemFunctionCallOutput(
            id=self.id,
            type="function_call_output",
            object="realtime.item",
            status="completed",
            call_id=self.call_id,
            output=self.output,
        )

    def chat_message(self) -> ChatMessage:
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.output}


Item = InputText | UserAudio | AssistantMessage | FunctionCall | FunctionCallOutput
"""Every kind of conversation item: dispatch on it with ``isinstance`` or ``match``."""


def from_client(item: ConversationItem, max_chars: int, param: str) -> Item:
    """A client's text message, function call or function result as an item (user audio:
    ``input_events.client_audio``, which needs a transcription)."""
    item_id = item.id or new_id("item")
    if item.type == "message":
        text = _message_text(item, max_chars, param)
        if item.role == "assistant":
            return AssistantMessage(item_id, spoken_aloud=False, text=text, sent_chars=len(text))
        return InputText(item_id, text, item.role)
    if item.type == "function_call":
        arguments = _within_limit(item.arguments or "{}", max_chars, f"{param}.arguments")
        return FunctionCall(item_id, item.call_id or new_id("call"), item.name or "", arguments)
    if item.type == "function_call_output":
        return FunctionCallOutput(item_id, item.call_id, _within_limit(item.output, max_chars, f"{param}.output"))
    raise ProtocolError("unsupported_value", f"{item.type} items are not supported", f"{param}.type")


def _message_text(item: Any, max_chars: int, param: str) -> str:
    """The text of a message item's parts, within ``max_chars``."""
    if not {part.type for part in item.content} <= {"input_text", "text", "output_text"}:
        raise ProtocolError(
            "unsupported_value", "an item holds text parts, or one input_audio part of a user", f"{param}.content"
        )
    text = " ".join(getattr(part, "text", None) or "" for part in item.content)
    return _within_limit(text, max_chars, f"{param}.content")


def _within_limit(text: str, max_chars: int, param: str) -> str:
    if len(text) > max_chars:
        raise ProtocolError(
            "invalid_value", f"item text of {len(text)} characters is over this server's limit of {max_chars}", param
        )
    return text


def _user_message(item_id: str, content: UserContent) -> RealtimeConversationItemUserMessage:
    return RealtimeConversationItemUserMessage(
        id=item_id, type="message", role="user", object="realtime.item", status="completed", content=[content]
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
