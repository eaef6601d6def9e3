"""A session as the root span of its trace, named as its client asked (``tracing``).

Every turn's span (``deployments.realtime.turn_trace``) is a child of it: the session runs
with this span current, and each task it starts inherits that context.
"""

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace

from deployments.telemetry import tracer

SESSION_SPAN = "realtime_session"


@contextlib.contextmanager
def session_span(session_id: str, resumed: bool, tracing: Callable[[], Any]) -> Iterator[trace.Span]:
    """The session's span, current while the session runs; ``tracing`` gives the session's
    ``tracing`` setting as it is when the session ends."""
    attributes: dict[str, str | bool] = {"s2s.session.id": session_id, "s2s.session.resumed": resumed}
    with tracer.start_as_current_span(SESSION_SPAN, attributes=attributes) as span:
        try:
            yield span
        finally:
            if span.is_recording():
                span.set_attributes(tracing_attributes(tracing()))


def tracing_attributes(tracing: Any) -> dict[str, str]:
    """The Realtime ``tracing`` setting (``"auto"``, or a workflow name, group id and
    metadata) as span attributes, which trace viewers filter and group by."""
    if tracing is None:
        return {}
    if tracing == "auto":
        return {"s2s.tracing.workflow_name": SESSION_SPAN}
    attributes = {"s2s.tracing.workflow_name": tracing.workflow_name or SESSION_SPAN}
    if tracing.group_id is not None:
        attributes["s2s.tracing.group_id"] = tracing.group_id
    metadata = tracing.metadata if isinstance(tracing.metadata, dict) else {}
    for key, value in metadata.items():
        attributes[f"s2s.tracing.metadata.{key}"] = value if isinstance(value, str) else json.dumps(value)
    return attributes
