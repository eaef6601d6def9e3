"""The ingress's Prometheus metrics (``ray.serve.metrics``, exported on Ray's metrics port).

One ``SessionMetrics`` per session sees each event as the send loop sends or drops it, so
every figure is what a client really got: voice-to-voice from the end of the user's turn to
the first audio delta sent, barge-in stop from the cancel decision to the ``response.done``
sent, output dropped by the discard filter, errors by code.
"""

import time
from collections import deque
from typing import Any

from ray.serve import metrics

LATENCY_BOUNDARIES_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0]
RECENT_TURNS = 256


class IngressMetrics:
    """The metric objects of one ingress replica (create them inside the replica)."""

    def __init__(self) -> None:
        self.active_sessions = metrics.Gauge("s2s_active_sessions", "Open Realtime sessions.")
        self.turns = metrics.Counter("s2s_turns", "User turns that ended (VAD stop, commit, or text).")
        self.responses = metrics.Counter("s2s_responses", "Responses ended, by status.", tag_keys=("status",))
        self.voice_to_voice = metrics.Histogram(
            "s2s_voice_to_voice_seconds",
            "End of the user's turn to the first audio delta of the answer sent.",
            boundaries=LATENCY_BOUNDARIES_S,
        )
        self.barge_in_stop = metrics.Histogram(
            "s2s_barge_in_stop_seconds",
            "Cancel decision (speech started or response.cancel) to its response.done sent.",
            boundaries=LATENCY_BOUNDARIES_S,
        )
        self.interruptions = metrics.Counter(
            "s2s_interruptions",
            "Speech during an answer, by outcome: confirmed (a barge-in) or ignored (a backchannel, a cough).",
            tag_keys=("outcome",),
        )
        self.interruption_confirmed = metrics.Histogram(
            "s2s_interruption_confirm_seconds",
            "A real interruption: its speech heard from its onset to its confirmation (the cancel follows).",
            boundaries=LATENCY_BOUNDARIES_S,
        )
        self.cancels = metrics.Counter("s2s_cancels", "Responses cancelled, by reason.", tag_keys=("reason",))
        self.held_dropped = metrics.Counter(
            "s2s_held_answers_dropped",
            "Speculative answers dropped unseen (the client never saw them created), by reason.",
            tag_keys=("reason",),
        )
        self.discarded = metrics.Counter("s2s_discarded_events", "Output events of cancelled responses dropped.")
        self.errors = metrics.Counter("s2s_errors", "Error events sent, by code.", tag_keys=("code",))
        self.recordings_limited = metrics.Counter(
            "s2s_recordings_limited",
            "Recordings refused at their start or stopped while written because the recordings directory "
            "was at its max_total_bytes, by outcome: refused or stopped.",
            tag_keys=("outcome",),
        )
        self.recent_turns: deque[dict[str, Any]] = deque(maxlen=RECENT_TURNS)
        """Where each recent response's time went (``deployments.realtime.timeline``)."""

    def recording_limited(self, outcome: str) -> None:
        """The recordings' byte budget ``refused`` a new recording or ``stopped`` a live one."""
        self.recordings_limited.inc(tags={"outcome": outcome})

    def error_sent(self, event: Any) -> None:
        """An ``error`` event went to a client (in a session, or refusing one)."""
        self.errors.inc(tags={"code": event.error.code or event.error.type})


class SessionMetrics:
    """What one session reports: it remembers when a turn ended and when a cancel was decided."""

    def __init__(self, metrics_: IngressMetrics) -> None:
        self._metrics = metrics_
        self._turn_ended_at: float | None = None
        self._cancelled_at: float | None = None
        self._dropped = 0
        """Discarded events not yet added to the counter: a cancel drops a burst of audio
        deltas, and one Ray metric update per event would cost more than the events."""

    def turn_ended(self) -> None:
        self._turn_ended_at = time.monotonic()
        self._metrics.turns.inc()

    def cancelled(self, reason: str) -> None:
        self._cancelled_at = time.monotonic()
        self._metrics.cancels.inc(tags={"reason": reason})

    def held_dropped(self, reason: str) -> None:
        self._metrics.held_dropped.inc(tags={"reason": reason})

    def interruption(self, confirmed: bool, heard_s: float) -> None:
        """Speech during an answer was decided on after ``heard_s`` of it."""
        self._metrics.interruptions.inc(tags={"outcome": "confirmed" if confirmed else "ignored"})
        if confirmed:
            self._metrics.interruption_confirmed.observe(heard_s)

    def response_ended(self, timeline: dict[str, Any]) -> None:
        self._metrics.recent_turns.append(timeline)

    def dropped(self, event: Any) -> None:
        self._dropped += 1

    def sent(self, event: Any) -> None:
        if event.type == "response.output_audio.delta" and self._turn_ended_at is not None:
            self._metrics.voice_to_voice.observe(time.monotonic() - self._turn_ended_at)
            self._turn_ended_at = None
        elif event.type == "response.done":
            status = event.response.status
            self._metrics.responses.inc(tags={"status": status})
            self.flush()
            if status == "cancelled" and self._cancelled_at is not None:
                self._metrics.barge_in_stop.observe(time.monotonic() - self._cancelled_at)
                self._cancelled_at = None
        elif event.type == "error":
            self._metrics.error_sent(event)

    def flush(self) -> None:
        """Add what was counted locally to the replica's metrics (each ``response.done``, and
        at the session's end)."""
        if self._dropped:
            self._metrics.discarded.inc(self._dropped)
            self._dropped = 0
