"""Ephemeral client secrets on a real local Ray cluster with the synthetic engines: the
stock ``openai`` SDK makes one with the API key; it opens sessions (WebSocket as a browser
opens them, and WebRTC) with its settings until it expires, several at once with one
interrupted; then it is refused, and a session it opened still resumes with its token."""

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from ray import serve
from realtime_client import receive
from voice_page import hang_up, open_page
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from deployments.app import build_app
from loadtest.client.webrtc_call import Call, post_offer

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

APP = "voice-secrets"
TINY = {"num_cpus": 0.01}
TTL_S = 10
"""The shortest a secret may live: the test waits it out."""


@pytest.fixture(scope="module")
def base(serve_port: int) -> Iterator[str]:
    stage = {"deployment": {**TINY, "max_ongoing_requests": 32}}
    config = {
        "synthetic": {"answer_words": 40, "tokens_per_s": 40, "speech_s_per_word": 0.1},
        "ingress": {**stage, "scope": {"num_hosts": 1}, "max_sessions": 6, "api_key_env": "S2S_E2E_API_KEY"},
        **dict.fromkeys(("vad", "stt", "llm", "tts"), stage),
    }
    serve.run(build_app(config), name=APP, route_prefix="/secrets")
    yield f"127.0.0.1:{serve_port}/secrets"
    serve.delete(APP)


def ask(text: str) -> list[str]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return [json.dumps({"type": "conversation.item.create", "item": item}), json.dumps({"type": "response.create"})]


def browser(secret: str) -> list[str]:
    return ["realtime", f"openai-insecure-api-key.{secret}"]


async def test_a_client_secret_opens_sessions_with_its_settings_until_it_expires(base: str) -> None:
    """A secret of the shortest life opens a session at once and is refused after it (the
    session it opened still resumes, with its token alone); a longer one carries the rest,
    so a slow machine cannot outlast it: three sessions at once, one cut, and a WebRTC call."""
    sdk = openai.AsyncOpenAI(api_key=os.environ["S2S_E2E_API_KEY"], base_url=f"http://{base}/v1", max_retries=0)
    session = {"type": "realtime", "instructions": "Answer like a pirate.", "output_modalities": ["text"]}
    brief = await sdk.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": TTL_S},
        session=session,  # type: ignore[arg-type]
    )
    url = f"ws://{base}/v1/realtime"
    async with connect(url, subprotocols=browser(brief.value)) as leaving:  # type: ignore[arg-type]
        created = await receive(leaving, "session.created")
        assert created["session"]["instructions"] == "Answer like a pirate."
        token = created["session"]["resume_token"]

    made = await sdk.realtime.client_secrets.create(session=session)  # type: ignore[arg-type]
    async with (
        connect(url, subprotocols=browser(made.value)) as calm,  # type: ignore[arg-type]
        connect(url, subprotocols=browser(made.value)) as cut,  # type: ignore[arg-type]
        connect(url, subprotocols=browser(made.value)) as other,  # type: ignore[arg-type]
    ):
        opened = [await receive(ws, "session.created") for ws in (calm, cut, other)]
        for one in opened:
            assert one["session"]["instructions"] == "Answer like a pirate."
            assert one["session"]["output_modalities"] == ["text"]
        changed = {"type": "realtime", "instructions": "Answer like a poet."}
        await calm.send(json.dumps({"type": "session.update", "session": changed}))
        await receive(calm, "session.updated")
        for ws in (calm, cut, other):
            for event in ask("Question 4."):
                await ws.send(event)
        await receive(cut, "response.output_text.delta")
        await cut.send(json.dumps({"type": "response.cancel"}))
        assert (await receive(cut, "response.done"))["response"]["status"] == "cancelled"
        for ws in (calm, other):
            assert (await receive(ws, "response.done"))["response"]["status"] == "completed"

    # A resume that presents the (still live) secret keeps the settings the session had.
    resume = f"{url}?resume_token={opened[0]['session']['resume_token']}"
    async with connect(resume, subprotocols=browser(made.value)) as calm_again:  # type: ignore[arg-type]
        assert (await receive(calm_again, "session.created"))["session"]["instructions"] == "Answer like a poet."

    calls = f"http://{base}/v1/realtime/calls"
    webrtc = Call()
    try:
        status, answer = await webrtc.dial(calls, bearer=made.value)
        assert status == 201, answer
        call_opened = await webrtc.until(lambda e: e["type"] == "session.created")
        assert call_opened["session"]["output_modalities"] == ["text"]
    finally:
        await webrtc.hang_up()

    await asyncio.sleep(max(0.0, brief.expires_at + 1 - time.time()))  # the secret's life is the event
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, subprotocols=browser(brief.value)):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403
    assert b"expired" in (refused.value.response.body or b"")
    status, message = await asyncio.to_thread(post_offer, calls, "v=0\nnot an offer", brief.value)
    assert status == 403 and "expired" in message, "checked before the offer is read"

    async with connect(f"{url}?resume_token={token}") as resumed:  # its token alone: a call outlives its secret
        again = await receive(resumed, "session.created")
        assert again["session"]["instructions"] == "Answer like a pirate."
    with pytest.raises(openai.PermissionDeniedError):
        await openai.AsyncOpenAI(api_key=made.value, base_url=f"http://{base}/v1").realtime.client_secrets.create()


async def test_a_session_opened_with_the_key_resumes_only_with_the_key(base: str) -> None:
    """The key's own sessions stay bound to it: a token taken from one resumes nothing alone."""
    key = os.environ["S2S_E2E_API_KEY"]
    url = f"ws://{base}/v1/realtime"
    async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        token = (await receive(ws, "session.created"))["session"]["resume_token"]
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{url}?resume_token={token}"):
            pass
    assert refused.value.response.status_code == 403
    bearer = {"Authorization": f"Bearer {key}"}
    async with connect(f"{url}?resume_token={token}", additional_headers=bearer) as again:
        assert (await receive(again, "session.created"))["session"]["resume_token"] != token


def test_the_ice_servers_take_a_client_secret(base: str) -> None:
    sdk = openai.OpenAI(api_key=os.environ["S2S_E2E_API_KEY"], base_url=f"http://{base}/v1", max_retries=0)
    secret = sdk.realtime.client_secrets.create().value
    servers = f"http://{base}/v1/realtime/ice-servers"
    request = urllib.request.Request(servers, headers={"Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200 and isinstance(json.loads(reply.read()), list)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(servers, timeout=30)
    assert refused.value.code == 403


RECORD_CREDENTIALS = """
window.__presented = [];
const PageWebSocket = window.WebSocket;
window.WebSocket = function (url, protocols) {
  window.__presented.push(...(protocols || []));
  return new PageWebSocket(url, protocols);
};
Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3, prototype: PageWebSocket.prototype });
const pageFetch = window.fetch;
window.fetch = (url, options = {}) => {
  const auth = (options.headers || {}).Authorization;
  if (auth && !String(url).endsWith("/client_secrets")) window.__presented.push(auth);
  return pageFetch(url, options);
};
"""
"""What the page presents to the server, but for the one trade of a typed key for a secret."""


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
async def test_the_voice_page_trades_a_typed_key_for_a_client_secret_and_talks_with_that_alone(
    browser_with: Callable[[Path | None], Any], base: str, transport: str
) -> None:
    key = os.environ["S2S_E2E_API_KEY"]
    page = await open_page(await browser_with(None), f"ws://{base}/v1", transport, key=key, watch=RECORD_CREDENTIALS)
    presented: list[str] = await page.evaluate("window.__presented")
    assert presented and not [p for p in presented if key in p], presented
    assert all("ek_" in p for p in presented if p != "realtime"), presented
    await hang_up(page)
