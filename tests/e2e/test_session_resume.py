"""Resume on a real local Ray cluster, with synthetic engines, through the stock ``openai``
SDK: sessions outlive the death of their ingress replica (their records live in the
store's detached actor), come back with their id and items on the replacement, and every
token that is not a live one is refused before any session state is touched."""

import asyncio
import importlib.util
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import serve
from realtime_client import Client, open_client
from test_failures import replicas, wait_until_ready
from voice_page import hang_up, open_page, say, spoken, until
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from deployments.app import build_app
from handlers.synthetic import question_tone
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

APP = "voice-resume"
TINY = {"num_cpus": 0.01}


DRAIN_S = 5.0


def app_config(instructions: str) -> dict[str, Any]:
    ingress = {
        "max_sessions": 6,
        "instructions": instructions,
        "drain_s": DRAIN_S,
        "shutdown_poll_s": 0.5,
        "deployment": {**TINY, "max_ongoing_requests": 8, "graceful_shutdown_timeout_s": 15},
        "scope": {"num_hosts": 1},
    }
    return {
        "synthetic": {"answer_words": 6, "tokens_per_s": 40, "speech_s_per_word": 0.05},
        "ingress": ingress,
        **{stage: {"deployment": {**TINY, "max_ongoing_requests": 16}} for stage in ("vad", "stt", "llm", "tts")},
    }


@pytest.fixture(scope="module")
def resume_url(serve_port: int) -> Iterator[str]:
    serve.run(build_app(app_config("Version one.")), name=APP, route_prefix="/resume")
    yield f"ws://127.0.0.1:{serve_port}/resume/v1"
    serve.delete(APP)


def session(
    url: str, resume_token: str | None = None, drain_notice: bool = False
) -> AbstractAsyncContextManager[Client]:
    """A session through the stock SDK (resuming one when given its token, told of a drain
    when it asks), once created."""
    query = {"resume_token": resume_token} if resume_token is not None else {}
    return open_client(url, query | ({"drain_notice": "true"} if drain_notice else {}))


def created(client: Client) -> Any:
    return client.of_type("session.created")[0].session


async def answer(client: Client, question: int) -> None:
    """Ask ``question`` in text; its answer completes."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Question {question}."}]}
    await client.connection.conversation.item.create(item=item)
    await client.connection.response.create()
    done = await client.until(lambda e: e.type == "response.done", timeout_s=60)
    assert done.response.status == "completed"
    assert done.response.output[0].content[0].transcript.startswith(f"Answer {question}:")


def finished_items(client: Client) -> list[str]:
    """The ids of the items the client was told are done, in the order it was told (those
    of a resumed session's replay come before anything it asked after connecting)."""
    return [event.item.id for event in client.of_type("conversation.item.done")]


async def refused(url: str, token: str) -> int:
    """The HTTP status a resume with ``token`` gets (it must never be accepted)."""
    with pytest.raises(InvalidStatus) as refusal:
        async with connect(f"{url}/realtime?resume_token={token}"):
            pass
    return refusal.value.response.status_code


async def test_sessions_resume_on_a_new_replica_after_theirs_died_and_wrong_tokens_touch_nothing(
    resume_url: str,
) -> None:
    """Two sessions on the one ingress replica; it is killed (SIGKILL: nothing is told) and
    Serve replaces it; both resume on the replacement with their ids and items, the tokens
    they held are used up, and made-up, used or malformed tokens are refused with 403."""
    tokens: dict[str, tuple[str, str]] = {}
    items: dict[str, list[str]] = {}
    async with session(resume_url) as a, session(resume_url) as b:
        for name, client, question in (("a", a, 1), ("b", b, 2)):
            session_id, token = created(client).id, created(client).resume_token
            assert token.startswith(f"{session_id}.") and len(token) > 40
            tokens[name] = (session_id, token)
            await answer(client, question)
            items[name] = finished_items(client)
        assert tokens["a"][0] != tokens["b"][0] and len(items["a"]) == len(items["b"]) == 2
        (ingress,) = replicas("RealtimeIngress", APP)
        ray.kill(ingress, no_restart=True)
        for client in (a, b):
            with pytest.raises((ConnectionClosed, AssertionError)):  # the socket is gone with its replica
                await client.until(lambda e: False, timeout_s=30)
    await asyncio.to_thread(wait_until_ready, resume_url.replace("ws://", "http://").removesuffix("/v1") + "/readyz")

    for made_up in ("sess_nobody.secret", f"{tokens['a'][0]}.guess", "not-a-token", tokens["a"][1][:-1]):
        assert await refused(resume_url, made_up) == 403
    async with session(resume_url, tokens["a"][1]) as a, session(resume_url, tokens["b"][1]) as b:
        for name, client, question in (("a", a, 3), ("b", b, 4)):
            again = created(client)
            assert again.id == tokens[name][0] and again.resume_token not in (None, tokens[name][1])
            await answer(client, question)  # its events come after the replay's
            assert finished_items(client)[:-2] == items[name], "its items, replayed in order, and no one else's"
        assert await refused(resume_url, tokens["a"][1]) == 403, "a token opens one connection"
        assert not a.of_type("error") and not b.of_type("error")


@pytest.mark.haproxy  # also through HAProxy, where a stopped replica cuts what is open at its drain's end
async def test_a_redeploy_drains_the_old_replicas_sessions_and_they_resume_on_the_new_one(resume_url: str) -> None:
    """A new version of the app (one changed argument) under two sessions on the same
    replica: the one that asked is told (``session.draining``), both stay open until
    ``drain_s`` ends, then close with 1012, and both resume on the new replica with their
    items. (A redeploy through ``serve.run`` replaces the model deployments too, with a gap of
    a few seconds, so no answer is asked for during the drain.)"""
    tokens: dict[str, tuple[str, str]] = {}
    items: dict[str, list[str]] = {}
    async with session(resume_url, drain_notice=True) as a, session(resume_url) as b:
        for name, client, question in (("a", a, 1), ("b", b, 2)):
            tokens[name] = (created(client).id, created(client).resume_token)
            await answer(client, question)
        redeploy = asyncio.create_task(
            asyncio.to_thread(serve.run, build_app(app_config("Version two.")), name=APP, route_prefix="/resume")
        )
        notice = await a.until(lambda e: e.type == "session.draining", timeout_s=60)
        told_at = time.monotonic()
        assert notice.closes_in_ms == DRAIN_S * 1000
        for name, client in (("a", a), ("b", b)):
            with pytest.raises(ConnectionClosed) as closed:
                await client.until(lambda e: False, timeout_s=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
            items[name] = finished_items(client)
        assert time.monotonic() - told_at > DRAIN_S - 1, "the sessions were kept for the drain"
        assert not b.of_type("session.draining"), "only a client that asked is told"
        await redeploy
    for name, question in (("a", 4), ("b", 5)):
        async with session(resume_url, tokens[name][1]) as again:
            assert created(again).id == tokens[name][0]
            await answer(again, question)
            assert finished_items(again)[:-2] == items[name]


async def test_the_voice_page_resumes_its_session_by_itself_and_keeps_its_conversation(
    resume_url: str, browser_with: Callable[[Path | None], Any]
) -> None:
    """The voice page (WebSocket) and an SDK session on the one ingress replica, each with
    an answered question; the replica is killed. The page shows "reconnecting…", resumes
    the same session on the replacement by itself (retrying while there is none), keeps its
    conversation on screen, and its next spoken question is answered; the SDK session
    resumes with its own items alone."""
    page = await open_page(await browser_with(None), resume_url, "websocket", scripted_microphone=True)
    await say(page, spoken(question_tone(7, 1.2)))
    await until(page, "window.s2s.stats.responses >= 1", 60, "the first question was not answered")
    session_id = await page.evaluate("window.s2s.sessionId")
    on_screen = await page.evaluate("[...document.querySelectorAll('li')].map(e => e.id + e.textContent)")
    async with session(resume_url) as other:
        other_token = created(other).resume_token
        await answer(other, 1)
        other_items = finished_items(other)
        (ingress,) = replicas("RealtimeIngress", APP)
        ray.kill(ingress, no_restart=True)
        await until(page, "document.getElementById('status').textContent === 'reconnecting…'", 30, "not told")
    await until(page, "window.s2s.connected && window.s2s.resumes === 1", 60, "the page did not resume")
    assert await page.evaluate("window.s2s.sessionId") == session_id
    assert "(resumed)" in await page.inner_text("#status")
    assert await page.evaluate("[...document.querySelectorAll('li')].map(e => e.id + e.textContent)") == on_screen
    await say(page, spoken(question_tone(9, 1.2)))
    await until(page, "window.s2s.stats.responses >= 2", 60, "the question after the resume was not answered")
    assert await page.evaluate("window.s2s.stats.errors") == []
    async with session(resume_url, other_token) as other:
        await answer(other, 2)  # its events come after the replay's
        assert finished_items(other)[:-2] == other_items, "its items, none of the page's"
    await hang_up(page)


async def recent_turns(resume_url: str) -> int:
    """How many turns the ingress replica has answered lately (``/stats/turns``)."""
    stats = resume_url.replace("ws://", "http://").removesuffix("/v1") + "/stats/turns"

    def read() -> int:
        with urllib.request.urlopen(stats, timeout=10) as reply:
            return len(json.loads(reply.read()))

    return await asyncio.to_thread(read)


async def test_the_load_harness_resumes_its_sessions_when_their_replica_is_killed(
    resume_url: str, tmp_path: Any
) -> None:
    """Three harness sessions (``--resume``) on the one ingress replica, which is killed once
    each has been answered: every session resumes on the replacement and finishes its
    script, and nothing stale or foreign arrives. A kill loses at most the last record
    write's changes, so at most one item per lost connection may be missing."""
    config = LoadConfig(
        f"{resume_url}/realtime", 3, 5, 0.3, 0.0, ramp_s=0, duration_s=None, seed=2, calibrate=False, resume=True
    )
    before = await recent_turns(resume_url)
    harness = asyncio.create_task(run_load(config))
    while await recent_turns(resume_url) < before + 3:
        assert not harness.done(), harness
        await asyncio.sleep(0.2)  # the replica's own count: no event reaches the test
    (ingress,) = replicas("RealtimeIngress", APP)
    ray.kill(ingress, no_restart=True)
    summary = write(await harness, tmp_path / "resume.json")
    print(json.dumps(summary["resume"]))  # for whoever reads the log

    counts, resume = summary["counts"], summary["resume"]
    assert resume["connections_lost"] >= 3 and resume["by_reason"].get("1006", 0) >= 3, resume
    assert resume["resumed"] == resume["connections_lost"] and resume["not_resumed"] == 0, resume
    assert resume["items_seen_before_loss"] >= 6 and resume["items_lost"] <= resume["connections_lost"], resume
    assert counts["disconnects"] == counts["stale_bytes"] == counts["leaks"] == 0, counts
    assert counts["turns"] >= 15 and counts["completed"] >= 12, counts


def chat_example() -> Any:
    """``examples/chat.py``, the README's resuming client, as a module."""
    spec = importlib.util.spec_from_file_location("chat_example", Path(__file__).parents[2] / "examples" / "chat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_chat_example_keeps_its_conversation_through_a_killed_replica(resume_url: str) -> None:
    """The example's chat asks three questions; the only ingress replica is killed once the
    first is answered: the chat resumes the same session on the replacement (the stock SDK,
    ``extra_query``) and gets the other two answers."""

    async def kill_after_the_first(answer: str) -> None:
        if answer.startswith("Answer 1:"):
            (ingress,) = replicas("RealtimeIngress", APP)
            ray.kill(ingress, no_restart=True)

    questions = ["Question 1.", "Question 2.", "Question 3."]
    answers, sessions = await chat_example().chat(resume_url, questions, kill_after_the_first)
    assert [answer.split(":")[0] for answer in answers] == ["Answer 1", "Answer 2", "Answer 3"], answers
    assert len(sessions) >= 2 and len(set(sessions)) == 1, "resumed: the same session on a new connection"
