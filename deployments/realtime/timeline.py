"""Where one turn's time goes: the ingress marks each step of an answer as it happens.

Reported per response at ``GET /stats/turns`` (``make bench-e2e`` reads it), in ms relative
to the end of the user's turn (``speech_stopped``, or ``response.create``); steps of a
speculative answer started in the pause before that end are negative.
"""

import time
from typing import Any

TURN_STEPS = ("speech_paused", "speech_stopped", "requested", "transcribed")
"""Steps of the user's turn; the rest are steps of one answer to it."""
STEPS = (
    *TURN_STEPS,
    "prompt_ready",
    "llm_first_delta",
    "first_piece",
    "tts_first_audio",
    "first_audio",
)


class Timeline:
    def __init__(self) -> None:
        self._marks: dict[str, float] = {}
        self.vad_lag_ms: float | None = None
        """How long after its audio arrived the VAD reported the turn's end (batching, call)."""
        self.adopted = False
        """The answer was started speculatively in the pause and shown as it was."""

    def for_fresh_answer(self) -> "Timeline":
        """The turn's steps without the answer's: for an answer started over."""
        fresh = Timeline()
        fresh._marks = {step: at for step, at in self._marks.items() if step in TURN_STEPS}
        fresh.vad_lag_ms = self.vad_lag_ms
        return fresh

    def mark(self, step: str) -> None:
        """``step`` happened now (only its first occurrence counts)."""
        assert step in STEPS, step
        if step not in self._marks:  # called per frame and per delta: read the clock once
            self._marks[step] = time.monotonic()

    def report(self, response_id: str, status: str) -> dict[str, Any]:
        origin = self._marks.get("speech_stopped", self._marks.get("requested"))
        steps = {
            f"{step}_ms": round((self._marks[step] - origin) * 1000, 1)
            for step in STEPS
            if step in self._marks and origin is not None
        }
        facts = {"response_id": response_id, "status": status, "adopted": self.adopted, "vad_lag_ms": self.vad_lag_ms}
        return facts | steps
