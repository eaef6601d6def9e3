"""A recorded session's report, made from what its client was sent.

Everything in it is something the client was told, as the outbox sent it: the conversation's
items (a user's speech with its transcript, an answer with the words sent), each response
(a turn) with its status and, where ``response.done`` carries them in its metadata
(``turn_timings``), its timings; each interruption (speech that started while a response ran
or its audio still played), each ``error``, the models that served the session, and what
the recording holds. Written as JSON beside the recording when the session ends.

Each list keeps its first ``MAX_ENTRIES`` and counts the rest (``not_listed``): a client that
sends a bad event 200 times a second for an hour must not grow its session's memory with it.
"""

import json
from collections.abc import Callable, Mapping, Sized
from datetime import UTC, datetime
from typing import Any, Protocol

from deployments.realtime.timeline import TIMINGS_KEY

MAX_ENTRIES = 1000
"""Items, turns, interruptions and errors listed each, at most."""


class Timeline(Protocol):
    """Where the recording is, so that an interruption can be found in it."""

    def position_ms(self) -> int: ...

    def playing(self) -> bool: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class SessionReport:
    def __init__(self, session_id: str, models: Mapping[str, str], timeline: Timeline) -> None:
        self._session_id = session_id
        self._models = dict(models)
        self._timeline = timeline
        self._started_at = _now()
        self._items: dict[str, dict[str, Any]] = {}
        self._turns: dict[str, dict[str, Any]] = {}
        self._interruptions: list[dict[str, Any]] = []
        self._errors: list[dict[str, Any]] = []
        self._not_listed: dict[str, int] = {}
        self._running: str | None = None
        """The response created and not yet done."""
        self._last_audio: str | None = None
        """The response whose audio went out last."""
        self._handlers: dict[str, Callable[[Any], None]] = {
            "conversation.item.added": self._item,
            "conversation.item.done": self._item,
            "conversation.item.input_audio_transcription.completed": self._transcribed,
            "conversation.item.input_audio_transcription.failed": self._not_transcribed,
            "conversation.item.deleted": self._deleted,
            "conversation.item.truncated": self._truncated,
            "response.created": self._created,
            "response.output_audio.delta": self._audio,
            "response.done": self._done,
            "input_audio_buffer.speech_started": self._speech_started,
            "error": self._error,
        }

    def sent(self, event: Any) -> None:
        """The client was sent ``event`` (an answer's audio as the outbox's frame)."""
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(event)

    def finished(self, recording: dict[str, Any]) -> dict[str, Any]:
        """The report, at the session's end, with what the recording holds."""
        return {
            "session_id": self._session_id,
            "started_at": self._started_at,
            "ended_at": _now(),
            "models": self._models,
            "recording": recording,
            "items": list(self._items.values()),
            "turns": list(self._turns.values()),
            "interruptions": self._interruptions,
            "errors": self._errors,
        } | ({"not_listed": self._not_listed} if self._not_listed else {})

    def _room(self, kind: str, entries: Sized) -> bool:
        """Whether ``entries`` (of ``kind``) may take another one; if not, it is counted."""
        if len(entries) < MAX_ENTRIES:
            return True
        self._not_listed[kind] = self._not_listed.get(kind, 0) + 1
        return False

    def _entry(self, item_id: str, added: bool = False) -> dict[str, Any]:
        """The item's entry; past the limit a new item is kept nowhere (and counted once, when
        ``added``)."""
        if item_id not in self._items and len(self._items) >= MAX_ENTRIES:
            if added:
                self._not_listed["items"] = self._not_listed.get("items", 0) + 1
            return {}
        return self._items.setdefault(item_id, {"id": item_id})

    def _item(self, event: Any) -> None:
        summary = item_summary(event.item)
        kept = self._entry(summary["id"], added=event.type == "conversation.item.added")
        kept.update({key: value for key, value in summary.items() if value or key not in kept})

    def _transcribed(self, event: Any) -> None:
        self._entry(event.item_id)["text"] = event.transcript

    def _not_transcribed(self, event: Any) -> None:
        self._entry(event.item_id)["transcription_failed"] = True

    def _deleted(self, event: Any) -> None:
        self._entry(event.item_id)["deleted"] = True

    def _truncated(self, event: Any) -> None:
        self._entry(event.item_id)["truncated_at_ms"] = event.audio_end_ms

    def _created(self, event: Any) -> None:
        self._running = event.response.id
        if self._room("turns", self._turns):
            self._turns[event.response.id] = {"id": event.response.id, "created_at": _now()}

    def _audio(self, event: Any) -> None:
        self._last_audio = event.response_id

    def _done(self, event: Any) -> None:
        response = event.response
        if response.id not in self._turns:  # past the limit
            return
        turn = self._turns[response.id]
        turn.update(done_at=_now(), status=response.status)
        details = response.status_details
        if details is not None and details.reason:
            turn["reason"] = details.reason
        if details is not None and details.error is not None:
            turn["error"] = details.error.code
        turn["output"] = [item_summary(item) for item in response.output or []]
        for output in turn["output"]:  # a cancelled answer's item ends here, with the words sent
            if output["id"] in self._items:
                self._items[output["id"]].update({key: value for key, value in output.items() if value})
        timings = turn_timings(response.metadata)
        if timings is not None:
            turn["timings_ms"] = timings
        if self._running == response.id:
            self._running = None
        if response.status == "cancelled":
            for interruption in self._interruptions:
                if interruption["response_id"] == response.id:
                    interruption["cancelled"] = True

    def _speech_started(self, event: Any) -> None:
        if self._running is None and not self._timeline.playing():
            return  # a turn, not an interruption
        if not self._room("interruptions", self._interruptions):
            return
        self._interruptions.append(
            {
                "at": _now(),
                "recording_ms": self._timeline.position_ms(),
                "item_id": event.item_id,
                "response_id": self._running or self._last_audio,
                "cancelled": False,
            }
        )

    def _error(self, event: Any) -> None:
        error = event.error
        if not self._room("errors", self._errors):
            return
        self._errors.append(
            {"at": _now(), "type": error.type, "code": error.code, "message": error.message, "param": error.param}
        )


def item_summary(item: Any) -> dict[str, Any]:
    """An item as the report lists it: its id, type, role and words."""
    summary: dict[str, Any] = {"id": item.id, "type": item.type}
    if item.type == "message":
        words = (getattr(part, "text", None) or getattr(part, "transcript", None) for part in item.content)
        summary |= {"role": item.role, "text": " ".join(word for word in words if word)}
    elif item.type == "function_call":
        summary |= {"name": item.name, "call_id": item.call_id, "arguments": item.arguments}
    elif item.type == "function_call_output":
        summary |= {"call_id": item.call_id, "output": item.output}
    return summary


def turn_timings(metadata: Mapping[str, str] | None) -> dict[str, float] | None:
    """The response's ``turn_timings`` (a JSON object of milliseconds), if it has them."""
    raw = (metadata or {}).get(TIMINGS_KEY)
    if raw is None:
        return None
    try:
        timings = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(timings, dict):
        return None
    return {
        name: value for name, value in timings.items() if isinstance(value, int | float) and not isinstance(value, bool)
    }
