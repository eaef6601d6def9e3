"""OpenTelemetry tracing for each process of the app: off unless an OTLP endpoint is set.

Configured the OpenTelemetry way, from the environment, which Ray hands to every replica:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) turns it on, and
the SDK reads the rest itself (``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with
``OTEL_TRACES_SAMPLER_ARG=0.1`` samples one session in ten; headers, timeouts, batching).
Off, the API's no-op tracer answers every call, and no span, export or thread exists.

The ingress decides once per session (the root span) and model replicas follow it: a call
carries its caller's context as a W3C ``traceparent`` carrier (:func:`carrier`), and the
replica's span joins that trace (:func:`remote_span`). Ray Serve's own request tracing
(``TracingConfig``) is not used: it would make a root trace of every handle call, VAD ticks
included, and cannot name the session's turns.
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

logger = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
TRACER_NAME = "s2s-serve"
Carrier = dict[str, str]

_propagator = TraceContextTextMapPropagator()
tracer = trace.get_tracer(TRACER_NAME)
"""A proxy: the no-op tracer until :func:`configure` installs the SDK's."""


def enabled_by(environ: "os._Environ[str] | dict[str, str]") -> bool:
    """Whether ``environ`` asks for traces: an endpoint set, and the SDK not disabled."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").lower() == "true"
    exporter_off = environ.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none"
    return any(environ.get(name) for name in ENDPOINT_VARIABLES) and not disabled and not exporter_off


def configure(service: str) -> bool:
    """Install the SDK's tracer provider for this process (once; later calls keep the
    first), exporting over OTLP/HTTP in batches; ``False`` when tracing is off."""
    if not enabled_by(os.environ):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return True  # an ingress and a model deployment may share a worker process
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    logger.info("tracing %s to %s", service, next(os.environ[n] for n in ENDPOINT_VARIABLES if os.environ.get(n)))
    return True


def carrier(span: trace.Span | None = None) -> Carrier | None:
    """``span``'s context (default: the current span's) for a remote call; ``None`` when it
    is not recorded."""
    span = span or trace.get_current_span()
    if not span.is_recording():
        return None
    headers: Carrier = {}
    _propagator.inject(headers, context=trace.set_span_in_context(span))
    return headers


@contextlib.contextmanager
def remote_span(
    name: str, parent: Carrier | None, stopped_by: tuple[type[BaseException], ...] = ()
) -> Iterator[trace.Span]:
    """A replica's span for one call, in its caller's trace; none without a carrier (the
    caller's session is not sampled, or tracing is off). Not made current: a streaming
    call's generator may resume in another context, and nothing nests under it here.
    ``stopped_by``: exceptions that end the call as cancelled, not failed."""
    if parent is None:
        yield trace.INVALID_SPAN
        return
    span = tracer.start_span(name, context=_propagator.extract(parent), kind=trace.SpanKind.SERVER)
    try:
        yield span
    except (GeneratorExit, asyncio.CancelledError, *stopped_by):  # type: ignore[misc]  # mypy#12134
        span.set_attribute("s2s.cancelled", True)  # a barge-in's normal end, not an error
        raise
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(trace.StatusCode.ERROR, repr(exc))
        raise
    finally:
        span.end()
