"""A session's metrics: discarded events are counted locally and reach the replica's Ray
counter once per ``response.done`` (and at the session's end), not once per event."""

from types import SimpleNamespace
from typing import Any

from deployments.metrics import SessionMetrics


class RecordingCounter:
    def __init__(self) -> None:
        self.increments: list[float] = []

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        self.increments.append(value)


def done(status: str) -> Any:
    return SimpleNamespace(type="response.done", response=SimpleNamespace(status=status))


def test_discarded_events_reach_the_counter_per_response_not_per_event() -> None:
    replica: Any = SimpleNamespace(discarded=RecordingCounter(), responses=RecordingCounter())
    metrics = SessionMetrics(replica)
    for _ in range(40):
        metrics.dropped(SimpleNamespace(type="response.output_audio.delta"))
    assert replica.discarded.increments == []  # nothing per event
    metrics.sent(done("cancelled"))
    assert replica.discarded.increments == [40]
    metrics.dropped(SimpleNamespace(type="response.output_audio.delta"))
    metrics.flush()  # the session ended
    metrics.flush()
    assert replica.discarded.increments == [40, 1]
