"""One answer as a span of its session's trace, with a child span per stage.

Names follow LiveKit Agents' (``agent_turn``, ``eou_detection``, ``stt``, ``llm_node``,
``tts_node``, ``lk.e2e_latency``, ``lk.interrupted``, ``lk.response.ttft``), so dashboards
built for them carry over. Stages that call a model (STT, LLM, TTS) are live spans, so the
replica's own span nests under the call that made it (``StageSpan.carrier``); the end-of-turn
wait and the playout call nothing and are written when the answer ends, from its marks.

With tracing off or the session not sampled, every span here is the API's non-recording
one: no span is built, nothing is kept.
"""

import time
from collections.abc import Mapping

from opentelemetry import trace

from deployments.telemetry import Carrier, carrier, tracer


def wall_ns(monotonic_s: float) -> int:
    """A ``time.monotonic()`` reading as the wall-clock nanoseconds spans are stamped in."""
    return time.time_ns() - round((time.monotonic() - monotonic_s) * 1e9)


class StageSpan:
    """A stage's call: its span, and the carrier that puts the replica's span under it."""

    __slots__ = ("span", "carrier")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.carrier: Carrier | None = carrier(span)

    def end(self, end_ns: int | None = None, **attributes: float | str | bool) -> None:
        """The stage ended (at ``end_ns``, wall-clock ns, if not now)."""
        if self.span.is_recording():  # once: a stage that ends early is not ended again
            self.span.set_attributes(attributes)
            self.span.end(end_time=end_ns)


NO_STAGE = StageSpan(trace.INVALID_SPAN)


class TurnTrace:
    """The ``agent_turn`` span of one answer, a child of the session's (the current span
    where the turn began), from the end of the user's speech."""

    def __init__(self, started_at: float) -> None:
        self.span = tracer.start_span("agent_turn", start_time=wall_ns(started_at))
        self._stages: list[StageSpan] = []

    def stage(self, name: str) -> StageSpan:
        """A stage starts now."""
        if not self.span.is_recording():
            return NO_STAGE
        stage = StageSpan(tracer.start_span(name, context=trace.set_span_in_context(self.span)))
        self._stages.append(stage)
        return stage

    def function_called(self, name: str, call_id: str) -> None:
        """The model called a function (the client runs it): an event of the turn."""
        self.span.add_event("function_tool", {"lk.function_tool.name": name, "lk.function_tool.id": call_id})

    def end(self, marks: Mapping[str, float], attributes: Mapping[str, float | str | bool]) -> None:
        """The answer ended: its stages that did not end were cut short; ``marks`` (monotonic
        times of its steps) give the spans that called nothing."""
        if not self.span.is_recording():
            return
        for stage in self._stages:
            stage.end(**{"s2s.cancelled": True})
        self._retrospective("eou_detection", marks.get("speech_end"), marks.get("speech_stopped"))
        self._retrospective("playout", marks.get("first_audio"), time.monotonic())
        self.span.set_attributes(attributes)
        if attributes.get("lk.interrupted"):
            self.span.add_event("interruption", {"s2s.cancel.reason": str(attributes.get("s2s.cancel.reason"))})
        self.span.end()

    def _retrospective(self, name: str, start: float | None, end: float | None) -> None:
        if start is not None and end is not None:
            context = trace.set_span_in_context(self.span)
            tracer.start_span(name, context=context, start_time=wall_ns(start)).end(end_time=wall_ns(end))
