"""The session at its edges, on fake stages: bad events, input limits, stage failures and
timeouts, long conversations. Each bad input gets an ``error`` and the session goes on."""

import asyncio
import base64
import json
from typing import Any

import pytest
from fakes import FakeStages, Harness, append_audio, speech
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.realtime.items import AssistantMessage

TURN = {"type": "server_vad"}
BAD_EVENTS: list[tuple[str, str, str | None]] = [
    # (raw text, expected error code, expected param)
    ("[" * 1000 + "]" * 1000, "invalid_json", None),
    ('{"type": "session.update", "event_id": ' + "7" * 5000 + "}", "invalid_json", None),
    ('{"type": ["response.create"]}', "invalid_event", "type"),
    ('{"type": 42}', "invalid_event", "type"),
    ("not json", "invalid_json", None),
    ('"a string"', "invalid_event", None),
    (
        json.dumps({"type": "session.update", "session": {"type": "realtime", "x": {"a": [[[[[[[[1]]]]]]]]}}}),
        None,  # an unknown field is ignored, as OpenAI's server does: no error
        None,
    ),
]
WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
BAD_SETTINGS: list[tuple[dict[str, Any], str, str]] = [
    ({"audio": {"input": {"turn_detection": {**TURN, "threshold": 5}}}}, "invalid_value", "threshold"),
    ({"audio": {"input": {"turn_detection": {**TURN, "threshold": float("nan")}}}}, "invalid_value", "threshold"),
    (
        {"audio": {"input": {"turn_detection": {**TURN, "silence_duration_ms": 20000}}}},
        "invalid_value",
        "silence_duration_ms",
    ),
    ({"audio": {"input": {"turn_detection": {**TURN, "prefix_padding_ms": -1}}}}, "invalid_value", "prefix_padding_ms"),
    ({"audio": {"input": {"turn_detection": {**TURN, "idle_timeout_ms": 100}}}}, "invalid_value", "idle_timeout_ms"),
    ({"audio": {"output": {"speed": 3}}}, "invalid_value", "speed"),
    ({"max_output_tokens": 0}, "invalid_value", "max_output_tokens"),
    ({"max_output_tokens": 5000}, "invalid_value", "max_output_tokens"),
    ({"instructions": "x" * 5000}, "invalid_value", "instructions"),
    ({"tools": [{"type": "mcp", "server_label": "docs", "server_url": "https://x"}]}, "unsupported_value", "type"),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "invalid_value", "name"),
    ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "invalid_value", "tools"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "invalid_value", "tool_choice"),
    ({"tracing": {"metadata": {f"k{i}": "v" for i in range(17)}}}, "invalid_value", "metadata"),
    ({"tracing": {"metadata": {"k" * 65: "v"}}}, "invalid_value", "metadata"),
    ({"tracing": {"metadata": {"plan": "x" * 513}}}, "invalid_value", "metadata"),
    ({"tracing": {"metadata": {"plan": ["x" * 510]}}}, "invalid_value", "metadata"),  # 514 as JSON
    ({"tracing": {"group_id": "g" * 513}}, "invalid_value", "group_id"),
]


async def answer_completes(h: Harness, count: int = 1) -> dict[str, Any]:
    h.socket.client_sends(type="response.create")
    done = await h.socket.wait_type("response.done", count=count)
    assert done["response"]["status"] == "completed"
    return done


async def test_malformed_events_get_an_error_and_the_session_goes_on() -> None:
    async with Harness() as h:
        for raw, _, _ in BAD_EVENTS:
            h.socket.incoming.put_nowait({"type": "websocket.receive", "text": raw})
        h.socket.incoming.put_nowait({"type": "websocket.receive", "bytes": b"\xff\x00binary"})
        expected = [(code, param) for _, code, param in BAD_EVENTS if code is not None] + [("invalid_json", None)]
        await h.socket.wait_type("error", count=len(expected))
        got = [(e["error"]["code"], e["error"].get("param")) for e in h.socket.of_type("error")]
        assert got == expected
        await answer_completes(h)


@pytest.mark.parametrize(("session", "code", "param"), BAD_SETTINGS, ids=[p for _, _, p in BAD_SETTINGS])
async def test_settings_out_of_openai_bounds_are_refused_and_change_nothing(
    session: dict[str, Any], code: str, param: str
) -> None:
    async with Harness() as h:
        before = h.session.settings.describe()
        h.socket.client_sends(type="session.update", session={"type": "realtime", **session})
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"].rsplit(".", 1)[-1]) == (code, param)
        assert h.session.settings.describe() == before
        await answer_completes(h)


async def test_tracing_at_its_bounds_is_accepted_and_shown() -> None:
    """16 metadata entries, keys of 64 characters, values and names of 512: served."""
    tracing = {
        "workflow_name": "w" * 512,
        "group_id": "g" * 512,
        "metadata": {f"{i:02}" + "k" * 62: "v" * 512 for i in range(16)},
    }
    async with Harness() as h:
        h.socket.client_sends(type="session.update", session={"type": "realtime", "tracing": tracing})
        updated = await h.socket.wait_type("session.updated")
        assert updated["session"]["tracing"] == tracing
        assert h.socket.of_type("error") == []


async def test_bad_truncates_and_items_are_refused() -> None:
    async with Harness() as h:
        done = await answer_completes(h)
        item_id = done["response"]["output"][0]["id"]
        for content_index in (7, -1):
            h.socket.client_sends(
                type="conversation.item.truncate", item_id=item_id, content_index=content_index, audio_end_ms=0
            )
        h.socket.client_sends(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=-5)
        text = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 5000}]}
        h.socket.client_sends(type="conversation.item.create", item=text)
        await h.socket.wait_type("error", count=4)
        params = [e["error"]["param"] for e in h.socket.of_type("error")]
        assert params == ["content_index", "content_index", "audio_end_ms", "item.content"]
        await answer_completes(h, count=2)


async def test_an_exception_in_a_handler_is_an_error_not_a_dead_session() -> None:
    stages = FakeStages()
    async with Harness(stages) as h:
        h.socket.client_sends(
            type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        )
        await h.socket.wait_type("session.updated")
        stages.fail_transcribe = RuntimeError("bug in a stage client")
        append_audio(h.socket, speech(1))
        h.socket.client_sends(type="input_audio_buffer.commit")
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["type"], error["code"]) == ("server_error", "event_failed")
        assert "bug" not in error["message"]
        stages.fail_transcribe = None
        await answer_completes(h)


async def test_an_event_over_the_size_limit_is_refused_and_the_session_goes_on() -> None:
    async with Harness(limits={"max_event_bytes": 4096}) as h:
        h.socket.client_sends(type="input_audio_buffer.append", audio=base64.b64encode(bytes(8000)).decode())
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"]) == ("event_too_large", "max_event_bytes")
        await answer_completes(h)


class ErrorsSeen(SessionMetrics):
    """The session's metrics, and the codes of the errors they counted."""

    def __init__(self) -> None:
        super().__init__(IngressMetrics())
        self.codes: list[str] = []

    def sent(self, event: Any) -> None:
        super().sent(event)
        if event.type == "error":
            self.codes.append(event.error.code)


async def test_audio_faster_than_the_limit_is_refused_then_the_flooder_is_closed() -> None:
    limits = {"audio_rate": 1.0, "audio_burst_s": 2.0, "strikes": 5, "strike_window_s": 60}
    metrics = ErrorsSeen()
    async with Harness(limits=limits, metrics=metrics) as h:
        append_audio(h.socket, speech(1, seconds=1.0, silence_s=0.5))  # 1.5 s: within the burst
        second = bytes(48000)  # 1 s of 24 kHz PCM16
        for _ in range(8):
            h.socket.client_sends(type="input_audio_buffer.append", audio=base64.b64encode(second).decode())
        assert h.task is not None
        async with asyncio.timeout(5):
            await h.task
        errors = [e["error"]["code"] for e in h.socket.of_type("error")]
        assert errors[:5] == ["input_audio_rate_exceeded"] * 5
        assert errors[-1] == "too_many_violations"
        assert h.socket.closed is not None and h.socket.closed[0] == 1008
        assert metrics.codes == errors, "the error that closes the session is counted like the rest"


async def test_a_backlog_the_vad_cannot_keep_up_with_is_refused_not_queued() -> None:
    stages = FakeStages()
    gate = asyncio.Event()

    async def stuck_detect(state, audio):  # type: ignore[no-untyped-def]
        await gate.wait()
        return state, []

    stages.detect = stuck_detect  # type: ignore[method-assign]
    async with Harness(stages, limits={"max_queued_audio_s": 2.0}, stage_timeout_s=30) as h:
        second = base64.b64encode(bytes(48000)).decode()
        for _ in range(5):
            h.socket.client_sends(type="input_audio_buffer.append", audio=second)
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"]) == ("input_audio_backlog_full", "max_queued_audio_s")
        h.socket.client_sends(type="response.create")  # control events do not wait behind audio
        await h.socket.wait_type("response.created")
        gate.set()


async def test_a_hung_llm_fails_the_response_within_the_stage_timeout() -> None:
    stages = FakeStages()
    async with Harness(stages, stage_timeout_s=0.2) as h:
        stages.llm_gate.close()
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        error = h.socket.of_type("error")[0]["error"]
        assert error["code"] == "llm_timeout"
        assert "did not answer within 0.2 s" in error["message"]
        assert all(s.cancelled for s in stages.llm_streams)  # the hung request is cancelled
        stages.llm_gate.open()
        await answer_completes(h, count=2)


async def test_a_failed_transcription_is_reported_and_answers_nothing() -> None:
    stages = FakeStages()
    async with Harness(stages) as h:
        stages.fail_transcribe_async = True
        append_audio(h.socket, speech(1))
        failed = await h.socket.wait_type("conversation.item.input_audio_transcription.failed")
        assert failed["error"]["code"] == "stt_failed"
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        assert h.socket.of_type("error")[-1]["error"]["code"] == "transcription_failed"
        assert stages.llm_requests == []  # nobody asked anything: no answer was generated
        stages.fail_transcribe_async = False
        append_audio(h.socket, speech(2))
        done = await h.socket.wait_type("response.done", count=2)
        assert done["response"]["status"] == "completed"


async def test_a_long_conversation_keeps_to_the_context_and_keeps_working() -> None:
    stages = FakeStages()
    stages.context_chars = 300
    async with Harness(stages, prompt_budget_tokens=1) as h:
        for turn in range(12):
            text = f"Turn {turn}: " + "words " * 8
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
            h.socket.client_sends(type="conversation.item.create", item=item)
            await answer_completes(h, count=turn + 1)
            sent = stages.llm_requests[-1].messages
            assert sum(len(m["content"]) for m in sent) <= stages.context_chars
            assert sent[-1]["content"] == text  # the newest turn is always in the prompt
        kept = h.session._kit.conversation.items
        assert len(kept) < 24 and isinstance(kept[-1], AssistantMessage)


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
JSON_VALUES = SCALARS | st.lists(SCALARS, max_size=3) | st.dictionaries(st.text(max_size=6), SCALARS, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    {"type": "response.create"},
                    {"type": "response.cancel"},
                    {"type": "input_audio_buffer.commit"},
                    {"type": "input_audio_buffer.clear"},
                    {"type": "conversation.item.truncate", "item_id": "item_x", "content_index": 0, "audio_end_ms": 5},
                    {
                        "type": "session.update",
                        "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
                    },
                ]
            ),
            st.dictionaries(
                st.sampled_from(["type", "event_id", "session", "item", "audio", "response"]),
                JSON_VALUES,
                max_size=4,
            ),
            st.text(max_size=40),
        ),
        max_size=12,
    )
)
def test_random_event_sequences_never_kill_the_session(events: list[Any]) -> None:
    """Whatever the client sends, the session stays up and a normal answer follows."""

    async def scenario() -> None:
        async with Harness() as h:
            for event in events:
                text = event if isinstance(event, str) else json.dumps(event)
                h.socket.incoming.put_nowait({"type": "websocket.receive", "text": text})
            h.socket.client_sends(type="response.cancel")
            h.socket.client_sends(type="input_audio_buffer.clear")
            await h.socket.wait_type(
                "input_audio_buffer.cleared", count=1 + sum(e == {"type": "input_audio_buffer.clear"} for e in events)
            )
            assert h.task is not None and not h.task.done()
            assert not [e for e in h.socket.of_type("error") if e["error"]["type"] == "server_error"]
            h.socket.client_sends(
                type="session.update",
                session={"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}},
            )
            done_before = len(h.socket.of_type("response.done"))
            h.socket.client_sends(type="response.create")
            done = await h.socket.wait_type("response.done", count=done_before + 1)
            assert done["response"]["status"] == "completed"

    asyncio.run(scenario())
