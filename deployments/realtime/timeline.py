"""Where one turn's time goes: the ingress marks each step of an answer as it happens.

Reported three ways: per response at ``GET /stats/turns`` (``s2s-bench e2e`` reads it), in
ms relative to the end of the user's turn (``speech_stopped``, or ``response.create``; steps
of a speculative answer started in the pause before that end are negative); in each
``response.done`` (:meth:`Timeline.timings`, from the end of the user's speech); and as the
answer's span of the session's trace (:class:`TurnTrace`).
"""

import json
import time
from typing import Any

from deployments.realtime.turn_trace import StageSpan, TurnTrace

TURN_STEPS = ("speech_paused", "speech_end", "speech_stopped", "requested", "transcribed")
"""Steps of the user's turn; the rest are steps of one answer to it."""
STEPS = (
    *TURN_STEPS,
    "prompt_ready",
    "llm_first_delta",
    "first_piece",
    "tts_first_audio",
    "first_audio",
    "shown",
)
TIMINGS = {
    "speech_stopped": "end_of_turn_wait_ms",
    "transcribed": "transcript_ms",
    "llm_first_delta": "first_token_ms",
    "tts_first_audio": "tts_first_audio_ms",
    "first_audio": "first_audio_ms",
}
"""What ``response.done`` tells of a turn: each step's time from the end of the speech."""
TIMINGS_KEY = "turn_timings"
"""The ``response.metadata`` key of :meth:`Timeline.timings`, a JSON string: metadata values
are strings, so stock clients that validate them (the Agents SDK) take it, and those that
know nothing of it (Pipecat) drop it."""


class Timeline:
    def __init__(self, heard_lag_s: float | None = None, started_at: float | None = None) -> None:
        """``heard_lag_s``: how long ago the audio that began this turn arrived;
        ``started_at``: when the turn began (``time.monotonic()``), if earlier."""
        started_at = started_at if started_at is not None else time.monotonic() - (heard_lag_s or 0.0)
        self._marks: dict[str, float] = {}
        self.vad_lag_ms: float | None = None
        """How long after its audio arrived the VAD reported the turn's end (batching, call)."""
        self.adopted = False
        """The answer was started speculatively in the pause and shown as it was."""
        self.trace = TurnTrace(started_at)
        self._told: dict[str, str] | None = None
        """The metadata of the answer's ``response.done``, if made while the answer was held."""

    def for_fresh_answer(self) -> "Timeline":
        """The turn's steps without the answer's: for an answer started over."""
        fresh = Timeline(started_at=self._marks.get("speech_end"))
        fresh._marks = {step: at for step, at in self._marks.items() if step in TURN_STEPS}
        fresh.vad_lag_ms = self.vad_lag_ms
        return fresh

    def mark(self, step: str) -> None:
        """``step`` happened now (only its first occurrence counts)."""
        assert step in STEPS, step
        if step not in self._marks:  # called per frame and per delta: read the clock once
            self._marks[step] = time.monotonic()

    def speech_stopped(self, lag_s: float | None) -> None:
        """The user's turn ended now, ``lag_s`` after the end of the speech's audio arrived."""
        self.mark("speech_stopped")
        if lag_s is not None:
            self._marks.setdefault("speech_end", self._marks["speech_stopped"] - lag_s)

    def stage(self, name: str) -> StageSpan:
        """A model stage's call starts now (its span in the turn's trace)."""
        return self.trace.stage(name)

    def timings(self) -> dict[str, float]:
        """The turn's steps in ms from the end of the user's speech (or of its turn, or the
        request), for ``response.done``."""
        at = self._as_sent()
        origin = at.get("speech_end", at.get("speech_stopped", at.get("requested")))
        if origin is None:
            return {}
        return {name: round((at[step] - origin) * 1000, 1) for step, name in TIMINGS.items() if step in at}

    def _as_sent(self) -> dict[str, float]:
        """The marks as the client saw them: audio of an answer made held (in the user's
        pause) goes out when the answer is shown, not when it was queued."""
        if "first_audio" not in self._marks:
            return self._marks
        return self._marks | {"first_audio": max(self._marks["first_audio"], self._marks.get("shown", 0.0))}

    def tell(self, metadata: dict[str, str]) -> None:
        """Put the timings in ``response.done``'s ``metadata``; if the answer is held, they are
        brought up to date when it is shown (:meth:`shown`)."""
        timings = self.timings()
        if timings:
            metadata[TIMINGS_KEY] = json.dumps(timings, separators=(",", ":"))
        self._told = metadata

    def shown(self) -> None:
        """The held answer is shown now: what it queued goes out."""
        self.mark("shown")
        if self._told is not None:
            self.tell(self._told)

    def report(self, response_id: str, status: str) -> dict[str, Any]:
        origin = self._marks.get("speech_stopped", self._marks.get("requested"))
        steps = {
            f"{step}_ms": round((self._marks[step] - origin) * 1000, 1)
            for step in STEPS
            if step in self._marks and origin is not None and step != "speech_end"
        }
        facts = {"response_id": response_id, "status": status, "adopted": self.adopted, "vad_lag_ms": self.vad_lag_ms}
        return facts | steps

    def end(self, response_id: str, status: str, reason: str | None = None) -> None:
        """The answer ended (or was dropped unseen): its span ends."""
        timings = self.timings()
        attributes: dict[str, float | str | bool] = {
            "s2s.response.id": response_id,
            "s2s.response.status": status,
            "s2s.adopted": self.adopted,
            "lk.interrupted": reason == "turn_detected",
        }
        attributes |= {f"s2s.timing.{name}": value for name, value in timings.items()}
        if "first_audio_ms" in timings:
            attributes["lk.e2e_latency"] = timings["first_audio_ms"] / 1000
        if "prompt_ready" in self._marks and "llm_first_delta" in self._marks:
            attributes["lk.response.ttft"] = self._marks["llm_first_delta"] - self._marks["prompt_ready"]
        if reason is not None:
            attributes["s2s.cancel.reason"] = reason
        self.trace.end(self._as_sent(), attributes)
