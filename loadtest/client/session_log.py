"""What one load-test session heard: every server event filed, as it is read, under the turn
and response it belongs to (``loadtest.client.records``), and what must never happen counted
(stale audio; ``response.done`` without ``response.created``; errors).

``loadtest.client.session.Session`` speaks; ``SessionListener`` keeps the records it reads from: a
turn is answered by the next ``response.created`` after its speech, in the order spoken. A
paused question's response that follows a ``speech_stopped`` at its pause cut the speaker off
(``Turn.cut_off_by``). The pause is told by audio position (the stop's ``audio_end_ms``
against where the session's audio went on), not by time: a server's events may come well
after the audio they are about.

A session that resumes (``Session`` with ``resume``) has one listener per
connection and one log: each lost connection is a :class:`Resume`, with what the client had
seen finished and what the resumed session replayed.
"""

import asyncio
import json
import time
from collections import deque
from typing import Any

from handlers.audio import REALTIME_RATE
from loadtest.client.records import EVENTS_KEPT, TIMINGS_KEY, Response, Resume, SessionLog, StaleAudio, StaleKind, Turn
from loadtest.client.wire import audio_size


class SessionListener:
    """The receiving side of one session: its records, kept as the server's events come."""

    def __init__(self, log: SessionLog, resuming: Resume | None = None) -> None:
        self.log = log
        self.created = asyncio.Event()
        """``session.created`` came (or the connection ended first)."""
        self.leaving = False
        """The session is closing: what comes now is no turn's."""
        self.ended = False
        """The connection has ended."""
        self.resume_token: str | None = None
        self.drain_told = False
        """The server said (``session.draining``) that it will close this connection."""
        self._resuming = resuming
        self._replaying = False
        """Right after a resumed ``session.created``: the items come as they were."""
        self._responses: dict[str, Response] = {}
        self._last_stop_ms: float | None = None
        """The latest ``speech_stopped``'s position in the input audio."""
        self._waiting: list[Turn] = []
        """Turns whose speech the server has not yet answered, oldest first."""
        self._recent: deque[tuple[str, str]] = deque(maxlen=EVENTS_KEPT)
        """The latest events' types and response ids: the order a stale delta came in."""

    def expect(self, turn: Turn) -> None:
        """The turn is being spoken: the next response the server creates answers it."""
        self.log.turns.append(turn)
        self._waiting.append(turn)

    def connection_ended(self) -> None:
        """Nothing more will come: whoever waits for an event is released; an answer in
        flight ends ``connection_lost``."""
        self.ended = True
        self.log.disconnected = not self.leaving
        self.created.set()
        for turn in self._waiting:
            turn.answered.set()
        for response in self._responses.values():
            if not response.done.is_set():
                response.status = "connection_lost"
                response.first_audio.set()
                response.done.set()

    def on_message(self, data: bytes, text: bool) -> None:
        """Handles one message as it is read (``loadtest.client.wire.DeliveringConnection``)."""
        if self.leaving:  # the session is closing: what comes now is no turn's
            return
        now = time.monotonic()
        try:
            self.on_event(json.loads(str(data, "utf-8") if text else data), now)
        except Exception as error:  # bad UTF-8, JSON or event: counted, the session goes on
            code = f"client:{type(error).__name__}"
            self.log.errors[code] = self.log.errors.get(code, 0) + 1

    def on_event(self, event: dict[str, Any], now: float) -> None:
        """Files one event, read at ``now`` (``time.monotonic()``)."""
        kind = event.get("type")
        self._recent.append((str(kind), _response_id(event)))
        self._replaying = self._replaying and kind in ("conversation.item.added", "conversation.item.done")
        if kind == "response.output_audio.delta":
            self._on_audio(event, now)
        elif kind == "session.created":
            self.log.model = event["session"].get("model")
            self.resume_token = event["session"].get("resume_token")
            if self._resuming is not None:
                self._resuming.resumed_at, self._replaying = now, True
                self.log.disconnected = False
            self.created.set()
        elif kind == "conversation.item.done":
            item_id = event["item"].get("id", "")
            if self._replaying and self._resuming is not None:
                self._resuming.items_replayed.append(item_id)
            elif item_id not in self.log.finished_items:
                self.log.finished_items.append(item_id)
        elif kind == "session.draining":
            self.drain_told = True
        elif kind == "input_audio_buffer.speech_started":
            turn = next((t for t in self.log.turns if t.interruption == "barge-in" and not t.barge_in_heard_at), None)
            if turn is not None:
                turn.barge_in_heard_at = now
        elif kind == "input_audio_buffer.speech_stopped":
            turn, self._last_stop_ms = self._oldest_waiting(), event.get("audio_end_ms")
            if turn is not None and turn.speech_stopped_at is None and not self._at_pause(turn):
                turn.speech_stopped_at = now
        elif kind == "conversation.item.input_audio_transcription.completed":
            turn = next((t for t in self.log.turns if t.heard is None and t.speech_stopped_at), None)
            if turn is not None:
                turn.heard, turn.transcribed_at = event.get("transcript", ""), now
        elif kind == "response.created":
            response = self._responses[event["response"]["id"]] = Response(event["response"]["id"], now)
            turn = self._oldest_waiting()
            if turn is None:
                self.log.unasked_responses += 1
            elif self._at_pause(turn):  # the speaker was cut off: what the server heard so far
                turn.cut_off_by.append(response)
            else:
                self._waiting.remove(turn)
                turn.response = response
                turn.answered.set()
        elif kind == "response.output_audio_transcript.done":
            answered = self._responses.get(event.get("response_id", ""))
            if answered is not None:
                answered.transcript = event.get("transcript", "")
        elif kind == "response.done":
            self._on_done(event["response"], now)
        elif kind == "error":
            code = event["error"].get("code") or event["error"].get("type") or "unknown"
            self.log.errors[code] = self.log.errors.get(code, 0) + 1

    def _at_pause(self, turn: Turn) -> bool:
        """Whether the latest stop was at the turn's pause (its speech had not gone on yet)."""
        if not turn.paused or self._last_stop_ms is None:
            return False
        return turn.resumed_at_ms is None or self._last_stop_ms < turn.resumed_at_ms

    def _oldest_waiting(self) -> Turn | None:
        return self._waiting[0] if self._waiting else None

    def _on_audio(self, event: dict[str, Any], now: float) -> None:
        size = audio_size(event.get("delta", ""))
        response_id = event.get("response_id", "")
        response = self._responses.get(response_id)
        if response is None:
            self._stale("never_created", response_id, size, now)
            return
        if response.done_at is not None:
            self._stale("after_done", response_id, size, now)
            return
        if response.first_audio_at is None:
            response.first_audio_at = now
            response.first_audio.set()
        elif now > response.plays_until:
            response.longest_gap_s = max(response.longest_gap_s, now - response.plays_until)
        response.plays_until = max(response.plays_until, now) + size / (2 * REALTIME_RATE)
        response.last_audio_at = now
        response.audio_bytes += size

    def _stale(self, kind: StaleKind, response_id: str, size: int, now: float) -> None:
        stale = self.log.stale.get(response_id)
        if stale is None:
            events = [f"{event} {rid}".rstrip() for event, rid in self._recent]
            stale = self.log.stale[response_id] = StaleAudio(kind, response_id, at=now, events_before=events)
        stale.bytes += size
        stale.deltas += 1

    def _on_done(self, wire: dict[str, Any], now: float) -> None:
        response = self._responses.get(wire.get("id", ""))
        if response is None:
            self.log.done_without_created += 1
            return
        response.done_at, response.status = now, wire.get("status")
        response.server_timings = server_timings(wire)
        response.first_audio.set()  # nothing more will come
        response.done.set()


def server_timings(response: dict[str, Any]) -> dict[str, float]:
    """The timings a ``response.done``'s response carries in its metadata (none if absent)."""
    told = (response.get("metadata") or {}).get(TIMINGS_KEY)
    return json.loads(told) if isinstance(told, str) else {}


def _response_id(event: dict[str, Any]) -> str:
    """The response an event belongs to, if it names one."""
    response = event.get("response")
    if isinstance(response, dict):
        return str(response.get("id", ""))
    return str(event.get("response_id", ""))
