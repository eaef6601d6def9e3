"""Each session's trace on fake stages: its turns, their stages, the carriers that put the
model replicas' spans under them, and the timings ``response.done`` tells the client.

The spans go to an in-memory exporter of this process's SDK provider; the real OTLP export
from a served app is ``tests/e2e/test_traces.py``'s.
"""

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeStages, Harness, append_audio, speech
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from test_session_tools import CALL, with_tools

from deployments import telemetry
from deployments.realtime.session_trace import SESSION_SPAN, session_span
from deployments.realtime.timeline import TIMINGS_KEY

STAGES = {"eou_detection", "stt", "llm_node", "tts_node", "playout"}


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """This process's provider (installed once: OpenTelemetry allows one per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # it keeps nothing more; the provider stays, as the SDK wants


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exporter.clear()
    yield exporter


def children(of: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    assert of.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == of.context.span_id]


def span_id_in(carrier: dict[str, str] | None) -> int:
    assert carrier is not None
    return int(carrier["traceparent"].split("-")[2], 16)


def traced(h: Harness) -> Any:
    return session_span(h.session.id, False, lambda: h.session.settings.tracing)


async def test_a_spoken_turn_is_a_trace_of_its_stages_named_as_the_session_asked(
    spans: InMemorySpanExporter,
) -> None:
    tracing = {"workflow_name": "support-line", "group_id": "customer-7", "metadata": {"plan": "gold"}}
    h = Harness()
    with traced(h):
        async with h:
            h.socket.client_sends(type="session.update", session={"type": "realtime", "tracing": tracing})
            updated = await h.socket.wait_type("session.updated")
            assert updated["session"]["tracing"] == tracing
            append_audio(h.socket, speech(1))
            done = await h.socket.wait_type("response.done")
    finished = list(spans.get_finished_spans())
    (root,) = [s for s in finished if s.name == SESSION_SPAN]
    assert root.parent is None and root.attributes is not None
    assert root.attributes["s2s.session.id"] == h.session.id
    assert root.attributes["s2s.tracing.workflow_name"] == "support-line"
    assert root.attributes["s2s.tracing.group_id"] == "customer-7"
    assert root.attributes["s2s.tracing.metadata.plan"] == "gold"
    (turn,) = children(root, finished)
    assert turn.name == "agent_turn" and turn.attributes is not None
    assert turn.attributes["s2s.response.id"] == done["response"]["id"]
    assert turn.attributes["lk.interrupted"] is False
    names = [s.name for s in children(turn, finished)]
    assert set(names) == STAGES and names.count("tts_node") == 1, "one span over the answer's two pieces"
    stages = {s.name: s for s in children(turn, finished)}
    # The replicas' spans go under the calls: each call carried its own stage's context.
    assert span_id_in(h.stages.traces[0]) == stages["stt"].context.span_id  # type: ignore[union-attr]
    assert span_id_in(h.stages.llm_requests[0].trace) == stages["llm_node"].context.span_id  # type: ignore[union-attr]
    # In order, from the end of the speech; and what the client is told is what the trace says.
    timings = json.loads(done["response"]["metadata"][TIMINGS_KEY])
    assert timings == {name[len("s2s.timing.") :]: v for name, v in turn.attributes.items() if "timing" in name}
    # (a pause is transcribed and answered held before the turn ends: only the audio waits for it)
    assert set(timings) == {
        "end_of_turn_wait_ms",
        "transcript_ms",
        "first_token_ms",
        "tts_first_audio_ms",
        "first_audio_ms",
    }
    assert min(timings.values()) >= 0 and max(timings.values()) == timings["first_audio_ms"]
    assert timings["first_audio_ms"] >= timings["end_of_turn_wait_ms"], "held audio goes out when the turn ends"
    assert turn.attributes["lk.e2e_latency"] == timings["first_audio_ms"] / 1000
    eou, playout = stages["eou_detection"], stages["playout"]
    assert eou.end_time is not None and playout.start_time is not None and turn.start_time is not None
    assert turn.start_time <= eou.end_time
    assert eou.end_time <= playout.start_time and stages["llm_node"].start_time <= playout.start_time  # type: ignore[operator]


async def test_sessions_on_the_same_stages_have_their_own_traces_and_only_the_interrupted_turn_says_so(
    spans: InMemorySpanExporter,
) -> None:
    stages = FakeStages()
    stages.tts_gate.close()  # both answers are under way when one of them is interrupted
    interrupted, calm = Harness(stages, name="interrupted"), Harness(stages, name="calm")
    ended = asyncio.Event()

    async def session(h: Harness) -> None:
        with traced(h):
            async with h:
                await ended.wait()

    tasks = [asyncio.create_task(session(h)) for h in (interrupted, calm)]
    for h, question in ((interrupted, 1), (calm, 2)):
        await h.socket.wait_type("session.created")
        append_audio(h.socket, speech(question))
        await h.socket.wait_type("response.created")
    append_audio(interrupted.socket, speech(3, silence_s=0.2))
    cancelled = await interrupted.socket.wait_type("response.done")
    stages.tts_gate.open()
    completed = await calm.socket.wait_type("response.done")
    ended.set()
    await asyncio.gather(*tasks)
    assert (cancelled["response"]["status"], completed["response"]["status"]) == ("cancelled", "completed")

    finished = list(spans.get_finished_spans())
    roots = {s.attributes["s2s.session.id"]: s for s in finished if s.name == SESSION_SPAN}  # type: ignore[index]
    for harness, done, was_cut in ((interrupted, cancelled, True), (calm, completed, False)):
        root = roots[harness.session.id]
        turns = [s for s in children(root, finished) if s.name == "agent_turn"]
        turn = next(t for t in turns if t.attributes["s2s.response.id"] == done["response"]["id"])  # type: ignore[index]
        assert turn.context.trace_id == root.context.trace_id  # type: ignore[union-attr]
        assert turn.attributes["lk.interrupted"] is was_cut  # type: ignore[index]
        assert all(s.context.trace_id == root.context.trace_id for s in children(turn, finished))  # type: ignore[union-attr]
        cut_short = [s.name for s in children(turn, finished) if s.attributes.get("s2s.cancelled")]  # type: ignore[union-attr]
        assert bool(cut_short) is was_cut, cut_short
    assert roots[interrupted.session.id].context.trace_id != roots[calm.session.id].context.trace_id  # type: ignore[union-attr]
    # Every model call carried its own session's trace, never the other's.
    trace_of = {harness.scope.session_id: roots[harness.session.id].context.trace_id for harness in (interrupted, calm)}  # type: ignore[union-attr]
    for request in stages.llm_requests:
        assert request.trace is not None
        assert int(request.trace["traceparent"].split("-")[1], 16) == trace_of[request.ticket.session_id]


async def test_an_unsampled_session_records_nothing_and_sends_no_carrier(spans: InMemorySpanExporter) -> None:
    unsampled = NonRecordingSpan(SpanContext(0x1F, 0x2F, is_remote=True, trace_flags=TraceFlags(TraceFlags.DEFAULT)))
    h = Harness()
    with trace.use_span(unsampled):
        async with h:
            append_audio(h.socket, speech(1))
            done = await h.socket.wait_type("response.done")
    assert spans.get_finished_spans() == ()
    assert h.stages.traces and not any(h.stages.traces) and h.stages.llm_requests[0].trace is None
    assert TIMINGS_KEY in done["response"]["metadata"]  # the client's timings do not depend on tracing


def test_tracing_is_on_only_with_an_endpoint_and_the_sdk_enabled() -> None:
    endpoint = "http://collector:4318"
    assert not telemetry.enabled_by({})
    assert telemetry.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert telemetry.enabled_by({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint})
    assert not telemetry.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true"})
    assert not telemetry.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none"})


async def test_a_function_call_is_an_event_of_its_turn(spans: InMemorySpanExporter) -> None:
    h = Harness()
    with traced(h):
        async with h:
            await with_tools(h, tool_choice={"type": "function", "name": "get_weather"})
            h.stages.answer = CALL
            h.socket.client_sends(type="response.create")
            done = await h.socket.wait_type("response.done")
    (turn,) = [s for s in spans.get_finished_spans() if s.name == "agent_turn"]
    assert turn.attributes is not None and turn.attributes["s2s.response.id"] == done["response"]["id"]
    (event,) = [e for e in turn.events if e.name == "function_tool"]
    assert dict(event.attributes or {}) == {"lk.function_tool.name": "get_weather", "lk.function_tool.id": "call_abc"}
