"""A real OTLP/HTTP receiver for the suite: oteltest's sink decodes what the app's exporters
send (protobuf over HTTP, as to any collector), and this keeps each span for the tests."""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oteltest.sink import HttpSink
from oteltest.sink.handler import RequestHandler

from deployments.ports import free_port


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[str]

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


def _received(span: Any, service: str) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        service=service,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex(),
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes={a.key: _value(a.value) for a in span.attributes},
        events=[event.name for event in span.events],
    )


class OTLPReceiver(RequestHandler):  # type: ignore[misc]
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._spans: list[ReceivedSpan] = []
        self._arrived = threading.Condition()
        self._sink = HttpSink(self, logging.getLogger(__name__), port=self.port)

    def __enter__(self) -> "OTLPReceiver":
        self._sink.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sink.stop()

    def handle_trace(self, request: Any, headers: Any) -> None:
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                spans.extend(_received(span, resource.get("service.name", "")) for span in scope_spans.spans)
        with self._arrived:
            self._spans.extend(spans)
            self._arrived.notify_all()

    def handle_metrics(self, request: Any, headers: Any) -> None:
        return

    def handle_logs(self, request: Any, headers: Any) -> None:
        return

    def wait_for(self, found: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """Every span received, once ``found`` holds of them (checked as each export arrives)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: found(self._spans), timeout_s):
                raise TimeoutError(f"spans not received in {timeout_s} s; have {sorted({s.name for s in self._spans})}")
            return list(self._spans)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._arrived:
            return [span for span in self._spans if span.trace_id == trace_id]
