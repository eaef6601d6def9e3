"""Spoken turns on the real models, traced to a real OTLP receiver (``otlp_receiver``, which
every app of the suite exports to): each session's trace holds its turns, each turn its
stages, each stage the model replica's own span; the client's voice-to-voice is the trace's;
and an interrupted session's trace says so, alone (several sessions through the same replicas)."""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from otlp_receiver import OTLPReceiver, ReceivedSpan
from realtime_client import LONG_QUESTION, Client, open_client, sessions_released

from deployments.realtime.session_trace import SESSION_SPAN
from deployments.realtime.timeline import TIMINGS_KEY
from handlers.audio import REALTIME_RATE

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

QUESTIONS = ["What is the capital of France?", "What color is the sky?"]
REPLICA_SPANS = {"stt": ("stt.transcribe", "s2s-stt"), "llm_node": ("llm.generate", "s2s-llm")}
VOICE_TO_VOICE_SLACK_MS = 300
"""How far the server's voice-to-voice may be from the client's: the VAD places the end of
speech within Piper's trailing quiet, and the socket and the SDK's reader add a little."""


@pytest.fixture(autouse=True)
async def released(realtime_url: str) -> None:
    await sessions_released(realtime_url)


async def speak(client: Client, pcm24k: Callable[..., bytes], text: str) -> float:
    """Say ``text`` at microphone pace, then a second of silence; when the speech ended."""
    await client.send_audio(pcm24k(text, silence_s=0.0), realtime=True)
    ended = time.monotonic()
    await client.send_audio(bytes(2 * REALTIME_RATE), realtime=True)
    return ended


async def spoken_turn(client: Client, pcm24k: Callable[..., bytes], text: str) -> tuple[Any, float]:
    """One spoken question answered: its ``response.done``, and the voice-to-voice the client
    measured (the end of its speech to the answer's first audio)."""
    speech_ended = await speak(client, pcm24k, text)
    first = await client.until(lambda e: e.type == "response.output_audio.delta")
    heard_at = client.received_at[-1]
    done = await client.until(lambda e: e.type == "response.done" and e.response.id == first.response_id)
    return done, (heard_at - speech_ended) * 1000


def session_id(client: Client) -> str:
    created = next(e for e in client.events if e.type == "session.created")
    return str(created.session.id)


def tree(spans: list[ReceivedSpan], root: ReceivedSpan, depth: int = 0) -> list[str]:
    """The spans under ``root`` as an indented list (printed on failure, and in the docs)."""
    lines = [f"{'  ' * depth}{root.name} [{root.service}] {root.ms:.1f} ms"]
    for child in sorted((s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_ns):
        lines += tree(spans, child, depth + 1)
    return lines


def sessions_traced(ids: set[str]) -> Callable[[list[ReceivedSpan]], bool]:
    def found(spans: list[ReceivedSpan]) -> bool:
        return ids <= {s.attributes.get("s2s.session.id") for s in spans if s.name == SESSION_SPAN}

    return found


def calls_traced(response_ids: set[str]) -> Callable[[list[ReceivedSpan]], bool]:
    """Whether the turns answering ``response_ids`` and each of their model calls' replica
    spans have arrived (each process exports on its own schedule)."""

    def found(spans: list[ReceivedSpan]) -> bool:
        turns = {s.span_id for s in spans if s.attributes.get("s2s.response.id") in response_ids}
        calls = [s.span_id for s in spans if s.parent_id in turns and s.name in ("stt", "llm_node", "tts_node")]
        parents = {s.parent_id for s in spans}
        return len(turns) == len(response_ids) and all(call in parents for call in calls)

    return found


async def test_each_sessions_spoken_turns_are_one_trace_down_to_the_replicas_and_only_the_interrupted_one_says_so(
    realtime_url: str, pcm24k: Callable[..., bytes], otlp_receiver: OTLPReceiver
) -> None:
    async with (
        open_client(realtime_url) as named,
        open_client(realtime_url) as auto,
        open_client(realtime_url) as interrupted,
    ):
        tracing = {"workflow_name": "trace-test", "group_id": "suite", "metadata": {"case": "named"}}
        await named.connection.session.update(session={"type": "realtime", "tracing": tracing})
        await auto.connection.session.update(session={"type": "realtime", "tracing": "auto"})
        await interrupted.connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_QUESTION}]}
        )
        await interrupted.connection.response.create()
        story = await interrupted.until(lambda e: e.type == "response.output_audio.delta")
        (named_done, named_v2v), (auto_done, auto_v2v), _ = await asyncio.gather(
            spoken_turn(named, pcm24k, QUESTIONS[0]),
            spoken_turn(auto, pcm24k, QUESTIONS[1]),
            speak(interrupted, pcm24k, "Stop, please tell me about the sea instead."),
        )
        cut = await interrupted.until(lambda e: e.type == "response.done" and e.response.id == story.response_id)
        assert cut.response.status == "cancelled"
        ids = {client: session_id(client) for client in (named, auto, interrupted)}
    otlp_receiver.wait_for(sessions_traced(set(ids.values())))
    spans = otlp_receiver.wait_for(calls_traced({named_done.response.id, auto_done.response.id}))

    ours = set(ids.values())  # (the receiver has every session the suite served)
    roots = {s.attributes["s2s.session.id"]: s for s in spans if s.attributes.get("s2s.session.id") in ours}
    assert len({root.trace_id for root in roots.values()}) == 3, "one trace per session"
    assert roots[ids[named]].attributes["s2s.tracing.workflow_name"] == "trace-test"
    assert roots[ids[named]].attributes["s2s.tracing.group_id"] == "suite"
    assert roots[ids[named]].attributes["s2s.tracing.metadata.case"] == "named"
    assert roots[ids[auto]].attributes["s2s.tracing.workflow_name"] == SESSION_SPAN

    for client, done, client_v2v in ((named, named_done, named_v2v), (auto, auto_done, auto_v2v)):
        root = roots[ids[client]]
        trace = otlp_receiver.trace(root.trace_id)
        shown = "\n".join(tree(trace, root))
        print(shown)  # the tree docs/observability.md shows
        turn = next(s for s in trace if s.attributes.get("s2s.response.id") == done.response.id)
        assert turn.name == "agent_turn" and turn.parent_id == root.span_id, shown
        stages = {s.name: s for s in trace if s.parent_id == turn.span_id}
        assert {"eou_detection", "stt", "llm_node", "tts_node", "playout"} <= set(stages), shown
        for stage, (replica_span, service) in REPLICA_SPANS.items():
            below = [s for s in trace if s.parent_id == stages[stage].span_id]
            assert [(s.name, s.service) for s in below] == [(replica_span, service)], shown
        pieces = [s for s in trace if s.parent_id == stages["tts_node"].span_id]  # one synthesis call each
        assert pieces and {(s.name, s.service) for s in pieces} == {("tts.synthesize", "s2s-tts")}, shown
        # What the client was told is what the trace says, and both are what the client measured.
        timings = json.loads(done.response.metadata[TIMINGS_KEY])
        assert timings["first_audio_ms"] == turn.attributes["s2s.timing.first_audio_ms"]
        assert abs(stages["eou_detection"].ms - timings["end_of_turn_wait_ms"]) < 1, shown
        assert abs(timings["first_audio_ms"] - client_v2v) < VOICE_TO_VOICE_SLACK_MS, (timings, client_v2v, shown)
        assert turn.attributes["lk.interrupted"] is False
        assert stages["eou_detection"].end_ns <= stages["llm_node"].start_ns <= stages["playout"].start_ns, shown

    cut_trace = otlp_receiver.trace(roots[ids[interrupted]].trace_id)
    (cut_turn,) = [s for s in cut_trace if s.attributes.get("s2s.response.id") == cut.response.id]
    assert cut_turn.attributes["lk.interrupted"] is True
    assert cut_turn.attributes["s2s.cancel.reason"] == "turn_detected"
    assert "interruption" in cut_turn.events
    others = {named_done.response.id, auto_done.response.id}
    assert not any(s.attributes.get("s2s.response.id") in others for s in cut_trace), "no other session's turn"
    calm_traces = {roots[ids[named]].trace_id, roots[ids[auto]].trace_id}
    assert not any(s.attributes.get("lk.interrupted") for s in spans if s.trace_id in calm_traces)
