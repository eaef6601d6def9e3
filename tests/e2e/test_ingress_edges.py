"""The edges on a real local Ray cluster, through real WebSockets, with synthetic engines:
bad input, limits, a flooding client beside a normal one, the session cap under a burst,
access control, readiness. Every bad input gets an ``error`` and the session goes on."""

import asyncio
import base64
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray import serve
from realtime_client import receive
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from deployments.app import build_app
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from handlers.synthetic import question_tone

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

APP = "voice-edges"
GUARDED_APP = "voice-guarded"
MAX_SESSIONS = 4
TINY = {"num_cpus": 0.01}
ORIGIN = "https://agent.example"


def synthetic_app(**ingress: Any) -> dict[str, Any]:
    return {
        "synthetic": {"answer_words": 8, "tokens_per_s": 40, "speech_s_per_word": 0.1},
        "ingress": {"deployment": {**TINY, "max_ongoing_requests": 32}, "scope": {"num_hosts": 1}, **ingress},
        **{stage: {"deployment": {**TINY, "max_ongoing_requests": 32}} for stage in ("vad", "stt", "llm", "tts")},
    }


@pytest.fixture(scope="module")
def edges(serve_port: int) -> Iterator[str]:
    limits = {"audio_rate": 2.0, "audio_burst_s": 4.0, "strikes": 10, "max_event_bytes": 256 * 1024}
    serve.run(build_app(synthetic_app(max_sessions=MAX_SESSIONS, limits=limits)), name=APP, route_prefix="/edges")
    yield f"127.0.0.1:{serve_port}/edges"
    serve.delete(APP)


@pytest.fixture(scope="module")
def guarded(serve_port: int) -> Iterator[str]:
    config = synthetic_app(max_sessions=2, api_key_env="S2S_E2E_API_KEY", allowed_origins=[ORIGIN])
    serve.run(build_app(config), name=GUARDED_APP, route_prefix="/guarded")
    yield f"ws://127.0.0.1:{serve_port}/guarded/v1/realtime"
    serve.delete(GUARDED_APP)


async def answered(ws: ClientConnection, question: int = 3) -> str:
    """Ask a text question; the scripted answer's transcript once ``response.done`` is completed."""
    await ws.send(text_item(f"Question {question}."))
    await ws.send(json.dumps({"type": "response.create"}))
    done = await receive(ws, "response.done")
    assert done["response"]["status"] == "completed"
    transcript: str = done["response"]["output"][0]["content"][0]["transcript"]
    return transcript


def vad_update(**turn_detection: Any) -> str:
    turn = {"type": "server_vad", **turn_detection}
    return json.dumps(
        {"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": turn}}}}
    )


def text_item(text: str) -> str:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"type": "conversation.item.create", "item": item})


BAD = [
    ("[" * 1000 + "]" * 1000, "invalid_json"),
    ('{"type": "session.update", "event_id": ' + "7" * 5000 + "}", "invalid_json"),
    ('{"type": {"nested": true}}', "invalid_event"),
    (vad_update(threshold=5), "invalid_value"),
    (vad_update(silence_duration_ms=20000), "invalid_value"),
    (vad_update(prefix_padding_ms=-1), "invalid_value"),
    (
        json.dumps({"type": "conversation.item.truncate", "item_id": "x", "content_index": 7, "audio_end_ms": -1}),
        "invalid_value",
    ),
    (text_item("x" * 100_000), "invalid_value"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 300_000}), "event_too_large"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "%%%"}), "invalid_value"),
]


async def test_bad_input_matrix_gets_errors_and_the_session_goes_on(edges: str) -> None:
    async with connect(f"ws://{edges}/v1/realtime", max_size=None) as ws:
        await receive(ws, "session.created")
        for raw, code in BAD:
            await ws.send(raw)
            error = await receive(ws, "error")
            assert error["error"]["code"] == code, raw[:80]
        assert (await answered(ws, 3)).startswith("Answer 3:")


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
JSON_VALUES = SCALARS | st.lists(SCALARS, max_size=3) | st.dictionaries(st.text(max_size=6), SCALARS, max_size=3)
EVENTS = st.one_of(
    st.sampled_from(
        [
            {"type": "response.create"},
            {"type": "response.cancel"},
            {"type": "input_audio_buffer.commit"},
            {"type": "input_audio_buffer.clear"},
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(4800)).decode()},
            {"type": "conversation.item.truncate", "item_id": "x", "content_index": 0, "audio_end_ms": 5},
        ]
    ),
    st.dictionaries(
        st.sampled_from(["type", "event_id", "session", "item", "audio"]),
        JSON_VALUES,
        max_size=3,
    ).map(json.dumps),
    st.text(max_size=30),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(EVENTS, min_size=1, max_size=10))
def test_random_event_sequences_never_crash_or_hang_the_ingress(edges: str, events: list[Any]) -> None:
    async def scenario() -> None:
        async with connect(f"ws://{edges}/v1/realtime") as ws:
            await receive(ws, "session.created")
            for event in events:
                await ws.send(event if isinstance(event, str) else json.dumps(event))
            await ws.send(json.dumps({"type": "response.cancel"}))
            await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
            await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": "x"}}))
            await receive(ws, "session.updated")  # every event before it was served, none hung it
            assert (await answered(ws, 5)).startswith("Answer 5:")

    asyncio.run(scenario())


def question_pcm(number: int) -> bytes:
    tone = np.concatenate([question_tone(number, 1.0), np.zeros(SPEECH_RATE, np.float32)])
    return float_to_pcm16(resample(tone, SPEECH_RATE, REALTIME_RATE))


async def test_a_flooding_client_is_refused_then_closed_and_a_normal_one_is_unaffected(edges: str) -> None:
    async def flood() -> tuple[list[str], int | None]:
        codes: list[str] = []
        chunk = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(48000)).decode()})
        async with connect(f"ws://{edges}/v1/realtime") as ws:
            await receive(ws, "session.created")
            try:
                for _ in range(200):  # 200 s of audio, unpaced
                    await ws.send(chunk)
                async for message in ws:
                    event = json.loads(message)
                    if event["type"] == "error":
                        codes.append(event["error"]["code"])
            except ConnectionClosed:
                pass
            return codes, ws.close_code

    async def talk() -> str:
        async with connect(f"ws://{edges}/v1/realtime") as ws:
            await receive(ws, "session.created")
            pcm = question_pcm(7)
            frame = REALTIME_RATE * 2 // 10
            for offset in range(0, len(pcm), frame):
                chunk = base64.b64encode(pcm[offset : offset + frame]).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
                await asyncio.sleep(0.1)  # a live microphone's pace, not synchronisation
            done = await receive(ws, "response.done")
            assert done["response"]["status"] == "completed"
            transcript: str = done["response"]["output"][0]["content"][0]["transcript"]
            return transcript

    (codes, close_code), answer = await asyncio.gather(flood(), talk())
    assert "input_audio_rate_exceeded" in codes
    assert codes[-1] == "too_many_violations" and close_code == 1008
    assert answer.startswith("Answer 7:")


async def test_the_session_cap_is_exact_under_a_burst_of_handshakes(edges: str) -> None:
    async def attempt() -> str:
        async with connect(f"ws://{edges}/v1/realtime") as ws:
            first = json.loads(await ws.recv())
            if first["type"] == "error":
                return str(first["error"]["code"])
            await hold.wait()
            return str(first["type"])

    hold = asyncio.Event()
    attempts = [asyncio.create_task(attempt()) for _ in range(3 * MAX_SESSIONS)]
    refused = 0
    for finished in asyncio.as_completed(attempts):
        if await finished == "session_limit_reached":
            refused += 1
        if refused == 2 * MAX_SESSIONS:
            hold.set()
    outcomes = [task.result() for task in attempts]
    assert outcomes.count("session.created") == MAX_SESSIONS
    assert outcomes.count("session_limit_reached") == 2 * MAX_SESSIONS


async def test_readiness_says_every_model_answers(edges: str) -> None:
    with urllib.request.urlopen(f"http://{edges}/readyz", timeout=30) as reply:
        body = json.loads(reply.read())
    assert body == {
        "ready": True,
        "models": {"vad": True, "stt": True, "llm": True, "tts": True},
        "unavailable": [],
    }


async def test_api_key_and_origin_are_checked_before_any_session(guarded: str) -> None:
    key = os.environ["S2S_E2E_API_KEY"]
    bearer = {"Authorization": f"Bearer {key}"}
    for headers, subprotocols in [({}, None), ({"Authorization": "Bearer wrong"}, None), ({}, ["realtime"])]:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(guarded, additional_headers=headers, subprotocols=subprotocols):
                pass
        assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        async with connect(guarded, additional_headers={**bearer, "Origin": "https://evil.example"}):
            pass
    async with connect(guarded, additional_headers={**bearer, "Origin": ORIGIN}) as ws:
        await receive(ws, "session.created")
    browser = ["realtime", f"openai-insecure-api-key.{key}"]
    async with connect(guarded, subprotocols=browser, additional_headers={"Origin": ORIGIN}) as ws:  # type: ignore[arg-type]
        assert ws.subprotocol == "realtime"
        assert (await answered(ws, 9)).startswith("Answer 9:")


def refusal_of(refused: InvalidStatus) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(refused.response.body or b"{}")["error"]
    return body


async def test_refusals_say_what_was_refused_and_a_wrong_path_is_404(guarded: str) -> None:
    key = os.environ["S2S_E2E_API_KEY"]
    cases = [
        ({}, "no API key"),
        ({"Authorization": "Bearer wrong"}, "is not this server's"),
        ({"Authorization": f"Bearer {key}", "Origin": "https://evil.example"}, "'https://evil.example'"),
    ]
    for headers, reason in cases:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(guarded, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403
        assert reason in refusal_of(refused.value)["message"]
    for typo in ("/v1/realtim", "/realtime"):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(guarded.removesuffix("/v1/realtime") + typo):
                pass
        assert refused.value.response.status_code == 404
        error = refusal_of(refused.value)
        assert error["code"] == "not_found" and "/v1/realtime (WebSocket)" in error["message"]
    http = guarded.replace("ws://", "http://").removesuffix("/v1/realtime") + "/v1/sessions"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(http, timeout=30)
    assert missing.value.code == 404 and "/healthz" in json.loads(missing.value.read())["error"]["message"]


def test_readiness_waits_for_a_loading_model_while_health_answers(serve_port: int) -> None:
    """While the LLM loads, the ingress is up (``/healthz`` 200) but not ready (``/readyz`` 503
    naming the LLM); once it has loaded, ready."""
    config = synthetic_app(max_sessions=2)
    config["synthetic"]["llm_load_s"] = 15
    base = f"http://127.0.0.1:{serve_port}/loading"
    deploying = threading.Thread(
        target=serve.run, args=(build_app(config),), kwargs={"name": "voice-loading", "route_prefix": "/loading"}
    )
    deploying.start()
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{base}/healthz"):
            assert time.monotonic() < deadline, "the ingress never came up"
            time.sleep(0.2)  # polling a server that is starting: there is no event to wait on
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"{base}/readyz", timeout=30)
        assert not_ready.value.code == 503
        assert json.loads(not_ready.value.read())["models"] == {"vad": True, "stt": True, "llm": False, "tts": True}
        deploying.join()
        with urllib.request.urlopen(f"{base}/readyz", timeout=30) as reply:
            assert reply.status == 200
    finally:
        deploying.join()
        serve.delete("voice-loading")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


async def test_a_client_that_vanishes_mid_flood_frees_its_session_at_once(edges: str) -> None:
    """No backlog hides the disconnect: the session ends within seconds of the client's
    socket going away, not after its queued audio has been worked through."""
    chunk = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(48000)).decode()})
    ws = await connect(f"ws://{edges}/v1/realtime")
    await receive(ws, "session.created")
    assert sessions(edges) == 1
    for _ in range(60):
        await ws.send(chunk)
    ws.transport.abort()  # gone without a close handshake, as a crashed client or a lost network
    vanished = time.monotonic()
    while sessions(edges) > 0:
        assert time.monotonic() - vanished < 5, "the session outlived its client"
        await asyncio.sleep(0.1)  # polling the server's count: there is no event to wait on


def sessions(edges: str) -> int:
    with urllib.request.urlopen(f"http://{edges}/healthz", timeout=10) as reply:
        return int(json.loads(reply.read())["sessions"])


async def test_shutdown_closes_open_sessions_with_going_away(serve_port: int) -> None:
    """On an application of its own (synthetic engines: it starts in seconds), so deleting it
    leaves the suite's application to the tests after it, in any order."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": {},
        "ingress": {"max_sessions": 2, "deployment": {**tiny, "max_ongoing_requests": 4}, "shutdown_poll_s": 0.5},
        **{stage: {"deployment": tiny} for stage in ("vad", "stt", "llm", "tts")},
    }
    serve.run(build_app(config), name="voice-shutdown", route_prefix="/shutdown")
    async with connect(f"ws://127.0.0.1:{serve_port}/shutdown/v1/realtime?model=s2s") as client:
        created = json.loads(await asyncio.wait_for(client.recv(), 10))
        assert created["type"] == "session.created"
        deleting = asyncio.ensure_future(asyncio.to_thread(serve.delete, "voice-shutdown"))
        await asyncio.wait_for(client.wait_closed(), 30)
        await deleting
    assert client.close_code == 1001
