"""A session's metrics: discarded events are counted locally and reach the replica's Ray
counter once per ``response.done`` (and at the session's end), not once per event; a real
interruption's confirmation time is observed, an ignored one's only counted."""

from types import SimpleNamespace
from typing import Any

from deployments.metrics import SessionMetrics


class RecordingCounter:
    def __init__(self) -> None:
        self.increments: list[float] = []

    def inc(self, value: float = 1.0, tags: dict[str, str] | None = None) -> None:
        self.increments.append(value)


class RecordingHistogram:
    def __init__(self) -> None:
        self.observed: list[float] = []

    def observe(self, value: float, tags: dict[str, str] | None = None) -> None:
        self.observed.append(value)


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


def test_only_a_confirmed_interruption_is_timed() -> None:
    replica: Any = SimpleNamespace(interruptions=RecordingCounter(), interruption_confirmed=RecordingHistogram())
    metrics = SessionMetrics(replica)
    metrics.interruption(False, 0.9)
    metrics.interruption(True, 0.2)
    assert (replica.interruptions.increments, replica.interruption_confirmed.observed) == ([1.0, 1.0], [0.2])
