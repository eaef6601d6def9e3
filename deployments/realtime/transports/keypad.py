"""A phone's keypad: digits typed in a call (Twilio's ``dtmf``) gathered into one entry that
the agent can answer, as the caller's text message."""

import time
from collections.abc import Callable

from openai.types.realtime import ConversationItemCreateEvent, ResponseCreateEvent

from deployments.realtime.limits import Violation

KEYPAD_PAUSE_S = 2.0
"""Digits typed within this of each other are one entry (``#`` ends one at once)."""
MAX_ENTRY_DIGITS = 32
"""Digits one entry holds before its ``#`` (a card number has 19): a caller cannot grow the
entry, and the message it becomes, without bound."""


class Keypad:
    """Digits typed on the phone, gathered into one entry: ended by ``#`` or a pause of
    ``KEYPAD_PAUSE_S``, it becomes the caller's text message and asks for an answer."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._digits = ""
        self._last_at = 0.0
        self._clock = clock

    def press(self, digit: str) -> list[ConversationItemCreateEvent | ResponseCreateEvent]:
        """A digit; the entry's events if this ends it. ``Violation`` for a digit past
        ``MAX_ENTRY_DIGITS`` (refused; a ``#`` still ends the entry)."""
        if digit != "#" and len(self._digits) >= MAX_ENTRY_DIGITS:
            raise Violation("keypad_entry_too_long", f"over {MAX_ENTRY_DIGITS} digits in one keypad entry")
        self._digits += digit[:1]
        self._last_at = self._clock()
        return self.flush() if digit == "#" else []

    def wait_s(self) -> float | None:
        """How long until the entry ends by itself (``None``: none is being typed)."""
        if not self._digits:
            return None
        return max(self._last_at + KEYPAD_PAUSE_S - self._clock(), 0.0)

    def flush(self) -> list[ConversationItemCreateEvent | ResponseCreateEvent]:
        """The entry's events (none if no digit is being typed): its text as the caller's
        message, and a request for an answer."""
        digits, self._digits = self._digits, ""
        if not digits:
            return []
        text = f"[The caller typed on the phone's keypad: {' '.join(digits)}]"
        content = [{"type": "input_text", "text": text}]
        item = {"type": "message", "role": "user", "content": content}
        return [
            ConversationItemCreateEvent.model_validate({"type": "conversation.item.create", "item": item}),
            ResponseCreateEvent(type="response.create"),
        ]
