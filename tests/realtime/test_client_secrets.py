"""Ephemeral client secrets: their rules on both stores, what the store keeps of every
secret (keyed digests, never a bare hash), who ``Access`` lets in with what, and the route
as the stock ``openai`` SDK calls it."""

import hashlib
import time
from typing import Any

import httpx
import openai
import pytest
import redis
from fastapi import FastAPI
from openai import AsyncOpenAI
from starlette.requests import HTTPConnection

from cluster.redis_server import RedisServer
from deployments.access import API_KEY_SUBPROTOCOL, Access, Admission
from deployments.client_secret_route import ClientSecretRoute
from deployments.client_secrets import ClientSecretGrant, ClientSecrets
from deployments.config import IngressConfig
from deployments.keyed_digests import KeyedDigests
from deployments.realtime.settings import SessionSettings
from deployments.session_store.ray_records import ReplicaSecrets
from deployments.session_store.redis_records import RedisRecords
from deployments.session_store.store import ResumeToken, SessionStore

KEY = b"the server's key"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def grant(session: dict[str, Any] | None = None, one_use: bool = False, call_sid: str = "") -> ClientSecretGrant:
    return {"session": session or {}, "one_use": one_use, "call_sid": call_sid}


def until(check: Any, timeout_s: float = 5.0) -> None:
    """Poll ``check`` until true: a secret's expiry is the passing of time itself."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.02)


def test_a_secret_opens_until_it_expires_and_a_one_use_secret_once(new_records: Any) -> None:
    records = new_records()
    lasting, once, brief = grant({"instructions": "Be brief."}), grant(one_use=True, call_sid="CA1"), grant()
    records.add_client_secret(b"lasting", lasting, 300.0)
    records.add_client_secret(b"once", once, 300.0)
    records.add_client_secret(b"brief", brief, 0.2)
    assert records.redeem_client_secret(b"lasting", "") == lasting
    assert records.redeem_client_secret(b"lasting", "CA9") == lasting, "until it expires, as often as asked"
    assert records.redeem_client_secret(b"once", "") is None, "a call's secret opens no other session"
    assert records.redeem_client_secret(b"once", "CA2") is None, "nor another call's, and is not spent by it"
    assert records.redeem_client_secret(b"once", "CA1") == once
    assert records.redeem_client_secret(b"once", "CA1") is None, "a one-use secret is gone"
    assert records.redeem_client_secret(b"nobody's", "") is None
    assert records.redeem_client_secret(b"brief", "") == brief
    until(lambda: records.redeem_client_secret(b"brief", "") is None)
    assert records.redeem_client_secret(b"lasting", "") == lasting, "untouched"


async def test_the_store_keeps_keyed_digests_of_every_secret_and_nothing_it_could_present(
    redis_server: RedisServer,
) -> None:
    """A reader of Redis finds neither the API key, a resume token, a client secret, nor a
    bare SHA-256 of any of them (which would let it test guesses of the key offline); a
    server with another session secret can use none of what is there."""
    prefix = "test:digests:"
    records = RedisRecords.connect(redis_server.url, prefix, 300.0)
    other_records = RedisRecords.connect(redis_server.url, prefix, 300.0)
    client = redis.Redis(port=redis_server.port)
    try:
        digests = KeyedDigests(b"the session secret")
        store = SessionStore(records, 300.0, digests, KEY)
        stored = await store.new_session(with_key=True)
        minted = await ClientSecrets(records, digests).mint({"instructions": "x"}, 60)
        token = ResumeToken.parse(stored.resume_token)
        assert token is not None
        kept = b"".join(
            key + b"".join(client.hgetall(key).values()) if client.type(key) == b"hash" else key + client.get(key)
            for key in client.keys(prefix + "*")
        )
        for secret in (KEY, token.secret.encode(), minted.value.encode()):
            assert secret not in kept
            bare = hashlib.sha256(secret)
            assert bare.digest() not in kept and bare.hexdigest().encode() not in kept

        foreign = KeyedDigests(b"another server's secret")
        assert await ClientSecrets(other_records, foreign).redeem(minted.value) is None
        assert await SessionStore(other_records, 300.0, foreign, KEY).resumed_session(str(token), True) is None
        assert await store.resumed_session(str(token), with_key=False) is None, "a session opened with the key"
        assert await store.resumed_session(str(token), with_key=True) is not None
    finally:
        await records.close()
        await other_records.close()
        client.close()


def connection(authorization: str = "", subprotocols: tuple[str, ...] = ()) -> tuple[HTTPConnection, list[str]]:
    headers = [(b"authorization", authorization.encode())] if authorization else []
    scope = {"type": "websocket", "path": "/v1/realtime", "headers": headers, "subprotocols": list(subprotocols)}
    return HTTPConnection(scope), list(subprotocols)


async def test_access_lets_in_the_key_or_a_live_client_secret_with_its_settings_and_says_why_not() -> None:
    clock = Clock()
    secrets = ClientSecrets(ReplicaSecrets(clock), KeyedDigests(b"s"), clock)
    access = Access(KEY, None, secrets)
    made = await secrets.mint({"instructions": "Be brief."}, 60)
    phone = await secrets.mint({}, 60, one_use=True, call_sid="CA1")

    assert await access.admit(*connection(f"Bearer {KEY.decode()}")) == Admission(with_key=True)
    by_secret = await access.admit(*connection(subprotocols=("realtime", API_KEY_SUBPROTOCOL + made.value)))
    assert by_secret == Admission(with_key=False, opening={"instructions": "Be brief."})
    assert await access.admit(*connection(f"Bearer {made.value}")) == by_secret, "a WebRTC call's bearer"
    assert "unknown or has expired" in str(await access.admit(*connection(f"Bearer {phone.value}"))), "a call's own"
    assert "not this server's" in str(await access.admit(*connection("Bearer guess")))
    assert "no API key or client secret" in str(await access.admit(*connection()))
    assert await access.admit(*connection(), resuming=True) == Admission(with_key=False), "the token decides"

    clock.now += 61
    assert "unknown or has expired" in str(await access.admit(*connection(f"Bearer {made.value}")))
    expired_resume = await access.admit(*connection(f"Bearer {made.value}"), resuming=True)
    assert expired_resume == Admission(with_key=False), "a call outlives its secret: its token resumes it"

    open_server = Access(None, None, secrets)
    assert await open_server.admit(*connection()) == Admission(with_key=False)
    assert "expired" in str(await open_server.admit(*connection(f"Bearer {made.value}")))


@pytest.fixture
def route_app() -> tuple[FastAPI, ClientSecrets]:
    secrets = ClientSecrets(ReplicaSecrets(), KeyedDigests(b"s"))
    route = ClientSecretRoute(
        Access(KEY, None, secrets), secrets, lambda: SessionSettings.for_new_session(IngressConfig(), "smollm2")
    )
    app = FastAPI()
    app.post("/v1/realtime/client_secrets")(route.create)
    return app, secrets


def sdk(app: FastAPI, key: str) -> AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return AsyncOpenAI(api_key=key, base_url="http://ingress/v1", http_client=http, max_retries=0)


async def test_the_openai_sdk_makes_a_secret_that_opens_sessions_with_its_settings(
    route_app: tuple[FastAPI, ClientSecrets],
) -> None:
    app, secrets = route_app
    session = {"type": "realtime", "instructions": "Answer in French.", "output_modalities": ["text"]}
    made = await sdk(app, KEY.decode()).realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 120},
        session=session,  # type: ignore[arg-type]
    )
    assert made.value.startswith("ek_") and abs(made.expires_at - (time.time() + 120)) < 5
    assert made.session.instructions == "Answer in French."  # type: ignore[union-attr]
    assert made.session.output_modalities == ["text"]  # type: ignore[union-attr]
    found = await secrets.redeem(made.value)
    assert found is not None and found["session"] == session

    default = await sdk(app, KEY.decode()).realtime.client_secrets.create()
    assert default.expires_at - time.time() > 590, "ten minutes unless asked"

    with pytest.raises(openai.PermissionDeniedError):
        await sdk(app, made.value).realtime.client_secrets.create(), "a secret never makes another"
    with pytest.raises(openai.PermissionDeniedError):
        await sdk(app, "guess").realtime.client_secrets.create()


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"expires_after": {"anchor": "created_at", "seconds": 5}}, "expires_after.seconds"),
        ({"expires_after": {"anchor": "created_at", "seconds": 7201}}, "expires_after.seconds"),
        ({"session": {"type": "realtime", "output_modalities": ["video"]}}, "session.output_modalities"),
        ({"session": {"type": "realtime", "instructions": "x" * 5000}}, "session.instructions"),
        ({"sesion": {}}, "sesion"),
    ],
)
async def test_a_bad_request_is_a_400_naming_what_was_wrong(
    route_app: tuple[FastAPI, ClientSecrets], body: dict[str, Any], param: str
) -> None:
    app, _ = route_app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingress") as http:
        answer = await http.post(
            "/v1/realtime/client_secrets", json=body, headers={"Authorization": f"Bearer {KEY.decode()}"}
        )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert param in error.get("param", "") + error["message"], error
